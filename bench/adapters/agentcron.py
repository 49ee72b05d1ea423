"""agentcron in process: ``SqlRunStore`` + ``SchedulerLoop`` on PostgreSQL (asyncpg) or SQLite
(aiosqlite), with the service's settings (``AGENTCRON_*``; defaults: concurrency 4, tick 10 s).

Commands (each prints one JSON line at the end; ``idle`` prints two progress lines first):

- ``populate``: migrate (Alembic, the only schema path), then bulk-insert N enabled schedules
  running the ``python`` runner on ``bench.noop:arun`` (``BENCH_NOOP_TARGET``), by
  ``--shape``: ``burst``, one-shots due at T0; ``steady``, every ``--every`` s with first due
  times spread evenly over [T0, T0 + every); ``idle``, none due for 15 minutes (half hourly
  intervals, half a yearly cron). ``--idle-rows M`` adds M one-shots due in 30 days with one
  INSERT ... SELECT on ``generate_series`` (PostgreSQL only). Not timed.
- ``fire``: the burst. The engine starts before T0 and runs until the ledger records N
  ``succeeded`` runs. With ``--replicas`` > 1 other engine processes share the burst, so the
  end is read from the database rather than from this process's no-op calls.
- ``idle``: the engine runs a warm-up (11 s at most), then a window of ``--seconds``
  with nothing due (``{"event": "window_start"}`` and ``{"event": "window_end", ...}``
  bracket it, so the harness can read the database's commit counter), then waits for one
  schedule another process creates (``create``) and reports how late after its due time its
  run started.
- ``steady``: the engine runs from before T0 until T0 + ``--seconds``: start delays
  (``started_at - due_at``) of the runs due in the window but its last 5 s, how many of
  those never started, CPU time and statements per run started in the window.
- ``create``: one one-shot schedule due 0.5 s from now through ``ScheduleService`` (on
  PostgreSQL its transaction sends the NOTIFY that wakes the engine).

Every engine command counts the SQL statements the engine's SQLAlchemy engine executes
(``before_cursor_execute``: an executemany is one statement; BEGIN/COMMIT and pool pings are
not statements here) and times every ``SqlRunStore.claim_due_jobs`` call. The adapter's own
bookkeeping queries go through a second ``Database``, so they are counted in neither.
"""

from __future__ import annotations

import asyncio
import json
import math
import os
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from sqlalchemy import event, insert, select, text

from agentcron.core import triggers
from agentcron.core.clock import Clock, DatabaseClock, utcnow
from agentcron.core.config import Settings
from agentcron.core.ledger.sql import SqlRunStore
from agentcron.core.ledger.store import Claim
from agentcron.core.logging import configure_logging
from agentcron.core.schedules.service import ScheduleService
from agentcron.core.specs import ScheduleCreate
from agentcron.core.storage.database import Database
from agentcron.core.storage.migrate import upgrade
from agentcron.core.storage.models import Schedule
from agentcron.core.workdirs import make_workdir, task_workdir
from agentcron.web.engine.clockwatch import ClockWatch
from agentcron.web.engine.heap import settle_heap
from agentcron.web.engine.loop import SchedulerLoop
from agentcron.web.engine.metrics import EngineMetrics
from bench import noop
from bench.adapters.common import (
    IDLE_WARMUP_SECONDS,
    NOOP_TARGET,
    PROBE_APPLICATION,
    LagMonitor,
    backend,
    burst_done,
    cpu_seconds,
    emit,
    mark_ready,
    parse_args,
    peak_rss_mb,
    percentile,
    result,
    sleep_until,
    slot_gap_figures,
    with_driver,
)

RUNNER = {"type": "python", "target": NOOP_TARGET}
# The python runner admits only modules the host lists: the benchmark's no-op is ours.
os.environ["AGENTCRON_PYTHON_MODULES"] = "bench"
POLL_SECONDS = 0.05
POPULATE_TIMEOUT_SECONDS = 600.0
IDLE_AHEAD = timedelta(minutes=15)
NOTICE_DELAY = timedelta(seconds=0.5)
NOTICE_TIMEOUT_SECONDS = 30.0
STEADY_TAIL_SECONDS = 5.0
COMMANDS = ("populate", "fire", "idle", "steady", "create")

