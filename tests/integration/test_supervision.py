"""Every long-lived task of the engine is supervised: killed by an unexpected exception, it is
logged once with its traceback, counted in ``agentcron_task_restarts_total``, reported by
``/readyz`` (503, ``down`` names it) while it is down, and started again, after which it does
its work as before. Each task is killed in a real app (lifespan, loop, ledger, database) by an
exception injected into its body, on both databases (the listener and the clock watch exist on
PostgreSQL only)."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import asyncpg
import pytest
import structlog
from fastapi import FastAPI

import agentcron.web.engine.loop
from agentcron.core.config import Settings
from agentcron.core.runners.fake import FakeRunnerType, sleep
from agentcron.core.storage.wakeups import WAKE_CHANNEL
from agentcron.web.app import create_app
from agentcron.web.engine.clockwatch import ClockWatch
from agentcron.web.engine.leases import LeaseKeeper
from agentcron.web.engine.loop import SchedulerLoop
from agentcron.web.engine.metrics import EngineMetrics
from agentcron.web.engine.supervisor import Supervisor
from tests.conftest import _dsn, app_client
from tests.integration.engine_kit import HOURLY, spec, wait_status, wait_true

BODIES: dict[str, tuple[type, str]] = {
    "loop": (SchedulerLoop, "_run_loop"),
    "heartbeat": (LeaseKeeper, "heartbeat"),
    "retention": (SchedulerLoop, "_prune"),
    "listen": (SchedulerLoop, "_listen"),
    "clock": (ClockWatch, "_run"),
}
DOWN_SECONDS = 1.0  # the first restart's backoff in these tests: long enough to look at


class Crash:
    """An exception injected into a task's body: its first run waits for ``now`` and then
    raises; every later run (the supervisor's restarts) is the real body."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, task: str) -> None:
        owner, name = BODIES[task]
        real = getattr(owner, name)
        self.now = asyncio.Event()
        self.runs = 0

        async def body(instance: Any, *args: Any) -> None:
            self.runs += 1
            if self.runs == 1:
                await self.now.wait()
                raise RuntimeError(f"injected into the {task} task")
            await real(instance, *args)

        monkeypatch.setattr(owner, name, body)


def counting(monkeypatch: pytest.MonkeyPatch, owner: object, name: str) -> list[object]:
    """The calls of ``owner.name`` from now on (their arguments), each passed on to it."""
    calls: list[object] = []
    real = getattr(owner, name)

    async def wrapper(*args: Any, **kwargs: Any) -> Any:
        calls.append(args)
        return await real(*args, **kwargs)

    monkeypatch.setattr(owner, name, wrapper)
    return calls


async def proves_work(
    task: str, app: FastAPI, monkeypatch: pytest.MonkeyPatch, fake: FakeRunnerType
) -> Callable[[], Awaitable[None]]:
    """Set up what shows ``task`` at work; returns the check to run after its restart."""
    loop: SchedulerLoop = app.state.loop
    if task == "loop":

        async def a_run_succeeds() -> None:
            schedule = await app.state.schedules.create(spec(fake.config(), HOURLY), "local")
            run = await app.state.runs.run_now(schedule.id, None)
            await wait_status(app.state.db, run.id, "succeeded", within=10)

        return a_run_succeeds
    if task == "heartbeat":
        fake.script("long", [sleep(30)])
        schedule = await app.state.schedules.create(spec(fake.config("long"), HOURLY), "local")
        run = await app.state.runs.run_now(schedule.id, None)
        await wait_status(app.state.db, run.id, "running")
        renewals = counting(monkeypatch, app.state.ledger, "renew_leases")

        async def leases_are_renewed() -> None:
            before = len(renewals)

            await wait_true(lambda: len(renewals) >= before + 2, 10, "renewals after the restart")
            loop.cancel_local(run.id)

        return leases_are_renewed
    if task == "retention":
        passes = counting(monkeypatch, agentcron.web.engine.loop, "prune_runs")

        async def prunes_again() -> None:
            await wait_true(lambda: len(passes) >= 2, 10, "retention passes after the restart")

        return prunes_again
    if task == "listen":

        async def a_notify_wakes_the_loop() -> None:
            # The restarted listener wakes the loop once on connecting; let that pass.
            await asyncio.sleep(0.5)
            before = loop.iterations
            conn = await asyncpg.connect(_dsn(app.state.settings.database_url))
            try:
                await conn.execute(f"NOTIFY {WAKE_CHANNEL}")
            finally:
                await conn.close()

            await wait_true(lambda: loop.iterations > before, 5, "a wake-up by NOTIFY")

        return a_notify_wakes_the_loop
    watch: ClockWatch = app.state.clock_watch
    watch.interval = 0.05

    async def measures_again() -> None:
        before = watch.measurements

        await wait_true(
            lambda: watch.measurements >= before + 2, 10, "measurements after the restart"
        )

    return measures_again


# The listener and the clock watch exist on PostgreSQL only.
CASES = [
    (db, task) for db in ("sqlite", "postgresql") for task in ("loop", "heartbeat", "retention")
]


@pytest.mark.parametrize(
    ("backend", "task"), [*CASES, ("postgresql", "listen"), ("postgresql", "clock")]
)
async def test_a_crashed_engine_task_is_logged_counted_reported_and_restarted(
    task: str, db_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fake: FakeRunnerType
) -> None:
    crash = Crash(monkeypatch, task)
    settings = Settings(
        database_url=db_url,
        data_dir=tmp_path / "data",
        log_format="console",
        scheduler_tick_seconds=30,  # only wake-ups and due times move the loop
        lease_seconds=3,
        retention_interval_seconds=0.2,
        instance_id=f"supervised-{uuid.uuid4().hex[:6]}",
    )
    app = create_app(settings)
    async with app.router.lifespan_context(app), app_client(app, None) as http:
        supervisor: Supervisor = app.state.supervisor
        supervisor.first_delay = DOWN_SECONDS
        assert (await http.get("/readyz")).status_code == 200
        check = await proves_work(task, app, monkeypatch, fake)

        with structlog.testing.capture_logs() as lines:
            crash.now.set()

            await wait_true(lambda: supervisor.down == [task], 5, f"{task} down")
            ready = await http.get("/readyz")
            assert ready.status_code == 503, ready.text
            assert ready.json()["down"] == [task]
            assert ready.json()["checks"]["tasks"] == "unavailable"

            await wait_true(lambda: not supervisor.down and crash.runs >= 2, 5, f"{task} restarted")
            await check()

        crashed = [line for line in lines if line["event"] == "task_crashed"]
        assert len(crashed) == 1, crashed
        assert crashed[0]["task"] == task and crashed[0]["log_level"] == "error"
        assert crashed[0]["exc_info"] is True  # the traceback goes with the line
        assert supervisor.restarts[task] == 1
        samples = app.state.metrics.registry.get_sample_value
        assert samples("agentcron_task_restarts_total", {"task": task}) == 1
        ready = await http.get("/readyz")
        assert ready.status_code == 200 and ready.json()["down"] == [], ready.text


async def test_a_task_failing_at_every_start_backs_off_and_stays_reported() -> None:
    """A task that fails at once each time is retried with a doubling delay, not in a spin."""
    supervisor = Supervisor(EngineMetrics(), first_delay=0.05, max_delay=0.2)
    starts: list[float] = []
    clock = asyncio.get_running_loop().time
    fifth = asyncio.Event()

    async def broken() -> None:
        starts.append(clock())
        if len(starts) >= 5:
            fifth.set()
        raise ValueError("always")

    supervisor.spawn("broken", broken)
    # Wait for the starts rather than for a fixed time: on a loaded machine the loop may run
    # late, which can only lengthen the gaps this test bounds from below.
    await asyncio.wait_for(fifth.wait(), timeout=10)
    assert supervisor.down == ["broken"] or supervisor.restarts["broken"] >= 4
    await supervisor.stop()
    assert len(starts) >= 5, starts
    gaps = [later - earlier for earlier, later in zip(starts, starts[1:], strict=False)]
    # Each restart waited its backoff, doubling from 0.05 s up to 0.2 s: never a spin. (A
    # little slack for the loop clock's resolution.)
    for gap, backoff in zip(gaps, (0.05, 0.1, 0.2, 0.2), strict=False):
        assert gap >= backoff * 0.95, gaps


async def test_stopping_is_not_a_crash() -> None:
    supervisor = Supervisor(EngineMetrics())

    async def forever() -> None:
        await asyncio.Event().wait()

    task = supervisor.spawn("forever", forever)
    await asyncio.sleep(0)
    await supervisor.stop()
    assert task.done() and supervisor.restarts["forever"] == 0 and supervisor.healthy
