"""A run is executing in one place at a time, even when it outlives its lease.

The heartbeat renews the leases of the attempts executing here; an attempt whose lease was
taken over, or could not be confirmed until shortly before it runs out, is stopped at once
(a command's process group gets SIGKILL, never a grace period), so another replica can take the
run over without two executions overlapping. These tests drive the real loop and ledger on
both databases with a store whose renewal is held, fails, or answers "not yours".
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
import structlog

from agentcron.core.runners.fake import FakeRunnerType, sleep
from agentcron.core.storage.models import Run
from tests.integration.engine_kit import (
    HOURLY,
    Engine,
    MakeEngine,
    fetch_run,
    set_row,
    spec,
    wait_dead,
    wait_for,
    wait_status,
    wait_true,
)

LEASE = 3.0  # long enough that a held renewal and a start fit well inside one lease
# The race test's runs must be executed once, so a test process stalled by a loaded machine (CI
# saw over 2 s) must not reach the fence margin, which would rightly stop their attempts.
RACE_LEASE = 5.0


class Renewal:
    """Wraps ``renew_leases``: while ``failing``, a renewal raises as an unreachable database
    would; while held (``open`` cleared), it waits after it was asked, before it reaches the
    database, until ``open`` is set."""

    def __init__(self, engine: Engine, monkeypatch: pytest.MonkeyPatch, failing: bool) -> None:
        self.real = engine.ledger.renew_leases
        monkeypatch.setattr(engine.ledger, "renew_leases", self)
        self.failing = failing
        self.waiting = asyncio.Event()
        self.open = asyncio.Event()  # cleared: renewals are held until it is set again
        self.open.set()
        self.asked: list[list[uuid.UUID]] = []

    async def __call__(
        self, now: datetime, run_ids: Sequence[uuid.UUID] | None = None
    ) -> dict[uuid.UUID, bool]:
        self.asked.append(list(run_ids or ()))
        if self.failing:
            raise ConnectionError("database unreachable")
        if not self.open.is_set():
            self.waiting.set()
            await self.open.wait()
        return await self.real(now, run_ids)


@pytest.fixture
def unrenewed(make_engine: MakeEngine, monkeypatch: pytest.MonkeyPatch) -> tuple[Engine, Renewal]:
    """An engine (loop not started, lease ``LEASE``) whose lease renewals fail until told."""
    engine = make_engine(start=False, lease=LEASE)
    return engine, Renewal(engine, monkeypatch, failing=True)


async def test_a_run_starting_while_a_renewal_is_awaited_keeps_its_lease(
    make_engine: MakeEngine, fake: FakeRunnerType, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The heartbeat race: an attempt that starts while ``renew_leases`` is awaited is not in
    the answer. That must neither kill the heartbeat nor count as a lost lease; both runs keep
    their leases for several lease lengths while a second replica stands ready to take over
    any lease that runs out, and each run is executed once."""
    engine = make_engine(start=False, lease=RACE_LEASE)
    runner = fake.script("long", [sleep(2 * RACE_LEASE)])
    schedule = await engine.create(spec(fake.config("long"), HOURLY))
    gate = Renewal(engine, monkeypatch, failing=False)
    engine.loop.start()

    first = await engine.run_now(schedule.id)
    await wait_status(engine.db, first.id, "running")
    gate.open.clear()
    await asyncio.wait_for(gate.waiting.wait(), 5)  # a renewal of ``first`` is in flight
    second = await engine.run_now(schedule.id)
    await wait_true(lambda: second.id in engine.loop.engine.tokens, 5, "second run executing")
    gate.open.set()

    # Another replica, ready to take over any lease this one lets run out.
    make_engine("engine-b", lease=RACE_LEASE)
    for run in (first, second):
        ended = await wait_status(engine.db, run.id, "succeeded", "failed", within=6 * RACE_LEASE)
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


async def command_started(engine: Engine, script: str) -> tuple[Path, Run, int]:
    """A command schedule of ``script`` run now on ``engine`` (its loop started): the task
    directory, the queued run, and the pid attempt 1 wrote."""
    schedule = await engine.create(spec(command(script), HOURLY, timeout_seconds=300))
    if not engine.loop.running:
        engine.loop.start()
    queued = await engine.run_now(schedule.id)
    workdir = engine.workdir(schedule)
    return workdir, queued, await wait_pid(workdir / "pid.1")


def process_state(pid: int) -> str:
    """The kernel's one-letter state of ``pid`` (``T``: stopped)."""
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]


async def wait_state(pid: int, state: str, within: float) -> datetime:
    reached = lambda: datetime.now(UTC) if process_state(pid) == state else None  # noqa: E731
    return await wait_true(reached, within, f"process {pid} in state {state}", 0.02)


def stepping(count: int) -> str:
    """A command that runs ``count`` half-second steps of real work, noting each step, so a
    freeze shows as a gap."""
    return (
        'echo $$ > "pid.$AGENTCRON_ATTEMPT"; '
        f"for i in $(seq {count}); do sleep 0.5; echo $i >> steps; done; echo done"
    )


STEPS = stepping(6)  # 3 s