# The far-future rows of the big idle table: one-shots due in 30 days (one statement).
IDLE_ROWS_SQL = """
INSERT INTO schedules (id, owner, name, prompt, trigger, enabled, mode, overlap, catchup,
    catchup_window_seconds, misfire_grace_seconds, timeout_seconds, max_attempts, runner,
    notify, next_run, consecutive_failures, created_at, updated_at)
SELECT gen_random_uuid(), 'local', 'idle-' || g, 'noop',
    jsonb_build_object('at', to_char(
        (CAST(:due AS timestamptz) + g * interval '1 ms') AT TIME ZONE 'UTC',
        'YYYY-MM-DD"T"HH24:MI:SS.US"+00:00"')),
    true, 'isolated', 'allow', 'skip', 3600, 60, 60, 1, CAST(:runner AS jsonb), '[]'::jsonb,
    CAST(:due AS timestamptz) + g * interval '1 ms', 0, now(), now()
FROM generate_series(1, :rows) AS g
"""


def _row(name: str, trigger: dict[str, Any], next_run: datetime, now: datetime) -> dict[str, Any]:
    return {
        "id": uuid.uuid4(),
        "owner": "local",
        "name": name,
        "prompt": "noop",
        "trigger": trigger,
        "enabled": True,
        "mode": "isolated",
        "overlap": "allow",
        "catchup": "skip",
        "catchup_window_seconds": 3600,
        "misfire_grace_seconds": 60,
        "timeout_seconds": 60,
        "max_attempts": 1,
        "runner": RUNNER,
        "notify": [],
        "next_run": next_run,
        "consecutive_failures": 0,
        "created_at": now,
        "updated_at": now,
    }


def _scheduled(name: str, spec: dict[str, Any], now: datetime) -> dict[str, Any]:
    """A schedule row for trigger ``spec``, its ``next_run`` computed as the service would."""
    trigger = triggers.parse_trigger(spec, now)
    due = triggers.next_fire(trigger, now)
    assert due is not None
    return _row(name, triggers.trigger_to_dict(trigger), due.astimezone(UTC), now)


def shaped_rows(shape: str, count: int, t0: datetime, every: int) -> list[dict[str, Any]]:
    """The ``count`` schedules of a workload shape (see the module docstring), as if created
    now, or a second before T0 when populating started late (a loaded machine)."""
    now = min(datetime.now(UTC), t0 - timedelta(seconds=1))
    if shape == "burst":
        return [_scheduled(f"burst-{i}", {"at": t0.isoformat()}, now) for i in range(count)]
    if shape == "steady":
        return [
            _scheduled(
                f"steady-{i}",
                {
                    "every_seconds": every,
                    "start_at": (t0 + timedelta(seconds=every * i / count)).isoformat(),
                },
                now,
            )
            for i in range(count)
        ]
    start = now + IDLE_AHEAD
    return [
        _scheduled(
            f"idle-{i}",
            {"every_seconds": 3600, "start_at": (start + timedelta(seconds=i)).isoformat()}
            if i % 2
            else {"cron": "0 3 1 1 *", "timezone": "UTC"},
            now,
        )
        for i in range(count)
    ]


async def populate(
    url: str,
    rows: list[dict[str, Any]],
    idle_rows: int,
    migrate: Callable[[str], None] = upgrade,
) -> None:
    """Migrate (``migrate(url)``: Alembic in this process unless told otherwise), then insert
    ``rows`` (1,000 per INSERT) and ``idle_rows`` far-future ones."""
    await asyncio.to_thread(migrate, url)
    # Loading a million rows is one statement far longer than the service's 10 s bound.
    db = Database(url, timeout=POPULATE_TIMEOUT_SECONDS)
    try:
        async with db.session() as session:
            for start in range(0, len(rows), 1000):
                await session.execute(insert(Schedule), rows[start : start + 1000])
            if idle_rows:
                if db.capabilities.dialect != "postgresql":
                    raise SystemExit("--idle-rows needs PostgreSQL")
                due = datetime.now(UTC) + timedelta(days=30)
                params = {"due": due, "rows": idle_rows, "runner": json.dumps(RUNNER)}
                await session.execute(text(IDLE_ROWS_SQL), params)
    finally:
        await db.dispose()


