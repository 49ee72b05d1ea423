"""The database's clock decides (PostgreSQL): skew measured against it, due times and lease expiry
judged by it whatever this host's clock says; the skew warning in logs, /readyz and /metrics;
SQLite measures nothing."""

from __future__ import annotations

import uuid
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest
import structlog.testing
from fastapi import FastAPI
from sqlalchemy import Engine

from agentcron.core.clock import Clock, DatabaseClock, utcnow
from agentcron.core.config import Settings
from agentcron.core.ledger.sql import SqlRunStore
from agentcron.core.runners.fake import FakeRunnerType, succeed
from agentcron.core.storage.database import Database
from agentcron.core.storage.models import Run
from agentcron.web.app import create_app
from agentcron.web.engine.clockwatch import ClockWatch
from agentcron.web.engine.loop import SchedulerLoop
from agentcron.web.engine.metrics import EngineMetrics
from tests.conftest import app_client
from tests.factories import insert_schedule
from tests.integration.engine_kit import (
    fetch_run,
    runs_of,
    set_row,
    statements,
    wait_for,
    wait_true,
)

pg_only = pytest.mark.parametrize("backend", ["postgresql"])
# Generous: the database is local, a round trip is a millisecond; a loaded CI machine is not.
TOLERANCE = 1.0


def offset(seconds: float) -> Clock:
    """A local clock ``seconds`` off the real time (negative: slow)."""
    return lambda: utcnow() + timedelta(seconds=seconds)


async def measured(db: Database, local: Clock) -> DatabaseClock:
    clock = DatabaseClock(local)
    await clock.measure(db)
    return clock


async def add_schedule(db: Database, due: datetime, **overrides: Any) -> uuid.UUID:
    """An hourly interval schedule whose next due time is ``due``."""
    trigger = {"every_seconds": 3600, "start_at": due.isoformat()}
    return await insert_schedule(
        db, due - timedelta(hours=1), trigger=trigger, next_run=due, **overrides
    )


# -- due times --------------------------------------------------------------------------------


@pg_only
async def test_a_slow_replica_claims_when_the_database_says_due(db: Database) -> None:
    clock = await measured(db, offset(-30))  # this host's clock is 30 s slow
    assert abs(clock.skew_seconds - 30) < TOLERANCE, clock.skew_seconds
    assert clock.round_trip is not None and clock.round_trip < timedelta(seconds=TOLERANCE)
    ledger = SqlRunStore(db, owner="slow", clock=clock)
    due = clock() - timedelta(milliseconds=200)  # due by the database's clock
    schedule_id = await add_schedule(db, due)
    assert clock.local() < due - timedelta(seconds=29)  # by its own clock: not for 29 s

    assert (await ledger.claim_due_jobs(clock.local())).runs == []  # the bug: 30 s late
    claim = await ledger.claim_due_jobs(clock())
    assert [run.due_at for run in claim.runs] == [due]
    assert [run.schedule_id for run in claim.runs] == [schedule_id]


@pg_only
async def test_the_loop_of_a_slow_replica_starts_a_run_at_its_database_due_time(
    db: Database, tmp_path: Path, fake: FakeRunnerType
) -> None:
    fake.script("on-time", [succeed("ok")])
    clock = await measured(db, offset(-30))
    ledger = SqlRunStore(db, owner="slow", lease_seconds=2, data_dir=tmp_path, clock=clock)
    # The tick alone would not come in time: the loop must sleep until the due time, judged
    # by the database's clock (by its own it would wait 30 s more).
    loop = SchedulerLoop(ledger, tick_seconds=30, clock=clock)
    due = clock() + timedelta(seconds=0.5)
    schedule_id = await add_schedule(db, due, runner=fake.config("on-time"))
    loop.start()
    try:

        async def started() -> list[Run] | None:
            runs = await runs_of(db, schedule_id)
            return runs if runs and runs[0].started_at is not None else None

        (run,) = await wait_for(started, within=10, what="the run to start")
    finally:
        await loop.stop()
    assert run.due_at == due and run.started_at is not None
    # Written with the database's time too: claimed and started at (not 30 s after) due.
    late = (run.started_at - due).total_seconds()
    assert 0 <= late < TOLERANCE, late


# -- leases -----------------------------------------------------------------------------------


@pg_only
async def test_a_fast_replica_does_not_take_over_a_live_lease(db: Database) -> None:
    holder_clock = await measured(db, utcnow)
    holder = SqlRunStore(db, owner="holder", lease_seconds=30, clock=holder_clock)
    await add_schedule(db, holder_clock() - timedelta(milliseconds=100))
    (run,) = (await holder.claim_due_jobs(holder_clock())).runs
    assert ((await holder.admit([run]))[0]).action == "run"

    fast_clock = await measured(db, offset(60))  # 60 s fast: by its own clock, lapsed
    fast = SqlRunStore(db, owner="fast", lease_seconds=30, clock=fast_clock)
    lease = (await fetch_run(db, run.id)).lease_expires_at
    assert lease is not None and fast_clock.local() > lease
    # Nor does it claim early a schedule due in 5 s by the database's clock (long due by its own).
    due = fast_clock() + timedelta(seconds=5)
    await add_schedule(db, due)
    assert fast_clock.local() > due + timedelta(seconds=54)
    claim = await fast.claim_due_jobs(fast_clock())
    assert claim.runs == [] and claim.recovered == 0
    assert (await fetch_run(db, run.id)).lease_owner == "holder"

    # Once the lease has run out by the database's clock (the holder died 31 s ago), it does.
    await set_row(db, Run, run.id, lease_expires_at=holder_clock() - timedelta(seconds=1))
    claim = await fast.claim_due_jobs(fast_clock())
    assert run.id in [taken.id for taken in claim.runs] and claim.recovered == 1


