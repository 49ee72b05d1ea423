"""The idle loop: one statement per wake-up when nothing is due, with the database's clock and
the liveness lock too (PostgreSQL), and a lease of its own that lapsed is taken back with
nothing else due (both databases)."""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from agentcron.core.clock import DatabaseClock
from agentcron.core.ledger.sql import SqlRunStore
from agentcron.core.runners.fake import FakeRunnerType, succeed
from agentcron.core.schedules.service import ScheduleService
from agentcron.core.storage.database import Database
from agentcron.core.storage.models import Run
from agentcron.web.engine.clockwatch import ClockWatch
from agentcron.web.engine.loop import SchedulerLoop
from agentcron.web.engine.metrics import EngineMetrics
from tests.integration.engine_kit import (
    HOURLY,
    LEASE,
    OWNER,
    MakeEngine,
    set_row,
    spec,
    statements,
    wait_status,
    wait_true,
)


async def wake_ups(loop: SchedulerLoop, count: int) -> None:
    """Run ``loop`` until it has woken ``count`` times, then stop it."""
    loop.start()
    try:
        await wait_true(lambda: loop.iterations >= count, what=f"{count} wake-ups")
    finally:
        await loop.stop()


async def test_an_idle_loop_sends_one_statement_per_wake_up(
    make_engine: MakeEngine, fake: FakeRunnerType
) -> None:
    engine = make_engine(tick=0.1, start=False)
    for _ in range(3):
        await engine.create(spec(fake.config(), HOURLY))  # due in an hour
    with statements(*engine.db.engines) as sent:
        await wake_ups(engine.loop, 8)
        wakes = engine.loop.iterations
    assert wakes >= 8
    # One look (the earliest due time) per wake-up, and no claim transaction at all. (SQLite's
    # explicit BEGIN, sent by our hook, is transaction control, not a statement of work.)
    work = [s for s in sent if s != "BEGIN"]
    assert len(work) <= wakes, work
    assert all(s.startswith("SELECT (SELECT min(schedules.next_run)") for s in work)


async def test_a_lapsed_lease_of_this_instance_is_taken_back_with_nothing_else_due(
    make_engine: MakeEngine, fake: FakeRunnerType
) -> None:
    fake.script("again", [succeed("picked up")])
    engine = make_engine(tick=30, start=False)  # the tick alone would not come in time
    schedule = await engine.create(spec(fake.config("again"), HOURLY))
    queued = await engine.run_now(schedule.id)
    # As if an attempt died with the database out of reach: pending, leased to this very
    # instance, the lease run out.
    lapsed = datetime.now(UTC) - timedelta(seconds=1)
    await set_row(engine.db, Run, queued.id, lease_owner=OWNER, lease_expires_at=lapsed)
    engine.loop.start()
    done = await wait_status(engine.db, queued.id, "succeeded", within=10)
    assert done.output == "picked up" and done.attempt == 1


@pytest.mark.parametrize("backend", ["postgresql"])  # the clock and the lock are PostgreSQL's
async def test_the_clock_and_liveness_keep_an_idle_loop_at_one_statement_per_wake_up(
    db: Database, fake: FakeRunnerType, tmp_path: Path
) -> None:
    # Wired as web/app.py wires them, with a measurement every 0.5 s instead of every minute.
    interval = 0.5
    clock = DatabaseClock()
    watch = ClockWatch(clock, db, instance_id=OWNER, metrics=EngineMetrics(), interval=interval)
    ledger = SqlRunStore(db, owner=OWNER, lease_seconds=LEASE, data_dir=tmp_path, clock=clock)
    loop = SchedulerLoop(ledger, tick_seconds=0.1, clock=clock, liveness=True)
    assert loop.liveness is not None
    schedules = ScheduleService(db, clock=clock)
    for _ in range(3):
        await schedules.create(spec(fake.config(), HOURLY), "local")
    own = loop.liveness._engine  # its connection is outside the pools: count it too
    with statements(*db.engines) as sent, statements(own) as locking:
        began = time.monotonic()
        await watch.start()
        try:
            await wake_ups(loop, 12)
        finally:
            await watch.stop()
        elapsed = time.monotonic() - began
    reads = [s for s in sent if "clock_timestamp" in s]
    work = [s for s in sent if "clock_timestamp" not in s]
    # The look is still one statement per wake-up (the liveness columns are part of it). The
    # clock adds one read at start and one per interval, on its own task, never one per claim
    # or per wake-up. The lock is taken once and then costs nothing: its loss is heard on the
    # socket, not polled for.
    assert len(work) <= loop.iterations, work
    assert all(s.startswith("WITH others AS") for s in work), work
    assert 2 <= len(reads) <= 1 + elapsed / interval, (len(reads), elapsed)
    assert len([s for s in locking if "pg_try_advisory_lock" in s]) == 1, locking
