"""APScheduler 3.11: ``AsyncIOScheduler``, ``SQLAlchemyJobStore`` on PostgreSQL (psycopg2) or
SQLite.

Runs only in its own virtualenv (``bench/.venvs/apscheduler3``, made by the harness), from the
repository root so ``bench.noop`` imports. ``populate`` writes N ``DateTrigger`` jobs due at
T0 in the job store's own format (the row ``add_job`` would write, pickled job state), in one
bulk INSERT rather than N commits, with ``misfire_grace_time=None`` and ``coalesce=True``
(or APScheduler's defaults, 1 s and no coalescing, when ``BENCH_APS_DEFAULTS=1``, to count the
runs it drops). ``fire`` starts the scheduler before T0 and waits until every job has run or
been reported missed. The no-op is an ``async def`` job, so it runs on the event loop that
also runs the scheduler (and its blocking job store calls, which the loop-lag probe sees).
A run counts as started when the job is called and finished at the ``EVENT_JOB_EXECUTED``
event; jobs left in the store afterwards were never fired. For the idle workload,
``populate --shape idle`` writes jobs none of which is due for 15 minutes and ``idle`` counts
the job store's statements over a window (SQLAlchemy engine events), as the agentcron
adapter does. With ``BENCH_APS_BACKGROUND=1`` (apscheduler3-background) the scheduler is a
``BackgroundScheduler`` with its default executor (a pool of 10 threads) and the job the sync
``bench.noop:aps_sync_job``, as APScheduler's users run sync jobs; the job store, the job
options and what is measured stay the same. ``cpu_s``: this process's CPU from T0 until every
job ran (the scheduler's thread, the pool, the job store's calls).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import pickle
import sys
import time
from datetime import UTC, datetime, timedelta
from typing import Any

from apscheduler.events import (  # type: ignore[import-not-found]
    EVENT_JOB_ERROR,
    EVENT_JOB_EXECUTED,
    EVENT_JOB_MISSED,
    JobExecutionEvent,
)
from apscheduler.job import Job  # type: ignore[import-not-found]
from apscheduler.jobstores.sqlalchemy import SQLAlchemyJobStore  # type: ignore[import-not-found]
from apscheduler.schedulers.asyncio import AsyncIOScheduler  # type: ignore[import-not-found]
from apscheduler.schedulers.background import (  # type: ignore[import-not-found]
    BackgroundScheduler,
)
from apscheduler.triggers.cron import CronTrigger  # type: ignore[import-not-found]
from apscheduler.triggers.date import DateTrigger  # type: ignore[import-not-found]
from apscheduler.triggers.interval import IntervalTrigger  # type: ignore[import-not-found]
from apscheduler.util import datetime_to_utc_timestamp  # type: ignore[import-not-found]
from sqlalchemy import event, func, select

from bench import noop
from bench.adapters.common import (
    IDLE_WARMUP_SECONDS,
    LagMonitor,
    backend,
    burst_done,
    cpu_seconds,
    emit,
    mark_ready,
    parse_args,
    peak_rss_mb,
    result,
    sleep_until,
    with_driver,
)

DEFAULTS = os.environ.get("BENCH_APS_DEFAULTS", "") == "1"
# ``BackgroundScheduler`` (its default executor: a pool of 10 threads) and a sync no-op, as its
# users run sync jobs, instead of ``AsyncIOScheduler`` and a coroutine.
BACKGROUND = os.environ.get("BENCH_APS_BACKGROUND", "") == "1"
NAME = (
    "apscheduler3-defaults"
    if DEFAULTS
    else "apscheduler3-background"
    if BACKGROUND
    else "apscheduler3"
)
JOB = "bench.noop:aps_sync_job" if BACKGROUND else "bench.noop:aps_job"


def _trigger(shape: str, i: int, t0: datetime, now: datetime) -> Any:
    """``burst``: due at ``t0``; ``idle``: none due for 15 minutes, like the agentcron rows
    (half hourly intervals, half a yearly cron)."""
    if shape == "burst":
        return DateTrigger(run_date=t0, timezone=UTC)
    if i % 2:
        start = now + timedelta(minutes=15, seconds=i)
        return IntervalTrigger(hours=1, start_date=start, timezone=UTC)
    return CronTrigger(month=1, day=1, hour=3, timezone=UTC)


def populate(url: str, count: int, t0: datetime, shape: str) -> None:
    """Create the job store's table and write ``count`` jobs of ``shape``."""
    store = SQLAlchemyJobStore(url=url)
    scheduler = AsyncIOScheduler(jobstores={"default": store}, timezone=UTC)
    store.start(scheduler, "default")
    options: dict[str, Any] = (
        {"misfire_grace_time": 1, "coalesce": False}
        if DEFAULTS
        else {"misfire_grace_time": None, "coalesce": True}
    )
    rows = []
    now = datetime.now(UTC)
    for i in range(count):
        trigger = _trigger(shape, i, t0, now)
        due = trigger.get_next_fire_time(None, now) if shape != "burst" else t0
        job = Job(
            scheduler,
            id=f"burst-{i}",
            func=JOB,
            args=(f"burst-{i}",),
            kwargs={},
            name="noop",
            trigger=trigger,
            executor="default",
            max_instances=1,
            next_run_time=due,
            **options,
        )
        rows.append(
            {
                "id": job.id,
                "next_run_time": datetime_to_utc_timestamp(due),
                "job_state": pickle.dumps(job.__getstate__(), store.pickle_protocol),
            }
        )
    with store.engine.begin() as conn:
        for start in range(0, count, 1000):
            conn.execute(store.jobs_t.insert(), rows[start : start + 1000])
    store.shutdown()


