"""Retention: the pruner against one big DELETE of the same rows (``python -m bench.retention``).

Both start from the same ledger: ``--schedules`` schedules with ``--runs`` finished runs each,
created evenly over the last 90 days, so two thirds are past the 30-day default. The pruner
(``core.retention.prune_runs``, batches of 500 with a pause after each) is measured against the
peer a hand-written clean-up would be: one ``DELETE`` of the same rows in one transaction. While
each deletes, a probe writes one schedule row every 20 ms, as the engine's claims and results
do, and records how long each write waited: the figure that says whether pruning stays off the
hot path. Prints one JSON object per database.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import time
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

from sqlalchemy import delete, func, insert, select, text, update

from agentcron.core.retention import RetentionPolicy, prune_runs
from agentcron.core.storage.database import Database
from agentcron.core.storage.migrate import upgrade
from agentcron.core.storage.models import Run, Schedule
from bench.infra import scratch

NOW = datetime.now(UTC).replace(microsecond=0)
PG_ADMIN = os.environ.get("AGENTCRON_TEST_PG_URL", "postgresql://postgres@127.0.0.1:5432/test")


def async_url(dsn: str) -> str:
    if dsn.startswith("sqlite:"):
        return dsn.replace("sqlite:", "sqlite+aiosqlite:", 1)
    return dsn.replace("postgresql:", "postgresql+asyncpg:", 1)


async def fill(db: Database, schedules: int, runs: int) -> list[uuid.UUID]:
    ids = [uuid.uuid4() for _ in range(schedules)]
    async with db.session() as session:
        await session.execute(
            insert(Schedule),
            [
                {
                    "id": schedule_id,
                    "owner": "bench",
                    "name": "retention",
                    "prompt": "p",
                    "trigger": {"every_seconds": 3600, "start_at": NOW.isoformat()},
                    "enabled": False,
                    "mode": "isolated",
                    "overlap": "allow",
                    "catchup": "skip",
                    "catchup_window_seconds": 3600,
                    "misfire_grace_seconds": 60,
                    "timeout_seconds": 60,
                    "max_attempts": 1,
                    "runner": {"type": "command", "argv": ["true"]},
                    "notify": [],
                    "consecutive_failures": 0,
                    "created_at": NOW,
                    "updated_at": NOW,
                }
                for schedule_id in ids
            ],
        )
    step = timedelta(days=90) / runs
    for schedule_id in ids:
        rows = []
        for index in range(runs):
            created = NOW - timedelta(days=90) + index * step
            rows.append(
                {
                    "id": uuid.uuid4(),
                    "schedule_id": schedule_id,
                    "trigger": "schedule",
                    "due_at": created,
                    "status": "succeeded",
                    "attempt": 1,
                    "payload": {},
                    "created_at": created,
                    "available_at": created,
                    "started_at": created,
                    "finished_at": created,
                    "cancel_requested": False,
                }
            )
        async with db.session() as session:
            await session.execute(insert(Run), rows)
    return ids


async def probe(db: Database, schedule_id: uuid.UUID, stop: asyncio.Event) -> list[float]:
    """Write one schedule row every 20 ms until ``stop``; each write's seconds."""
    waits: list[float] = []
    while not stop.is_set():
        began = time.perf_counter()
        async with db.session() as session:
            await session.execute(
                update(Schedule).where(Schedule.id == schedule_id).values(updated_at=NOW)
            )
        waits.append(time.perf_counter() - began)
        await asyncio.sleep(0.02)
    return waits


async def one_delete(db: Database, keep_last: int) -> int:
    """The peer: every run past 30 days outside each schedule's newest ``keep_last``, in one
    statement and one transaction (what a cron'd clean-up script would send)."""
    horizon = NOW - timedelta(days=30)
    ranked = select(
        Run.id,
        Run.created_at,
        func.row_number()  # each schedule's runs, newest first
        .over(partition_by=Run.schedule_id, order_by=Run.created_at.desc())
        .label("rank"),
    ).subquery()
    doomed = select(ranked.c.id).where(ranked.c.created_at < horizon, ranked.c.rank > keep_last)
    async with db.session() as session:
        result = await session.execute(delete(Run).where(Run.id.in_(doomed)))
        return int(getattr(result, "rowcount", 0) or 0)


async def measure(dsn: str, how: str, schedules: int, runs: int) -> dict[str, Any]:
    db = Database(async_url(dsn))
    try:
        await asyncio.to_thread(upgrade, async_url(dsn))
        ids = await fill(db, schedules, runs)
        # A ledger that grew over months has planner statistics (autovacuum's ANALYZE); one
        # bulk-loaded a second ago has none, and PostgreSQL then picks a sequential scan for
        # every batch's DELETE. Measure the ledger users have.
        async with db.session() as session:
            await session.execute(text("ANALYZE"))
        stop = asyncio.Event()
        probing = asyncio.create_task(probe(db, ids[0], stop))
        await asyncio.sleep(0.2)
        began = time.perf_counter()
        if how == "pruner":
            report = await prune_runs(db, NOW, RetentionPolicy())
            deleted, batches = report.deleted, report.batches
        else:
            deleted, batches = await one_delete(db, RetentionPolicy().keep_last), 1
        seconds = time.perf_counter() - began
        await asyncio.sleep(0.2)
        stop.set()
        waits = sorted(await probing)
        return {
            "how": how,
            "deleted": deleted,
            "batches": batches,
            "seconds": round(seconds, 3),
            "rows_per_second": round(deleted / seconds),
            "probe_writes": len(waits),
            "probe_p50_ms": round(waits[len(waits) // 2] * 1000, 1),
            "probe_max_ms": round(waits[-1] * 1000, 1),
        }
    finally:
        await db.dispose()


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--db", default="postgresql,sqlite")
    parser.add_argument("--schedules", type=int, default=200)
    parser.add_argument("--runs", type=int, default=1000)
    args = parser.parse_args()
    for database in args.db.split(","):
        results = []
        for how in ("pruner", "one DELETE"):
            async with scratch(PG_ADMIN.replace("+asyncpg", ""), database) as dsn:
                results.append(await measure(dsn, how, args.schedules, args.runs))
        pruner, peer = results
        print(
            json.dumps(
                {
                    "database": database,
                    "rows": args.schedules * args.runs,
                    "pruner": pruner,
                    "one_delete": peer,
                    "time_ratio": round(pruner["seconds"] / peer["seconds"], 2),
                    "probe_max_ratio": round(pruner["probe_max_ms"] / peer["probe_max_ms"], 3),
                }
            ),
            flush=True,
        )


if __name__ == "__main__":
    asyncio.run(main())
