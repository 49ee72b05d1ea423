"""The workloads. Each function runs one measurement on fresh scratch databases and returns
its figures (a dict, or one dict per variant); ``bench.harness`` repeats them over rounds.

- burst: N one-shots due at T0, any contender (``burst``);
- replicas: the agentcron burst with one, then two engine processes on one database;
- bigidle: the agentcron burst of 1,000 next to a big table of schedules due in 30 days,
  against the same 1,000 alone (the big table is loaded once into a template database);
- idle: agentcron with N schedules none of which is due: statements and commits per minute,
  then how late a schedule created by another process is noticed;
- steady: agentcron with N interval schedules spread evenly: start delays, CPU per 1,000
  fires, dead tuples of ``runs`` and ``schedules`` sampled every 10 s.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import time
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import asyncpg

from bench.adapters.common import backend
from bench.infra import (
    AGENTCRON,
    CONTENDERS,
    Contender,
    admin_dsn,
    commits,
    database_name,
    log,
    read_json,
    run,
    scratch,
    spawn,
    sql,
)
from bench.pgcost import PgCost

LEAD_SECONDS = 5.0  # from populating to T0: room for populate and the contender's start-up
GIVE_UP_AFTER = 600.0
DEAD_TUPLE_EVERY = 10.0
engine = CONTENDERS[AGENTCRON]


def t0_after(count: int, lead: float) -> datetime:
    return datetime.now(UTC).replace(microsecond=0) + timedelta(seconds=lead + count / 1500)


async def fire(
    contender: Contender, admin: str, dsn: str, count: int, t0: datetime, processes: int = 1
) -> dict[str, Any]:
    """Fire a populated burst with ``processes`` adapter processes; commits per fire from
    ``pg_stat_database`` (PostgreSQL only) minus the adapters' own bookkeeping."""
    postgresql = backend(dsn) == "postgresql"
    if postgresql:
        await sql(admin, "CHECKPOINT")
        before = await commits(admin, dsn)
    replicas = processes if processes > 1 else None
    options = {"count": count, "at": t0, "give_up_after": GIVE_UP_AFTER, "replicas": replicas}
    # PostgreSQL's own cost, from T0 to the adapter's burst-done line (one process only).
    cost = PgCost(admin, database_name(dsn)) if postgresql and processes == 1 else None
    watching = asyncio.create_task(cost.watch(t0)) if cost is not None else None

    def on_event(event: str) -> None:
        if cost is not None and event == "burst_done":
            cost.end()

    try:
        results = await asyncio.gather(
            *(run(contender, "fire", dsn, on_event, **options) for _ in range(processes))
        )
    finally:
        if watching is not None:
            if not cost.done.is_set():  # the adapter never said: no figures
                watching.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await watching
    figures = results[0] if processes == 1 else combine(results, count)
    cpu = figures.get("cpu_s")
    figures["cpu_us_per_run"] = round(cpu * 1e6 / count, 1) if _number(cpu) and count else None
    if cost is not None:
        figures.update(
            cost.figures(count)
            if cost.done.is_set()
            else dict.fromkeys(("pg_cpu_us_per_run", "wal_bytes_per_run", "db_wal_bytes_per_run"))
        )
    margin = min(result["ready_margin_s"] or 0.0 for result in results)
    if margin < 0.5:
        log(f"  warning: {contender.name} was ready only {margin:.1f} s before T0 (busy machine?)")
    figures["contender"] = contender.name
    figures["database"] = backend(dsn)
    figures["commits_per_fire"] = None
    if postgresql:
        await asyncio.sleep(1.0)  # backends report their counters as they exit
        own = sum(result["own_transactions"] for result in results)
        transactions = await commits(admin, dsn) - before - own
        figures["commits_per_fire"] = round(transactions / count, 3)
    return figures


def _number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def combine(results: list[dict[str, Any]], count: int) -> dict[str, Any]:
    """One burst's figures from the processes that shared it. Times, losses and duplicates
    are read from the ledger, which every process sees whole: the worst of them is kept.
    ``executed`` sums the no-op calls of every process: more than N means a run executed
    twice even if the ledger shows it once."""
    worst = max(results, key=lambda result: result["all_finished_s"] or float("inf"))
    times = [result["all_started_s"] for result in results]
    started = None if None in times else max(times)
    statements = sum(result.get("statements", 0) for result in results)
    return {
        **worst,
        "processes": len(results),
        "all_started_s": started,
        "fires_per_s": round(worst["started"] / started, 1) if started else None,
        "first_lateness_ms": min(
            (result["first_lateness_ms"] for result in results if result["first_lateness_ms"]),
            default=None,
        ),
        "lost": max(result["lost"] for result in results),
        "duplicated": max(result["duplicated"] for result in results),
        "executed": sum(result["executed_here"] for result in results),
        "executed_per_process": [result["executed_here"] for result in results],
        "statements": statements,
        "statements_per_fire": round(statements / count, 3),
        "cpu_s": round(sum(result["cpu_s"] for result in results), 3),
        "peak_rss_mb": max(result["peak_rss_mb"] for result in results),
        "max_loop_lag_ms": max(result["max_loop_lag_ms"] for result in results),
        # A slot gap is one process's: its slots, its runs. Pooled over processes that share
        # the burst it would pair runs of different engines, so none is given for the whole.
        "slot_gaps": None,
        "slot_gap_p50_ms": None,
        "slot_gap_p99_ms": None,
    }