class Engine:
    """One engine in this process, and what it costs: statements, claim times, CPU."""

    def __init__(self, url: str, data_dir: Path, lag_probe: bool = True) -> None:
        settings = Settings()
        self.db = Database(url)
        self.probe = Database(url, pool_size=1)  # the adapter's own queries, never counted
        self.statements = 0
        self.claims: list[tuple[float, int]] = []
        for pool in self.db.engines:  # the ORM sessions' engine and the batched statements' one
            event.listen(pool.sync_engine, "before_cursor_execute", self._count)
        # The clock as the service wires it (web/app.py): on PostgreSQL the database's, kept
        # in step by a ClockWatch, whose statement (one a minute) is counted like any other.
        clock: Clock = utcnow
        self.watch: ClockWatch | None = None
        if self.db.capabilities.database_clock:
            clock = DatabaseClock()
            self.watch = ClockWatch(
                clock, self.db, instance_id=f"bench-{os.getpid()}", metrics=EngineMetrics()
            )
        self.ledger = SqlRunStore(
            self.db, owner=f"bench-{os.getpid()}", data_dir=data_dir, clock=clock
        )
        self.ledger.claim_due_jobs = self._timed(self.ledger.claim_due_jobs)  # type: ignore[method-assign]
        self.loop = SchedulerLoop(
            self.ledger,
            concurrency=settings.scheduler_concurrency,
            tick_seconds=settings.scheduler_tick_seconds,
            clock=clock,
        )
        self.settings = {
            "concurrency": settings.scheduler_concurrency,
            "tick_s": settings.scheduler_tick_seconds,
        }
        # The 10 ms heartbeat costs CPU of its own: off where CPU time is the figure.
        self.monitor = LagMonitor() if lag_probe else None

    def _count(self, *_args: Any) -> None:
        self.statements += 1

    def _timed(self, claim: Callable[..., Any]) -> Callable[..., Any]:
        async def timed(*args: Any, **kwargs: Any) -> Claim:
            started = time.perf_counter()
            found: Claim = await claim(*args, **kwargs)
            self.claims.append((time.perf_counter() - started, len(found.runs)))
            return found

        return timed

    async def start(self) -> None:
        if self.watch is not None:
            await self.watch.start()
        self.loop.start()
        settle_heap()  # as ``agentcron serve`` does once started (web.engine.heap)
        if self.monitor is not None:  # after the startup's one collection: lag is the burst's
            self.monitor.start()
        mark_ready()

    async def stop(self) -> float | None:
        """Stop the engine; the maximum event-loop lag seen, in milliseconds."""
        lag = None if self.monitor is None else await self.monitor.stop()
        await self.loop.stop()
        if self.watch is not None:
            await self.watch.stop()
        return lag

    async def query(self, sql: str) -> list[Any]:
        return await query(self.probe, sql)

    async def dispose(self) -> None:
        await self.db.dispose()
        await self.probe.dispose()

    def claim_figures(self) -> dict[str, Any]:
        """Claims that took runs (sum, max) and the median of the empty ones, in ms."""
        busy = [seconds for seconds, runs in self.claims if runs]
        empty = [seconds for seconds, runs in self.claims if not runs]
        return {
            "claims": len(busy),
            "claim_ms_total": round(sum(busy) * 1000, 2),
            "claim_ms_max": round(max(busy) * 1000, 2) if busy else None,
            "empty_claim_ms_median": round(statistics.median(empty) * 1000, 2) if empty else None,
        }


COUNTS = (
    "SELECT count(*), count(DISTINCT schedule_id),"
    " count(*) FILTER (WHERE status = 'succeeded') FROM runs"
)
COUNTS_SQLITE = (
    "SELECT count(*), count(DISTINCT schedule_id),"
    " sum(CASE WHEN status = 'succeeded' THEN 1 ELSE 0 END) FROM runs"
)


async def query(probe: Database, sql: str) -> list[Any]:
    """The rows of one raw statement on the adapter's own ``Database`` (never counted). On
    PostgreSQL its connection is named ``bench-probe`` first, so the harness leaves its
    backend out of the database's CPU (``bench.pgcost``)."""
    async with probe.session(write=False) as session:
        if probe.capabilities.dialect == "postgresql":
            await session.execute(text(f"SET application_name = '{PROBE_APPLICATION}'"))
        return list((await session.execute(text(sql))).all())


async def succeeded(probe: Database) -> int:
    """How many runs the ledger records ``succeeded`` (one transaction)."""
    rows = await query(probe, "SELECT count(*) FROM runs WHERE status = 'succeeded'")
    return int(rows[0][0])


