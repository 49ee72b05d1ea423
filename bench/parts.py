"""Each database part of a run's cost, measured alone: agentcron's claim, admission and
record on PostgreSQL, in CPU and wall time per run.

The burst's time on PostgreSQL is bound by the engine's thread, so its ratio to the ceiling
moves only as the CPU each run costs that thread moves. This splits that cost by part:
``agentcron-floor`` (a contender of the harness) is the engine's own work; this is its
ledger's, each verb called directly in a loop with nothing else running in the process.

One repetition, on a fresh copy of a database holding ``--count`` one-shot schedules due at
one instant (those of the burst workload, cloned from a template populated once), after one
that is not counted, so the process is as warm as a running engine:

1. **claim**: ``SqlRunStore.claim_due_jobs(now, limit, start)`` until nothing is due, as the loop
   calls it at concurrency 256 (``--limit`` 500, ``--start`` 256): ``start`` of each claim's
   runs are admitted by the claim, the rest are leased and wait ``pending``;
2. **admit**: the waiting runs in batches of ``--batch`` through ``SqlRunStore.admit``, as
   the engine admits them ahead of their slot;
3. **record**: every run ``succeeded`` in batches of ``--batch`` through
   ``SqlRunStore.record``, as the engine's group commit records outcomes.

CPU is this process's (``time.process_time``: Python, SQLAlchemy and asyncpg's protocol);
wall includes the database's own work and the round trips. The heap is settled after the
warm-up, as the service settles it once started. Afterwards every run must be ``succeeded``,
once, or the command fails.

    python -m bench.parts                          # 10,000 runs, 7 repetitions
    python -m bench.parts --count 2000 --reps 3 --pg postgresql://postgres@127.0.0.1:5432/test

Prints a table of medians and minimums over the repetitions (µs per run, each part divided
by the runs it handled) and the machine's speed before and after (``machine_speed``: CPU
time on a shared machine moves with its load), and writes every repetition to
``bench/results/parts.json``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Awaitable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from sqlalchemy import func, select

from agentcron.core.clock import utcnow
from agentcron.core.ledger.sql import SqlRunStore
from agentcron.core.ledger.store import Outcome
from agentcron.core.logging import configure_logging
from agentcron.core.states import RunStatus
from agentcron.core.storage.database import Database
from agentcron.core.storage.models import Run
from agentcron.web.engine.heap import settle_heap
from bench.adapters.agentcron import engine_url, populate, shaped_rows
from bench.harness import DEFAULT_PG
from bench.infra import ROOT, admin_dsn, sql

PARTS = ("claim", "admit", "record")
RESULTS = ROOT / "bench" / "results" / "parts.json"


@dataclass
class Part:
    """One part of one repetition: the runs it handled and what it cost."""

    runs: int = 0
    cpu_s: float = 0.0
    wall_s: float = 0.0
    calls: int = 0

    async def timed(self, call: Awaitable[Any]) -> Any:
        """Await ``call``, adding its CPU and wall time; the caller adds the runs it handled."""
        cpu, wall = time.process_time(), time.perf_counter()
        found = await call
        self.cpu_s += time.process_time() - cpu
        self.wall_s += time.perf_counter() - wall
        self.calls += 1
        return found

    def per_run_us(self) -> dict[str, float]:
        runs = max(self.runs, 1)
        return {"cpu_us": 1e6 * self.cpu_s / runs, "wall_us": 1e6 * self.wall_s / runs}


@dataclass
class Repetition:
    parts: dict[str, Part] = field(default_factory=lambda: {name: Part() for name in PARTS})


async def repetition(
    db: Database, count: int, due: datetime, limit: int, start: int, batch: int
) -> Repetition:
    """Claim, admit and record every run of the fresh copy ``db`` reaches; check it after."""
    # The ledger's clock runs from just after the due instant, whatever the time now: a copy
    # made minutes after the template still finds its schedules on time, not misfired.
    shift = due + timedelta(seconds=1) - utcnow()

    def clock() -> datetime:
        return utcnow() + shift

    rep = Repetition()
    claim_part, admit_part, record_part = (rep.parts[name] for name in PARTS)
    with tempfile.TemporaryDirectory(prefix="agentcron-parts-") as data:
        owner = f"parts-{uuid.uuid4().hex[:8]}"
        ledger = SqlRunStore(db, owner=owner, data_dir=Path(data), clock=clock)
        started: list[Run] = []
        waiting: list[Run] = []
        while True:
            claim = await claim_part.timed(ledger.claim_due_jobs(clock(), limit, start))
            if not claim.runs:
                break
            claim_part.runs += len(claim.runs)
            for run in claim.runs:
                if run.id in claim.started:
                    started.append(run)
                else:
                    waiting.append(run)
        for at in range(0, len(waiting), batch):
            chunk = waiting[at : at + batch]
            decisions = await admit_part.timed(ledger.admit(chunk))
            admit_part.runs += len(chunk)
            for decision in decisions:
                if decision.action != "run" or decision.run is None:
                    raise SystemExit(f"a claimed run was not admitted: {decision}")
                started.append(decision.run)
        for at in range(0, len(started), batch):
            outcomes = [
                Outcome(run, RunStatus.SUCCEEDED, output="ok") for run in started[at : at + batch]
            ]
            await record_part.timed(ledger.record(outcomes))
            record_part.runs += len(outcomes)
    await _check(db, count)
    return rep


async def _check(db: Database, count: int) -> None:
    async with db.session(write=False) as session:
        statuses = select(Run.status, func.count()).group_by(Run.status)
        rows = (await session.execute(statuses)).all()
    by_status = {str(status): int(n) for status, n in rows}
    if by_status != {RunStatus.SUCCEEDED: count}:
        raise SystemExit(f"expected {count} succeeded runs, found {by_status}")


async def measure(
    admin: str, count: int, reps: int, limit: int, start: int, batch: int
) -> list[Repetition]:
    """``reps`` repetitions after one that warms the process (SQLAlchemy's compiled
    statements, asyncpg's prepared ones), as a running engine is warm: each on a fresh copy
    of one populated template, reached through the same ``Database``."""
    due = datetime.now(UTC).replace(microsecond=0)
    template = f"agentcron_bench_parts_{uuid.uuid4().hex[:8]}"
    copy = f"{template}_copy"
    await sql(admin, f'CREATE DATABASE "{template}"')
    db = Database(engine_url(admin_dsn(admin, copy)))
    try:
        rows = shaped_rows("burst", count, due, 60)
        await populate(engine_url(admin_dsn(admin, template)), rows, 0)
        done: list[Repetition] = []
        for index in range(reps + 1):
            await db.dispose()  # its connections go with the copy; the engine stays warm
            await sql(admin, f'DROP DATABASE IF EXISTS "{copy}" WITH (FORCE)')
            await sql(admin, f'CREATE DATABASE "{copy}" TEMPLATE "{template}"')
            await sql(admin, "CHECKPOINT")
            rep = await repetition(db, count, due, limit, start, batch)
            if index == 0:
                settle_heap()  # as the service does once started
            else:
                done.append(rep)
        return done
    finally:
        await db.dispose()
        for name in (copy, template):
            await sql(admin, f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def machine_speed() -> float:
    """Seconds of CPU for 10 million pure-Python additions in a function: how quick this
    shared machine is right now (0.28-0.35 s on the development machine at a quick moment;
    the same loop at a script's top level, which docs/benchmarks.md quotes for older runs,
    takes about twice as long), so figures of two runs compare only beside theirs."""
    began, total = time.process_time(), 0
    for number in range(10_000_000):
        total += number
    return round(time.process_time() - began, 2)


def summary(reps: list[Repetition]) -> dict[str, dict[str, float]]:
    """Per part: median and minimum over the repetitions of CPU and wall µs per run."""
    figures: dict[str, dict[str, float]] = {}
    for name in PARTS:
        per_run = [rep.parts[name].per_run_us() for rep in reps]
        figures[name] = {
            "runs": statistics.median(rep.parts[name].runs for rep in reps),
            "calls": statistics.median(rep.parts[name].calls for rep in reps),
            **{
                f"{key}_median": round(statistics.median(p[key] for p in per_run), 1)
                for key in ("cpu_us", "wall_us")
            },
            **{
                f"{key}_min": round(min(p[key] for p in per_run), 1)
                for key in ("cpu_us", "wall_us")
            },
        }
    return figures


def table(figures: dict[str, dict[str, float]]) -> str:
    lines = [
        "| part | runs | calls | CPU µs per run, median (min) | wall µs per run, median (min) |",
        "| --- | ---: | ---: | ---: | ---: |",
    ]
    for name, f in figures.items():
        cpu = f"{f['cpu_us_median']} ({f['cpu_us_min']})"
        wall = f"{f['wall_us_median']} ({f['wall_us_min']})"
        lines.append(f"| {name} | {f['runs']:.0f} | {f['calls']:.0f} | {cpu} | {wall} |")
    return "\n".join(lines)


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m bench.parts", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("--count", type=int, default=10_000, help="runs per repetition")
    parser.add_argument("--reps", type=int, default=7, help="repetitions, each on a fresh copy")
    parser.add_argument("--limit", type=int, default=500, help="runs per claim at most")
    parser.add_argument("--start", type=int, default=256, help="runs each claim admits")
    parser.add_argument("--batch", type=int, default=256, help="runs per admission and per record")
    parser.add_argument(
        "--pg",
        default=DEFAULT_PG,
        help="admin URL (default: AGENTCRON_BENCH_PG_URL, as the harness)",
    )
    parser.add_argument("--out", type=Path, default=RESULTS, help="where every repetition goes")
    return parser.parse_args(argv)


def main(argv: list[str]) -> None:
    args = parse(argv)
    configure_logging("json", "WARNING")
    before = machine_speed()
    reps = asyncio.run(
        measure(admin_dsn(args.pg), args.count, args.reps, args.limit, args.start, args.batch)
    )
    speed = [before, machine_speed()]
    figures = summary(reps)
    report = {
        "command": " ".join(["python -m bench.parts", *argv]),
        "finished_at": datetime.now(UTC).isoformat(timespec="seconds"),
        "machine_speed_s": speed,
        "summary": figures,
        "repetitions": [{name: vars(part) for name, part in rep.parts.items()} for rep in reps],
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2) + "\n")
    print(table(figures))
    print(f"\n10 million pure-Python additions: {speed[0]} s before, {speed[1]} s after")


if __name__ == "__main__":
    main(sys.argv[1:])