async def fire(url: str, count: int, t0: datetime, give_up_after: float) -> dict[str, Any]:
    """Run the scheduler from before ``t0`` until every job ran or was missed."""
    store = SQLAlchemyJobStore(url=url)
    kind = BackgroundScheduler if BACKGROUND else AsyncIOScheduler
    scheduler = kind(
        jobstores={"default": store},
        job_defaults={"misfire_grace_time": None, "coalesce": True},
        timezone=UTC,
    )
    finishes: list[float] = []
    missed: list[str] = []
    done = asyncio.Event()
    loop = asyncio.get_running_loop()

    def on_event(event: JobExecutionEvent) -> None:
        # Called in the pool's threads under BackgroundScheduler: the event is set on the loop.
        if event.code == EVENT_JOB_MISSED:
            missed.append(event.job_id)
        else:
            finishes.append(time.time())
        if len(finishes) + len(missed) >= count:
            loop.call_soon_threadsafe(done.set)

    scheduler.add_listener(on_event, EVENT_JOB_EXECUTED | EVENT_JOB_ERROR | EVENT_JOB_MISSED)
    monitor = LagMonitor()
    monitor.start()
    scheduler.start()
    mark_ready()
    await sleep_until(t0)
    cpu = cpu_seconds()  # from T0: the burst's CPU, not the wait before it
    deadline = t0.timestamp() + give_up_after
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(done.wait(), deadline - time.time())
    cpu = cpu_seconds() - cpu
    await burst_done()
    max_lag = await monitor.stop()
    scheduler.shutdown(wait=False)
    with store.engine.connect() as conn:
        left = conn.execute(select(func.count()).select_from(store.jobs_t)).scalar_one()
    store.shutdown()
    starts = [when for calls in noop.STARTS.values() for when in calls]
    return result(
        contender=NAME,
        count=count,
        t0=t0,
        starts=starts,
        finishes=finishes,
        recorded=len(starts),
        distinct=len(noop.STARTS),
        succeeded=len(finishes),
        max_lag_ms=max_lag,
        own_transactions=1,
        extra={"missed": len(missed), "jobs_left_in_store": left, "cpu_s": round(cpu, 3)},
    )


async def idle(url: str, window: float) -> dict[str, Any]:
    """Statements the job store executes over an idle window (the harness reads commits).
    APScheduler 3 has no cross-process wake-up: a job another process adds runs only once the
    scheduler wakes for a job of its own (here in 15 minutes), so nothing else is measured."""
    store = SQLAlchemyJobStore(url=url)
    statements = [0]

    def count(*_args: Any) -> None:
        statements[0] += 1

    event.listen(store.engine, "before_cursor_execute", count)
    scheduler = AsyncIOScheduler(jobstores={"default": store}, timezone=UTC)
    scheduler.start()
    mark_ready()
    await asyncio.sleep(min(IDLE_WARMUP_SECONDS, window))
    before = statements[0]
    emit({"event": "window_start"})
    await asyncio.sleep(window)
    during = statements[0] - before
    emit({"event": "window_end", "statements": during})
    scheduler.shutdown(wait=False)
    return {
        "contender": NAME,
        "window_s": window,
        "statements": during,
        "statements_per_min": round(during * 60 / window, 2),
        "noticed_ms": None,
        "peak_rss_mb": peak_rss_mb(),
    }


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv, ("populate", "fire", "idle"))
    # One "was missed" warning per dropped job would flood the harness; the count is reported.
    logging.getLogger("apscheduler").setLevel(logging.ERROR)
    url = with_driver(args.dsn, "psycopg2" if backend(args.dsn) == "postgresql" else None)
    if args.command == "populate":
        populate(url, args.count, args.at, args.shape)
    elif args.command == "idle":
        emit(asyncio.run(idle(url, args.seconds)))
    else:
        emit(asyncio.run(fire(url, args.count, args.at, args.give_up_after)))


if __name__ == "__main__":
    main(sys.argv[1:])
