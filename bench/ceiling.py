"""The ceiling: the smallest loop that does the engine's database work, directly on asyncpg.

Its own two tables in the same scratch database: ``bench_schedules(id, next_run)`` with a
partial index on due rows, and ``bench_runs`` with UNIQUE(schedule_id, due_at). Per batch of
500 it sends ONE statement (a CTE: locked select of due rows ``FOR UPDATE SKIP LOCKED``, run
insert ``ON CONFLICT DO NOTHING``, ``next_run`` advanced, here to NULL for one-shots), calls
the no-op for each claimed run, then ONE statement marks the batch ``succeeded``: two
statements and two commits per 500 fires. Between batches it sleeps until the earliest
``next_run``. It tells how close to the machine's limit a scheduler on this database can get.

    python -m bench.ceiling populate --dsn URL --count N --at ISO
    python -m bench.ceiling fire --dsn URL --count N --at ISO
"""

from __future__ import annotations

import asyncio
import sys
import time
from datetime import UTC, datetime
from typing import Any

import asyncpg

from bench import noop
from bench.adapters.common import (
    LagMonitor,
    burst_done,
    cpu_seconds,
    emit,
    mark_ready,
    parse_args,
    result,
    sleep_until,
    with_driver,
)

BATCH = 500
TICK_SECONDS = 10.0

SCHEMA = """
CREATE TABLE IF NOT EXISTS bench_schedules (
    id bigserial PRIMARY KEY,
    next_run timestamptz
);
CREATE INDEX IF NOT EXISTS bench_schedules_due ON bench_schedules (next_run)
    WHERE next_run IS NOT NULL;
CREATE TABLE IF NOT EXISTS bench_runs (
    id bigserial PRIMARY KEY,
    schedule_id bigint NOT NULL REFERENCES bench_schedules (id),
    due_at timestamptz NOT NULL,
    status text NOT NULL,
    started_at timestamptz,
    finished_at timestamptz,
    UNIQUE (schedule_id, due_at)
);
"""

CLAIM = """
WITH due AS (
    SELECT id, next_run FROM bench_schedules
    WHERE next_run <= $1
    ORDER BY next_run
    LIMIT $2
    FOR UPDATE SKIP LOCKED
), advanced AS (
    UPDATE bench_schedules AS s SET next_run = NULL FROM due WHERE s.id = due.id
)
INSERT INTO bench_runs (schedule_id, due_at, status, started_at)
SELECT id, next_run, 'running', $1 FROM due
ON CONFLICT DO NOTHING
RETURNING id
"""

FINISH = (
    "UPDATE bench_runs SET status = 'succeeded', finished_at = now() WHERE id = ANY($1::bigint[])"
)
NEXT_DUE = "SELECT min(next_run) FROM bench_schedules WHERE next_run IS NOT NULL"


async def populate(dsn: str, count: int, t0: datetime) -> None:
    """Create the ceiling's tables and ``count`` schedules due at ``t0`` in one statement."""
    conn = await asyncpg.connect(dsn)
    try:
        await conn.execute(SCHEMA)
        await conn.execute(
            "INSERT INTO bench_schedules (next_run) SELECT $1 FROM generate_series(1, $2)",
            t0,
            count,
        )
    finally:
        await conn.close()


async def fire(dsn: str, count: int, t0: datetime, give_up_after: float) -> dict[str, Any]:
    """Claim, run and finish batches until ``count`` runs succeeded (or ``t0 + give_up_after``)."""
    conn = await asyncpg.connect(dsn)
    monitor = LagMonitor()
    monitor.start()
    mark_ready()
    starts: list[float] = []
    finishes: list[float] = []
    deadline = t0.timestamp() + give_up_after
    try:
        claim = await conn.prepare(CLAIM)
        await sleep_until(t0)
        cpu = cpu_seconds()  # from T0: the burst's CPU, not the wait before it
        while len(finishes) < count and time.time() < deadline:
            ids = [row[0] for row in await claim.fetch(datetime.now(UTC), BATCH)]
            if ids:
                for _ in ids:
                    starts.append(time.time())
                    noop.run(None)
                await conn.execute(FINISH, ids)
                finishes.extend([time.time()] * len(ids))
                if len(ids) == BATCH or len(finishes) >= count:
                    continue  # more may be due at once, or all done: no sleep
            due = await conn.fetchval(NEXT_DUE)
            delay = TICK_SECONDS if due is None else due.timestamp() - time.time() + 0.001
            await asyncio.sleep(max(0.0, min(TICK_SECONDS, delay, deadline - time.time())))
        cpu = cpu_seconds() - cpu
        await burst_done()
        max_lag = await monitor.stop()
        recorded, distinct, succeeded = await conn.fetchrow(
            "SELECT count(*), count(DISTINCT schedule_id),"
            " count(*) FILTER (WHERE status = 'succeeded') FROM bench_runs"
        )
    finally:
        await conn.close()
    return result(
        contender="ceiling",
        count=count,
        t0=t0,
        starts=starts,
        finishes=finishes,
        recorded=recorded,
        distinct=distinct,
        succeeded=succeeded,
        max_lag_ms=max_lag,
        own_transactions=1,
        extra={"cpu_s": round(cpu, 3)},
    )


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    dsn = with_driver(args.dsn, None)
    if args.command == "populate":
        asyncio.run(populate(dsn, args.count, args.at))
    else:
        emit(asyncio.run(fire(dsn, args.count, args.at, args.give_up_after)))


if __name__ == "__main__":
    main(sys.argv[1:])