async def ledger(probe: Database) -> dict[str, Any]:
    """What the ledger shows of a burst, as ``common.result`` takes it: every run's start and
    finish (epoch seconds), how many runs for how many schedules, how many succeeded (two
    transactions)."""
    rows = await query(probe, "SELECT started_at, finished_at FROM runs")
    counts = COUNTS if probe.capabilities.dialect == "postgresql" else COUNTS_SQLITE
    recorded, distinct, done = (await query(probe, counts))[0]
    return {
        "starts": [_epoch(row[0]) for row in rows if row[0] is not None],
        "finishes": [_epoch(row[1]) for row in rows if row[1] is not None],
        "recorded": recorded,
        "distinct": distinct,
        "succeeded": done or 0,
    }


async def made_as_created(db: Database, data_dir: Path) -> None:
    """Each schedule's task directory, as creating it through the API makes it (``populate``
    writes the rows directly): the burst's runs find their directories, as a user's do."""
    async with db.session(write=False) as session:
        rows = (await session.execute(select(Schedule.owner, Schedule.id))).all()
    for owner, schedule_id in rows:
        make_workdir(str(task_workdir(data_dir, owner, schedule_id)))


async def fire(
    url: str, count: int, t0: datetime, give_up_after: float, replicas: int
) -> dict[str, Any]:
    """Run the engine from before ``t0`` until every run succeeded (or ``t0 + give_up_after``)."""
    own = 0
    with tempfile.TemporaryDirectory() as tmp:
        engine = Engine(url, Path(tmp))
        await made_as_created(engine.probe, Path(tmp))
        await engine.start()
        await sleep_until(t0)
        cpu = cpu_seconds()  # from T0: the burst's CPU, not the wait before it
        deadline = t0.timestamp() + give_up_after
        polls = 0
        # The no-op runs in worker threads, so a cheap in-process poll (no database statement);
        # with replicas this process runs only its share: ask the database now and then.
        while len(noop.CALLS) < count and time.time() < deadline:
            await asyncio.sleep(POLL_SECONDS)
            polls += 1
            if replicas > 1 and polls % 5 == 0 and time.time() > t0.timestamp():
                own += 1
                if (await succeeded(engine.probe)) >= count:
                    break
        # Every no-op has been called; wait for the ledger to record the outcomes.
        while time.time() < deadline:
            own += 1
            if (await succeeded(engine.probe)) >= count:
                break
            await asyncio.sleep(POLL_SECONDS)
        cpu = cpu_seconds() - cpu
        await burst_done()
        statements = engine.statements
        max_lag = await engine.stop()
        own += 2
        shown = await ledger(engine.probe)
        claims = engine.claim_figures()
        settings = engine.settings
        await engine.dispose()
    return result(
        contender="agentcron",
        count=count,
        t0=t0,
        **shown,
        max_lag_ms=max_lag,
        own_transactions=own,
        extra={
            "statements": statements,
            "statements_per_fire": round(statements / count, 3) if count else None,
            "executed_here": len(noop.CALLS),
            "cpu_s": round(cpu, 3),
            **slot_gap_figures(noop.SPANS, int(settings["concurrency"])),
            **claims,
            **settings,
        },
    )


def _epoch(value: datetime | str) -> float:
    # The probe reads raw SQL, so SQLite hands back its stored text (naive UTC).
    if isinstance(value, str):
        value = datetime.fromisoformat(value).replace(tzinfo=UTC)
    return value.timestamp()


async def idle(url: str, window: float) -> dict[str, Any]:
    """Statements over an idle window, then how late an outside change is noticed."""
    with tempfile.TemporaryDirectory() as tmp:
        engine = Engine(url, Path(tmp), lag_probe=False)
        await engine.start()
        await asyncio.sleep(min(IDLE_WARMUP_SECONDS, window))
        before, cpu = engine.statements, cpu_seconds()
        emit({"event": "window_start"})
        await asyncio.sleep(window)
        statements, cpu = engine.statements - before, cpu_seconds() - cpu
        emit({"event": "window_end", "statements": statements})
        # The harness now has another process create a schedule due 0.5 s after its creation.
        deadline = time.time() + NOTICE_TIMEOUT_SECONDS
        while not noop.CALLS and time.time() < deadline:  # noqa: ASYNC110
            await asyncio.sleep(0.01)
        await engine.stop()
        rows = await engine.query(
            "SELECT due_at, started_at FROM runs WHERE started_at IS NOT NULL"
        )
        await engine.dispose()
    noticed = (_epoch(rows[0][1]) - _epoch(rows[0][0])) * 1000 if rows else None
    return {
        "contender": "agentcron",
        "window_s": window,
        "statements": statements,
        "statements_per_min": round(statements * 60 / window, 2),
        "cpu_s_per_min": round(cpu * 60 / window, 4),
        "noticed_ms": None if noticed is None else round(noticed, 1),
        "peak_rss_mb": peak_rss_mb(),
        **engine.settings,
    }