# -- the warning ------------------------------------------------------------------------------


@pg_only
async def test_skew_past_the_threshold_warns_once_and_recovers_once(
    live_app: FastAPI, client: httpx.AsyncClient
) -> None:
    watch: ClockWatch = live_app.state.clock_watch
    registry = live_app.state.metrics.registry

    def gauge() -> float:
        value = registry.get_sample_value("agentcron_clock_skew_seconds")
        assert value is not None
        return value

    assert watch.measurements == 1  # at start, before anything else ran
    assert abs(gauge()) < TOLERANCE
    ready = (await client.get("/readyz")).json()
    assert ready["warnings"] == [] and ready["checks"]["database"] == "ok"

    watch.clock.local = offset(-30)
    with structlog.testing.capture_logs() as lines:
        for _ in range(3):
            await watch.measure()
    warned = [line for line in lines if line["event"] == "clock_skew"]
    assert len(warned) == 1, lines
    assert warned[0]["log_level"] == "warning"
    assert abs(warned[0]["skew_seconds"] - 30) < TOLERANCE
    assert warned[0]["instance_id"] == live_app.state.settings.instance_id
    assert abs(gauge() - 30) < TOLERANCE
    response = await client.get("/readyz")
    body = response.json()
    assert response.status_code == 200 and body["status"] == "ok"  # still works: DB clock
    assert body["checks"] == {"database": "ok", "tasks": "ok"}
    (warning,) = body["warnings"]
    assert warning["check"] == "clock_skew" and warning["threshold_seconds"] == 2.0
    assert abs(warning["skew_seconds"] - 30) < TOLERANCE
    assert "behind" in warning["message"]
    assert "\nagentcron_clock_skew_seconds " in (await client.get("/metrics")).text

    watch.clock.local = utcnow
    with structlog.testing.capture_logs() as lines:
        for _ in range(3):
            await watch.measure()
    events = [line["event"] for line in lines]
    assert events.count("clock_skew_recovered") == 1 and "clock_skew" not in events, lines
    assert abs(gauge()) < TOLERANCE
    assert (await client.get("/readyz")).json()["warnings"] == []


@pg_only
async def test_a_failed_measurement_keeps_the_skew_and_is_logged_once(db: Database) -> None:
    clock = await measured(db, offset(-10))
    unreachable = Database("postgresql+asyncpg://agentcron@127.0.0.1:9/nowhere", timeout=2)
    watch = ClockWatch(clock, unreachable, instance_id="i", metrics=EngineMetrics())
    try:
        with structlog.testing.capture_logs() as lines:
            for _ in range(2):
                await watch.measure()  # does not raise
    finally:
        await unreachable.dispose()
    assert [line["event"] for line in lines] == ["clock_skew_unmeasured"], lines
    assert abs(clock.skew_seconds - 10) < TOLERANCE and watch.measurements == 0
    watch.db = db  # the database is back
    with structlog.testing.capture_logs() as lines:
        await watch.measure()
    # Measured at last: 10 s is past the 2 s threshold, so this is its first crossing.
    assert watch.measurements == 1 and [line["event"] for line in lines] == ["clock_skew"]


# -- the app: which clock, and what it costs -------------------------------------------------


@pytest.mark.parametrize("backend", ["sqlite", "postgresql"])
async def test_the_app_measures_on_postgresql_only(
    backend: str, db_url: str, tmp_path: Path
) -> None:
    settings = Settings(
        database_url=db_url,
        data_dir=tmp_path / "data",
        scheduler_tick_seconds=0.1,
        log_format="console",
    )
    app = create_app(settings)
    with statements(Engine) as sent, structlog.testing.capture_logs() as lines:
        async with app.router.lifespan_context(app):
            loop = app.state.loop
            await wait_true(lambda: loop.iterations >= 5, 10, "5 wake-ups")
            async with app_client(app, None) as http:
                ready = (await http.get("/readyz")).json()
    clock_reads = [s for s in sent if "clock_timestamp" in s]
    (started,) = [line for line in lines if line["event"] == "engine_started"]
    assert ready["warnings"] == []
    skew = app.state.metrics.registry.get_sample_value("agentcron_clock_skew_seconds")
    if backend == "sqlite":
        # One machine, one clock: nothing to measure, and the engine's clock is the local one.
        assert clock_reads == [] and app.state.clock_watch is None
        assert loop.clock is utcnow and started["clock"] == "local"
        assert skew == 0.0
    else:
        # One read at start; the next is a minute away.
        assert len(clock_reads) == 1, clock_reads
        assert isinstance(loop.clock, DatabaseClock) and started["clock"] == "database"
        assert loop.clock is app.state.ledger.clock is app.state.schedules.context.clock
        assert skew is not None and abs(skew) < TOLERANCE