async def burst(
    contender: Contender,
    admin: str,
    database: str,
    count: int,
    *,
    lead: float = LEAD_SECONDS,
    template: str | None = None,
    processes: int = 1,
) -> dict[str, Any]:
    """One burst of ``count`` runs for one contender on a fresh scratch database."""
    async with scratch(admin, database, template) as dsn:
        if database == "postgresql":
            # A cloned template (bigidle) or a dropped database leaves much to write: do it
            # now, not in the lead time before T0 (the CHECKPOINT before firing is then short).
            await sql(admin, "CHECKPOINT")
        t0 = t0_after(count, lead + contender.lead_s)  # populating is not timed: T0 leaves it room
        await run(contender, "populate", dsn, count=count, at=t0)
        figures = await fire(contender, admin, dsn, count, t0, processes)
    if processes == 1 and "executed_here" in figures:  # the agentcron contenders
        figures["executed"] = figures["executed_here"]
    return figures


async def replicas(
    admin: str, count: int, processes: int = 2, lead: float = LEAD_SECONDS
) -> dict[str, dict[str, Any]]:
    """The agentcron burst with one engine process and with ``processes``, in random order."""
    figures: dict[str, dict[str, Any]] = {}
    for n in random.sample([1, processes], 2):
        result = await burst(engine, admin, "postgresql", count, lead=lead, processes=n)
        result["processes"] = n
        figures[f"{n} process" + ("es" if n > 1 else "")] = result
    return figures


async def bigidle_template(admin: str, rows: int) -> tuple[str, float]:
    """A migrated template database holding ``rows`` schedules due in 30 days, vacuumed and
    analysed; its name and how long loading it took (not part of any figure)."""
    name = f"agentcron_bench_tmpl_{uuid.uuid4().hex[:8]}"
    await sql(admin, f'CREATE DATABASE "{name}"')
    started = time.monotonic()
    dsn = admin_dsn(admin, name)
    try:
        await run(engine, "populate", dsn, count=0, at=datetime.now(UTC), idle_rows=rows)
        await sql(dsn, "VACUUM ANALYZE")
    except BaseException:
        await sql(admin, f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')  # leave no scratch
        raise
    return name, round(time.monotonic() - started, 1)


async def bigidle(
    admin: str, template: str, rows: int, count: int, lead: float = LEAD_SECONDS
) -> dict[str, dict[str, Any]]:
    """The burst of ``count`` next to the big idle table and alone, in random order."""
    variants = {f"{count:,} due + {rows:,} idle": template, f"{count:,} due alone": None}
    figures: dict[str, dict[str, Any]] = {}
    for name in random.sample(list(variants), 2):
        figures[name] = await burst(
            engine, admin, "postgresql", count, lead=lead, template=variants[name]
        )
        figures[name]["idle_rows"] = rows if variants[name] else 0
    return figures


async def idle(
    admin: str, database: str, count: int, window: float, contender: Contender = engine
) -> dict[str, Any]:
    """Statements and commits per minute of a scheduler with nothing due; then, for
    agentcron, how late it starts a schedule that another process creates due 0.5 s later
    (APScheduler 3 has no way to hear of it before its own next due time)."""
    async with scratch(admin, database) as dsn:
        postgresql = database == "postgresql"
        await run(contender, "populate", dsn, count=count, at=datetime.now(UTC), shape="idle")
        if postgresql:  # or autovacuum analyses the fresh table during the window
            await sql(dsn, "VACUUM ANALYZE")
        process = await spawn(contender, "idle", dsn, seconds=window)
        try:
            await read_json(process, "window_start")
            before = await commits(admin, dsn) if postgresql else 0
            await read_json(process, "window_end")
            after = await commits(admin, dsn) if postgresql else 0
            created = await run(engine, "create", dsn) if contender is engine else None
            figures = await read_json(process)
            await process.wait()
        finally:
            if process.returncode is None:
                process.kill()
                await process.wait()
    figures.update(database=database, count=count, created=created)
    figures["commits_per_min"] = round((after - before) * 60 / window, 2) if postgresql else None
    return figures


async def steady(
    admin: str,
    database: str,
    count: int,
    seconds: float,
    every: int = 60,
    lead: float = LEAD_SECONDS,
) -> dict[str, Any]:
    """``count`` schedules every ``every`` s, phases spread evenly, for ``seconds`` from T0."""
    async with scratch(admin, database) as dsn:
        t0 = t0_after(count, lead)
        await run(engine, "populate", dsn, count=count, at=t0, shape="steady", every=every)
        samples: list[dict[str, float]] = []
        stop = asyncio.Event()
        sampler = (
            asyncio.create_task(_dead_tuples(dsn, t0, samples, stop))
            if database == "postgresql"
            else None
        )
        try:
            figures = await run(
                engine, "steady", dsn, count=count, at=t0, seconds=seconds, every=every
            )
        finally:
            stop.set()
            if sampler is not None:
                await sampler
    figures["database"] = database
    figures["dead_tuples"] = samples
    for table in ("runs", "schedules"):
        values = [sample[table] for sample in samples if table in sample]
        figures[f"dead_{table}_max"] = max(values) if values else None
    return figures


async def _dead_tuples(
    dsn: str, t0: datetime, samples: list[dict[str, float]], stop: asyncio.Event
) -> None:
    """Sample ``n_dead_tup`` of ``runs`` and ``schedules`` every 10 s from T0 until ``stop``
    (and once more then); ``t`` is seconds after T0."""
    conn = await asyncpg.connect(dsn)
    query = (
        "SELECT relname, n_dead_tup FROM pg_stat_user_tables WHERE relname IN ('runs', 'schedules')"
    )
    try:
        delay = max(0.0, t0.timestamp() - time.time())
        while True:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), delay)
            rows = await conn.fetch(query)
            sample: dict[str, float] = {"t": round(time.time() - t0.timestamp(), 1)}
            sample.update({row["relname"]: row["n_dead_tup"] for row in rows})
            samples.append(sample)
            if stop.is_set():
                return
            delay = DEAD_TUPLE_EVERY
    finally:
        await conn.close()