async def steady(url: str, count: int, t0: datetime, seconds: float, every: int) -> dict[str, Any]:
    """Run from before ``t0`` to ``t0 + seconds``; delays of the runs due in that window."""
    with tempfile.TemporaryDirectory() as tmp:
        engine = Engine(url, Path(tmp), lag_probe=False)
        await engine.start()
        await sleep_until(t0)
        before, cpu = engine.statements, cpu_seconds()
        await asyncio.sleep(seconds)
        statements, cpu = engine.statements - before, cpu_seconds() - cpu
        await engine.stop()
        rows = await engine.query("SELECT due_at, started_at FROM runs")
        claims = engine.claim_figures()
        await engine.dispose()
    # Start delays of the runs due up to a few seconds before the end (later ones could not
    # have started yet even when on time); CPU and statements per run started in the window.
    start, end = t0.timestamp(), t0.timestamp() + seconds
    tail = min(STEADY_TAIL_SECONDS, seconds / 4)
    runs = [(_epoch(d), None if s is None else _epoch(s)) for d, s in rows if d is not None]
    delays = [(s - d) * 1000 for d, s in runs if start <= d < end - tail and s is not None]
    fires = sum(1 for _, s in runs if s is not None and start <= s < end)
    # Schedule i is due at T0 + every * i / count + k * every: how many of those are measured.
    span = seconds - tail
    expected = sum(
        math.ceil((span - every * i / count) / every)
        for i in range(count)
        if every * i / count < span
    )

    def ms(value: float | None) -> float | None:
        return None if value is None else round(value, 1)

    return {
        "contender": "agentcron",
        "count": count,
        "every_s": every,
        "seconds": seconds,
        "fires": fires,
        "measured": len(delays),
        "not_started": expected - len(delays),
        "delay_p50_ms": ms(percentile(delays, 0.5)),
        "delay_p99_ms": ms(percentile(delays, 0.99)),
        "delay_max_ms": ms(max(delays) if delays else None),
        "cpu_s": round(cpu, 3),
        "cpu_s_per_1000_fires": round(cpu * 1000 / fires, 3) if fires else None,
        "statements_per_fire": round(statements / fires, 3) if fires else None,
        "peak_rss_mb": peak_rss_mb(),
        **claims,
        **engine.settings,
    }


async def create(url: str) -> dict[str, Any]:
    """One one-shot due 0.5 s from now, created the way the API would create it."""
    db = Database(url)
    try:
        due = datetime.now(UTC) + NOTICE_DELAY
        spec = ScheduleCreate(
            name="noticed", prompt="noop", trigger={"at": due.isoformat()}, runner=RUNNER
        )
        schedule = await ScheduleService(db).create(spec, "local")
    finally:
        await db.dispose()
    return {"created": str(schedule.id), "due_at": due.isoformat()}


def engine_url(dsn: str) -> str:
    """The SQLAlchemy URL of the harness's plain ``postgresql://``/``sqlite:///`` one: the
    service's async drivers."""
    return with_driver(dsn, "asyncpg" if backend(dsn) == "postgresql" else "aiosqlite")


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv, COMMANDS)
    configure_logging("json", "WARNING")
    url = engine_url(args.dsn)
    if args.command == "populate":
        rows = shaped_rows(args.shape, args.count, args.at, args.every)
        asyncio.run(populate(url, rows, args.idle_rows))
    elif args.command == "fire":
        emit(asyncio.run(fire(url, args.count, args.at, args.give_up_after, args.replicas)))
    elif args.command == "idle":
        emit(asyncio.run(idle(url, args.seconds)))
    elif args.command == "steady":
        emit(asyncio.run(steady(url, args.count, args.at, args.seconds, args.every)))
    else:
        emit(asyncio.run(create(url)))


if __name__ == "__main__":
    main(sys.argv[1:])
