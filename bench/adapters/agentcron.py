"""agentcron with its defaults, in process: ``Ledger`` + ``SchedulerLoop`` on PostgreSQL.

``populate`` migrates the database (Alembic, the only schema path) and bulk-inserts N enabled
one-shot schedules due at T0 with the ``python`` runner ``bench.noop:run``. ``fire`` starts a
``SchedulerLoop`` with its default settings (concurrency 4, tick 10 s) before T0 and waits
until the no-op has been called N times and the ledger records N ``succeeded`` runs. Start and
finish times are the ledger's own ``started_at``/``finished_at``; lost and duplicated runs are
counted in the ``runs`` table afterwards.
"""

from __future__ import annotations

import asyncio
import os
import sys
import tempfile
import time
import uuid
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from sqlalchemy import insert, text

from bench import noop
from bench.adapters.common import (
    LagMonitor,
    emit,
    mark_ready,
    parse_args,
    result,
    with_driver,
)
from core import triggers
from core.logging import configure_logging
from core.scheduler import Ledger
from core.storage import Database, Schedule
from core.storage.migrate import upgrade
from web.scheduler import SchedulerLoop

TARGET = "bench.noop:run"
POLL_SECONDS = 0.05


async def populate(url: str, count: int, t0: datetime) -> None:
    """Migrate, then insert ``count`` one-shot schedules due at ``t0`` (1,000 per INSERT)."""
    await asyncio.to_thread(upgrade, url)
    now = datetime.now(UTC)
    trigger = triggers.trigger_to_dict(triggers.parse_trigger({"at": t0.isoformat()}, now))
    rows: list[dict[str, Any]] = [
        {
            "id": uuid.uuid4(),
            "owner": "local",
            "name": f"burst-{i}",
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
            "runner": {"type": "python", "target": TARGET},
            "notify": [],
            "next_run": t0,
            "consecutive_failures": 0,
            "created_at": now,
            "updated_at": now,
        }
        for i in range(count)
    ]
    db = Database(url)
    try:
        async with db.session() as session:
            for start in range(0, count, 1000):
                await session.execute(insert(Schedule), rows[start : start + 1000])
    finally:
        await db.dispose()


async def fire(url: str, count: int, t0: datetime, give_up_after: float) -> dict[str, Any]:
    """Run the engine from before ``t0`` until every run succeeded (or ``t0 + give_up_after``)."""
    db = Database(url)
    own = 0
    monitor = LagMonitor()
    with tempfile.TemporaryDirectory() as tmp:
        ledger = Ledger(db, owner=f"bench-{os.getpid()}", data_dir=Path(tmp))
        loop = SchedulerLoop(ledger)
        monitor.start()
        loop.start()
        mark_ready()
        deadline = t0.timestamp() + give_up_after
        # The no-op runs in worker threads, so a cheap in-process poll (no database statement).
        while len(noop.CALLS) < count and time.time() < deadline:  # noqa: ASYNC110
            await asyncio.sleep(POLL_SECONDS)
        # Every no-op has been called; wait for the ledger to record the outcomes.
        while time.time() < deadline:
            async with db.session(write=False) as session:
                own += 1
                done = await session.scalar(
                    text("SELECT count(*) FROM runs WHERE status = 'succeeded'")
                )
            if (done or 0) >= count:
                break
            await asyncio.sleep(POLL_SECONDS)
        max_lag = await monitor.stop()
        await loop.stop()
        async with db.session(write=False) as session:
            own += 1
            rows = (await session.execute(text("SELECT started_at, finished_at FROM runs"))).all()
            recorded, distinct, succeeded = (
                await session.execute(
                    text(
                        "SELECT count(*), count(DISTINCT schedule_id),"
                        " count(*) FILTER (WHERE status = 'succeeded') FROM runs"
                    )
                )
            ).one()
    await db.dispose()
    return result(
        contender="agentcron",
        count=count,
        t0=t0,
        starts=[row.started_at.timestamp() for row in rows if row.started_at is not None],
        finishes=[row.finished_at.timestamp() for row in rows if row.finished_at is not None],
        recorded=recorded,
        distinct=distinct,
        succeeded=succeeded,
        max_lag_ms=max_lag,
        own_transactions=own,
    )


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    configure_logging("json", "WARNING")
    url = with_driver(args.dsn, "asyncpg")
    if args.command == "populate":
        asyncio.run(populate(url, args.count, args.at))
    else:
        emit(asyncio.run(fire(url, args.count, args.at, args.give_up_after)))


if __name__ == "__main__":
    main(sys.argv[1:])
