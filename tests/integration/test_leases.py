"""A run is executing in one place at a time, even when it outlives its lease.

The heartbeat renews the leases of the attempts executing here; an attempt whose lease was
taken over, or could not be confirmed until shortly before it runs out, is stopped at once
(a command's process group gets SIGKILL, never a grace period), so another replica can take the
run over without two executions overlapping. These tests drive the real loop and ledger on
both databases with a store whose renewal is held, fails, or answers "not yours".
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Awaitable, Callable, Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
import structlog

from core.runners.fake import FakeRunnerType, sleep
from core.storage import Run
from tests.integration.engine_kit import (
    HOURLY,
    MakeEngine,
    fetch_run,
    process_alive,
    spec,
    wait_for,
    wait_status,
)
from web.scheduler import SchedulerLoop

LEASE = 3.0  # long enough that a held renewal and a start fit well inside one lease


class GatedRenewal:
    """Wraps ``Ledger.renew_leases``: while ``hold`` is set, a renewal waits (after it was
    asked, before it reaches the database) until ``release``."""

    def __init__(self, real: object) -> None:
        self.real = real
        self.held = asyncio.Event()
        self.waiting = asyncio.Event()
        self._open = asyncio.Event()
        self._open.set()
        self.asked: list[list[uuid.UUID]] = []

    def hold(self) -> None:
        self._open.clear()

    def release(self) -> None:
        self._open.set()

    async def __call__(
        self, now: datetime, run_ids: Sequence[uuid.UUID] | None = None
    ) -> dict[uuid.UUID, bool]:
        self.asked.append(list(run_ids or ()))
        if not self._open.is_set():
            self.waiting.set()
            await self._open.wait()
        return await self.real(now, run_ids)  # type: ignore[operator, no-any-return]


def executing(loop: SchedulerLoop, run_id: uuid.UUID) -> Callable[[], Awaitable[bool]]:
    """True once an attempt of ``run_id`` executes in ``loop``'s process."""

    async def check() -> bool:
        return run_id in loop._tokens

    return check


