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
event; jobs left in the store afterwards were never fired.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import pickle
import sys
import time
from datetime import UTC, datetime
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
from apscheduler.triggers.date import DateTrigger  # type: ignore[import-not-found]
from apscheduler.util import datetime_to_utc_timestamp  # type: ignore[import-not-found]
from sqlalchemy import func, select

from bench import noop
from bench.adapters.common import (
    LagMonitor,
    backend,
    emit,
    mark_ready,
    parse_args,
    result,
    with_driver,
)

DEFAULTS = os.environ.get("BENCH_APS_DEFAULTS", "") == "1"
NAME = "apscheduler3-defaults" if DEFAULTS else "apscheduler3"


def populate(url: str, count: int, t0: datetime) -> None:
    """Create the job store's table and write ``count`` one-shot jobs due at ``t0``."""
    store = SQLAlchemyJobStore(url=url)
    scheduler = AsyncIOScheduler(jobstores={"default": store}, timezone=UTC)
    store.start(scheduler, "default")
    options: dict[str, Any] = (
        {"misfire_grace_time": 1, "coalesce": False}
        if DEFAULTS
        else {"misfire_grace_time": None, "coalesce": True}
    )
    rows = []
    for i in range(count):
        job = Job(
            scheduler,
            id=f"burst-{i}",
            func="bench.noop:aps_job",
            args=(f"burst-{i}",),
            kwargs={},
            name="noop",
            trigger=DateTrigger(run_date=t0, timezone=UTC),
            executor="default",
            max_instances=1,
            next_run_time=t0,
            **options,
        )
        rows.append(
            {
                "id": job.id,
                "next_run_time": datetime_to_utc_timestamp(t0),
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
    scheduler = AsyncIOScheduler(
        jobstores={"default": store},
        job_defaults={"misfire_grace_time": None, "coalesce": True},
        timezone=UTC,
    )
    finishes: list[float] = []
    missed: list[str] = []
    done = asyncio.Event()

    def on_event(event: JobExecutionEvent) -> None:
        if event.code == EVENT_JOB_MISSED:
            missed.append(event.job_id)
        else:
            finishes.append(time.time())
        if len(finishes) + len(missed) >= count:
            done.set()

    scheduler.add_listener(on_event, EVENT_JOB_EXECUTED | EVENT_JOB_ERROR | EVENT_JOB_MISSED)
    monitor = LagMonitor()
    monitor.start()
    scheduler.start()
    mark_ready()
    deadline = t0.timestamp() + give_up_after
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(done.wait(), deadline - time.time())
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
        extra={"missed": len(missed), "jobs_left_in_store": left},
    )


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    # One "was missed" warning per dropped job would flood the harness; the count is reported.
    logging.getLogger("apscheduler").setLevel(logging.ERROR)
    url = with_driver(args.dsn, "psycopg2" if backend(args.dsn) == "postgresql" else None)
    if args.command == "populate":
        populate(url, args.count, args.at)
    else:
        emit(asyncio.run(fire(url, args.count, args.at, args.give_up_after)))


if __name__ == "__main__":
    main(sys.argv[1:])
