"""APScheduler 4.0.0a6: ``AsyncScheduler`` with ``SQLAlchemyDataStore`` on PostgreSQL (asyncpg)
or SQLite (aiosqlite), the default local event broker.

Runs only in its own virtualenv (``bench/.venvs/apscheduler4``, made by the harness), from the
repository root so ``bench.noop`` imports. ``populate`` starts the data store (it creates its
tables), configures the no-op task with ``max_running_jobs=None`` (the default, 1, would run
the burst's jobs of this one task one at a time) and no misfire grace, and writes N schedules
with a ``DateTrigger`` at T0 in one bulk INSERT, each row what ``add_schedule`` writes,
instead of N transactions. ``fire`` starts the scheduler (both roles, at most 100 jobs at
once: its default) before T0 and waits for N ``JobReleased`` events. A run counts as started
when the no-op is called and finished at its ``JobReleased`` event; jobs left in the store
afterwards never ran.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import sys
import time
from datetime import datetime
from typing import Any

from apscheduler import (  # type: ignore[import-not-found]
    AsyncScheduler,
    JobOutcome,
    JobReleased,
    Schedule,
)
from apscheduler.datastores.sqlalchemy import (  # type: ignore[import-not-found]
    SQLAlchemyDataStore,
)
from apscheduler.triggers.date import DateTrigger  # type: ignore[import-not-found]
from sqlalchemy import func, select

from bench import noop
from bench.adapters.common import (
    LagMonitor,
    backend,
    burst_done,
    cpu_seconds,
    emit,
    mark_ready,
    parse_args,
    result,
    sleep_until,
    with_driver,
)


async def populate(url: str, count: int, t0: datetime) -> None:
    """Create the data store's tables, the no-op task and ``count`` schedules due at ``t0``."""
    store = SQLAlchemyDataStore(url)
    async with AsyncScheduler(store) as scheduler:
        task = await scheduler.configure_task(
            noop.aps_job, max_running_jobs=None, misfire_grace_time=None
        )
        rows = []
        for i in range(count):
            schedule = Schedule(
                id=f"burst-{i}",
                task_id=task.id,
                trigger=DateTrigger(t0),
                args=(f"burst-{i}",),
                misfire_grace_time=None,
                job_executor=task.job_executor,
            )
            schedule.next_fire_time = schedule.trigger.next()
            rows.append(store._convert_outgoing_fire_times(schedule.marshal(store.serializer)))
        async with store._engine.begin() as conn:
            for start in range(0, count, 1000):
                await conn.execute(store._t_schedules.insert(), rows[start : start + 1000])


async def fire(url: str, count: int, t0: datetime, give_up_after: float) -> dict[str, Any]:
    """Run the scheduler from before ``t0`` until every job was released (or the deadline)."""
    store = SQLAlchemyDataStore(url)
    finishes: list[float] = []
    outcomes: dict[str, int] = {}
    done = asyncio.Event()

    def on_released(event: JobReleased) -> None:
        outcomes[event.outcome.name] = outcomes.get(event.outcome.name, 0) + 1
        if event.outcome is JobOutcome.success:
            finishes.append(time.time())
        if sum(outcomes.values()) >= count:
            done.set()

    monitor = LagMonitor()
    async with AsyncScheduler(store) as scheduler:
        scheduler.subscribe(on_released, {JobReleased})
        monitor.start()
        await scheduler.start_in_background()
        mark_ready()
        await sleep_until(t0)
        cpu = cpu_seconds()  # from T0: the burst's CPU, not the wait before it
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(done.wait(), t0.timestamp() + give_up_after - time.time())
        cpu = cpu_seconds() - cpu
        await burst_done()
        max_lag = await monitor.stop()
        await scheduler.stop()
        await scheduler.wait_until_stopped()
        async with store._engine.connect() as conn:
            jobs_left = (
                await conn.execute(select(func.count()).select_from(store._t_jobs))
            ).scalar_one()
            schedules_left = (
                await conn.execute(select(func.count()).select_from(store._t_schedules))
            ).scalar_one()
    starts = [when for calls in noop.STARTS.values() for when in calls]
    return result(
        contender="apscheduler4",
        count=count,
        t0=t0,
        starts=starts,
        finishes=finishes,
        recorded=len(starts),
        distinct=len(noop.STARTS),
        succeeded=len(finishes),
        max_lag_ms=max_lag,
        own_transactions=1,
        extra={
            "cpu_s": round(cpu, 3),
            "outcomes": outcomes,
            "jobs_left_in_store": jobs_left,
            "schedules_left_in_store": schedules_left,
        },
    )


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    logging.basicConfig(level=logging.WARNING)
    driver = "asyncpg" if backend(args.dsn) == "postgresql" else "aiosqlite"
    url = with_driver(args.dsn, driver)
    if args.command == "populate":
        asyncio.run(populate(url, args.count, args.at))
    else:
        emit(asyncio.run(fire(url, args.count, args.at, args.give_up_after)))


if __name__ == "__main__":
    main(sys.argv[1:])