async def test_a_lease_that_cannot_be_renewed_freezes_a_command_until_it_is_confirmed(
    unrenewed: tuple[Engine, Renewal],
) -> None:
    """The database stops answering renewals: before the lease runs out (when another replica
    could take the run over) the agent's process group is frozen (SIGSTOP), with one log line,
    and does nothing while it stays unconfirmed; once a renewal confirms the lease it is thawed
    (SIGCONT) and the same attempt finishes: an outage costs no work."""
    engine, renewal = unrenewed
    with structlog.testing.capture_logs() as lines:
        workdir, queued, pid = await command_started(engine, STEPS)
        started = await fetch_run(engine.db, queued.id)
        assert started.lease_expires_at is not None
        frozen_at = await wait_state(pid, "T", within=2 * LEASE)
        steps = read_steps(workdir)
        # Frozen while the lease would let another replica in: no step is taken.
        await asyncio.sleep(LEASE)
        assert process_state(pid) == "T" and read_steps(workdir) == steps
        renewal.failing = False
        ended = await wait_status(engine.db, queued.id, "succeeded", "failed", within=10)

    assert frozen_at < started.lease_expires_at, (frozen_at, started.lease_expires_at)
    assert (ended.status, ended.attempt, ended.output) == ("succeeded", 1, "done\n")
    assert read_steps(workdir) == ["1", "2", "3", "4", "5", "6"]
    events = [line["event"] for line in lines if line["event"].startswith("run_")]
    assert events.count("run_suspended") == 1 and events.count("run_resumed") == 1, events
    assert "run_lease_lost" not in events


async def test_an_unconfirmed_lease_stops_a_runner_that_cannot_freeze(
    unrenewed: tuple[Engine, Renewal], fake: FakeRunnerType
) -> None:
    """A runner that cannot freeze (a ``python`` target, a model call) is stopped instead, at
    once, before the lease runs out; the run goes on as attempt 2 once renewals work."""
    engine, renewal = unrenewed
    runner = fake.script("long", [sleep(60), sleep(0)], per_attempt=True)
    schedule = await engine.create(spec(fake.config("long"), HOURLY))
    with structlog.testing.capture_logs() as lines:
        engine.loop.start()
        queued = await engine.run_now(schedule.id)
        started = await wait_status(engine.db, queued.id, "running")
        assert started.lease_expires_at is not None

        stopped = lambda: datetime.now(UTC) if runner.cancelled else None  # noqa: E731
        stopped_at = await wait_true(stopped, 2 * LEASE, "the attempt stopped")
        renewal.failing = False
        ended = await wait_status(engine.db, queued.id, "succeeded", "failed", within=10)

    assert stopped_at < started.lease_expires_at
    assert runner.cancelled == [(queued.id, "lease_unconfirmed")]
    assert (ended.status, ended.attempt) == ("succeeded", 2)
    lost = [line for line in lines if line["event"] == "run_lease_lost"]
    assert len(lost) == 1 and lost[0]["cause"] == "renewal not confirmed in time", lost
    assert lost[0]["action"] == "attempt stopped" and lost[0]["run_id"] == str(queued.id)
    assert engine.loop.metrics.leases_lost._value.get() == 1


async def test_a_frozen_attempt_whose_lease_was_taken_over_is_killed(
    unrenewed: tuple[Engine, Renewal],
) -> None:
    """Frozen while the database was unreachable, and meanwhile another replica took the run
    over: the first renewal that answers says so, and the frozen group is killed, never
    thawed."""
    engine, renewal = unrenewed
    workdir, queued, pid = await command_started(engine, stepping(120))
    await wait_state(pid, "T", within=2 * LEASE)
    steps = read_steps(workdir)
    await take_over(engine, queued.id)
    renewal.failing = False
    await wait_dead(pid, within=LEASE)
    assert read_steps(workdir) == steps  # never thawed
    run = await fetch_run(engine.db, queued.id)
    assert (run.status, run.lease_owner, run.finished_at) == ("running", "engine-z", None)


def read_steps(workdir: Path) -> list[str]:
    path = workdir / "steps"
    return path.read_text().split() if path.exists() else []


async def take_over(engine: Engine, run_id: uuid.UUID) -> None:
    """Make the run another replica's, as that replica's claim of an expired lease would."""
    later = datetime.now(UTC) + timedelta(seconds=60)
    await set_row(engine.db, Run, run_id, lease_owner="engine-z", lease_expires_at=later)


async def test_a_lease_taken_over_kills_the_attempt_at_once(make_engine: MakeEngine) -> None:
    """Another replica holds the lease now (this process stalled past it): the local attempt
    is killed at once, process group and all, and nothing is recorded by this process."""
    engine = make_engine(lease=LEASE)
    with structlog.testing.capture_logs() as lines:
        _, queued, pid = await command_started(engine, STUBBORN)
        await take_over(engine, queued.id)
        taken_at = datetime.now(UTC)
        dead_at = await wait_dead(pid, within=LEASE)
        logged = lambda: any(line["event"] == "run_lease_lost" for line in lines)  # noqa: E731
        await wait_true(logged, 5, "run_lease_lost logged")

    # One heartbeat interval (a third of the lease), not the 120 s grace.
    assert (dead_at - taken_at).total_seconds() < LEASE
    lost = [line for line in lines if line["event"] == "run_lease_lost"]
    assert len(lost) == 1 and lost[0]["cause"] == "taken over", lost
    run = await fetch_run(engine.db, queued.id)
    assert (run.status, run.lease_owner, run.finished_at) == ("running", "engine-z", None)