async def test_a_run_starting_while_a_renewal_is_awaited_keeps_its_lease(
    make_engine: MakeEngine, fake: FakeRunnerType, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The heartbeat race: an attempt that starts while ``renew_leases`` is awaited is not in
    the answer. That must neither kill the heartbeat nor count as a lost lease; both runs keep
    their leases for several lease lengths while a second replica stands ready to take over
    any lease that runs out, and each run is executed once."""
    engine = make_engine(start=False, lease=LEASE)
    runner = fake.script("long", [sleep(2.5 * LEASE)])
    schedule = await engine.create(spec(fake.config("long"), HOURLY))
    gate = GatedRenewal(engine.ledger.renew_leases)
    monkeypatch.setattr(engine.ledger, "renew_leases", gate)
    engine.loop.start()

    first = await engine.run_now(schedule.id)
    await wait_status(engine.db, first.id, "running")
    gate.hold()
    await asyncio.wait_for(gate.waiting.wait(), 5)  # a renewal of ``first`` is in flight
    second = await engine.run_now(schedule.id)
    await wait_for(executing(engine.loop, second.id), 5, "second run executing")
    gate.release()

    # Another replica, ready to take over any lease this one lets run out.
    make_engine("engine-b", lease=LEASE)
    for run in (first, second):
        ended = await wait_status(engine.db, run.id, "succeeded", "failed", within=6 * LEASE)
        assert (ended.status, ended.attempt) == ("succeeded", 1), ended.error
    assert runner.attempts(first.id) == [1] and runner.attempts(second.id) == [1]
    assert runner.cancelled == []
    assert engine.loop.supervisor.restarts["heartbeat"] == 0
    # The heartbeat went on renewing both after the race.
    assert any(second.id in asked for asked in gate.asked)


def command(script: str, **fields: object) -> dict[str, object]:
    """A ``command`` runner that ignores SIGTERM (only SIGKILL stops it), with a grace period
    far longer than any test: a stop that waits for the grace would show."""
    return {"type": "command", "argv": ["sh", "-c", script], "kill_grace_seconds": 120, **fields}


# Attempt 1 writes its pid and sleeps (SIGTERM ignored, inherited by ``sleep``); later attempts
# finish at once.
STUBBORN = (
    "trap '' TERM; echo $$ > \"pid.$AGENTCRON_ATTEMPT\"; "
    'if [ "$AGENTCRON_ATTEMPT" = 1 ]; then sleep 60; fi; echo done'
)


def read_pid(path: Path) -> int | None:
    text = path.read_text().strip() if path.exists() else ""
    return int(text) if text else None


async def wait_pid(path: Path) -> int:
    async def written() -> int | None:
        return read_pid(path)

    return await wait_for(written, 10, f"{path.name} written")


async def wait_dead(pid: int, within: float) -> datetime:
    """The moment ``pid`` was seen gone (checked every 20 ms)."""
    deadline = time.monotonic() + within
    while process_alive(pid):
        if time.monotonic() > deadline:
            raise AssertionError(f"process {pid} still alive after {within} s")
        await asyncio.sleep(0.02)
    return datetime.now(UTC)


async def test_a_lease_that_cannot_be_renewed_stops_the_attempt_before_it_runs_out(
    make_engine: MakeEngine, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The database stops answering renewals: before the lease runs out (when another replica
    could take the run over) the attempt is killed, process group and all, with one log line;
    once renewals work again the run goes on as attempt 2 and succeeds."""
    engine = make_engine(start=False, lease=LEASE)
    real = engine.ledger.renew_leases
    failing = True

    async def unreachable(
        now: datetime, run_ids: Sequence[uuid.UUID] | None = None
    ) -> dict[uuid.UUID, bool]:
        if failing:
            raise ConnectionError("database unreachable")
        return await real(now, run_ids)

    monkeypatch.setattr(engine.ledger, "renew_leases", unreachable)
    schedule = await engine.create(spec(command(STUBBORN), HOURLY, timeout_seconds=300))
    workdir = engine.data_dir / "tasks" / str(schedule.id)
    with structlog.testing.capture_logs() as lines:
        engine.loop.start()
        queued = await engine.run_now(schedule.id)
        pid = await wait_pid(workdir / "pid.1")
        started = await fetch_run(engine.db, queued.id)
        assert started.status == "running" and started.lease_expires_at is not None
        dead_at = await wait_dead(pid, within=2 * LEASE)
        failing = False
        ended = await wait_status(engine.db, queued.id, "succeeded", "failed", within=10)

    # Killed before the lease it last confirmed ran out, not after the 120 s grace.
    assert dead_at < started.lease_expires_at, (dead_at, started.lease_expires_at)
    assert (ended.status, ended.attempt, ended.output) == ("succeeded", 2, "done\n")
    lost = [line for line in lines if line["event"] == "run_lease_lost"]
    assert len(lost) == 1, lost
    assert lost[0]["cause"] == "renewal not confirmed in time"
    assert lost[0]["action"] == "attempt stopped" and lost[0]["run_id"] == str(queued.id)
    assert engine.loop.metrics.leases_lost._value.get() == 1


async def test_a_lease_taken_over_kills_the_attempt_at_once(make_engine: MakeEngine) -> None:
    """Another replica holds the lease now (this process stalled past it): the local attempt
    is killed at once, process group and all, and nothing is recorded by this process."""
    engine = make_engine(lease=LEASE)
    schedule = await engine.create(spec(command(STUBBORN), HOURLY, timeout_seconds=300))
    workdir = engine.data_dir / "tasks" / str(schedule.id)
    with structlog.testing.capture_logs() as lines:
        queued = await engine.run_now(schedule.id)
        pid = await wait_pid(workdir / "pid.1")
        async with engine.db.session() as session:
            run = await session.get(Run, queued.id)
            assert run is not None
            run.lease_owner = "engine-z"
            run.lease_expires_at = datetime.now(UTC) + timedelta(seconds=60)
        taken_at = datetime.now(UTC)
        dead_at = await wait_dead(pid, within=LEASE)

        async def logged() -> bool:
            return any(line["event"] == "run_lease_lost" for line in lines)

        await wait_for(logged, 5, "run_lease_lost logged")

    # One heartbeat interval (a third of the lease), not the 120 s grace.
    assert (dead_at - taken_at).total_seconds() < LEASE
    lost = [line for line in lines if line["event"] == "run_lease_lost"]
    assert len(lost) == 1 and lost[0]["cause"] == "taken over", lost
    run = await fetch_run(engine.db, queued.id)
    assert (run.status, run.lease_owner, run.finished_at) == ("running", "engine-z", None)
