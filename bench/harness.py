"""The benchmark harness of agentcron (issue 5): ``python -m bench``.

Workloads (``--workloads``, default all of them):

- burst: N one-shot schedules due at one instant T0 (10,000; ``--count``), every contender
  (agentcron in process at its defaults and at concurrency 256, running the no-op as a
  coroutine on the event loop as the peers do, and at 256 with it in a worker thread
  (agentcron-c256-thread), the same engine over a run store that costs nothing
  (agentcron-floor: the engine's own share), agentcron as a real ``agentcron serve`` process
  (agentcron-serve: the async no-op at the default concurrency; agentcron-serve-c256: at 256;
  agentcron-serve-sync and agentcron-serve-sync-c256: a sync no-op in a worker thread, as
  users' sync targets run), the asyncpg ceiling, APScheduler 3.11 (``AsyncIOScheduler`` with
  an async no-op, and apscheduler3-background: ``BackgroundScheduler`` with its default
  thread pool and a sync no-op), APScheduler 4.0.0a6; ``--contenders``), each in its own
  process started before T0 on a fresh scratch database: time until every run started and
  finished, fires/s, lost and doubled runs, commits per fire (``pg_stat_database``),
  statements per fire (agentcron in process: SQLAlchemy engine events), peak RSS, event-loop
  lag; per run, the CPU of the process that schedules and runs (the served one's for
  ``agentcron serve``) and PostgreSQL's own cost (its backends' CPU, WAL bytes of the scratch
  database and of the server: ``bench.pgcost``); for agentcron the slot gap (from a run's end
  to the next start in its concurrency slot, p50/p99), and for the served ones the latency of
  ``GET /api/v1/schedules`` read every 50 ms while the burst runs;
- replicas: the agentcron burst with two engine processes on one PostgreSQL database against
  one process, same round: duplicates, no-op executions, throughput;
- bigidle: the agentcron burst of 1,000 next to 1,000,000 schedules due in 30 days
  (``--bigidle-rows``; loaded once into a template database, not timed) against the 1,000
  alone: time spent in the claim transactions, fires/s, RSS;
- idle: agentcron with 10,000 schedules none due for 15 minutes: SQL statements and commits
  per minute over a 60 s window (``--idle-seconds``), then how long after its due time the
  engine starts a schedule that another process creates (PostgreSQL: via its NOTIFY); the
  same statements and commits for APScheduler 3.11 when it is a contender (not in quick);
- steady: agentcron with 6,000 schedules every 60 s, phases spread evenly (100 fires/s), for
  180 s (``--steady-seconds``): start delay p50/p99/max, CPU s per 1,000 fires, dead tuples
  of ``runs`` and ``schedules`` every 10 s.

Databases (``--db``, default ``postgresql,sqlite``): burst, idle and steady run on each (the
ceiling on PostgreSQL only; commits per fire only on PostgreSQL); replicas and bigidle are
PostgreSQL only. burst, replicas and bigidle repeat over ``--rounds`` (contenders or
variants in a random order per round); idle and steady are one long window each.
``--quick``: burst of 2,000, idle with a 15 s window, replicas of 2,000, PostgreSQL only; of the
served variants only agentcron-serve and agentcron-serve-sync-c256.

Peers run in virtualenvs the harness creates under ``bench/.venvs`` (never project
dependencies); a peer that does not install or fails is skipped, with the reason printed and
kept in the results. Results: ``bench/results/latest.json`` (every round of every workload),
a table per workload on stdout, a chart with a panel per workload (``bench/results/bench.png``,
drawn in the plot virtualenv).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import platform
import random
import subprocess
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from bench import report, workloads
from bench.infra import (
    AGENTCRON,
    CONTENDERS,
    ROOT,
    AdapterFailed,
    Contender,
    admin_dsn,
    ensure_venv,
    log,
    sql,
)

RESULTS = ROOT / "bench" / "results"
DEFAULT_PG = os.environ.get("AGENTCRON_BENCH_PG_URL", "postgresql://postgres@127.0.0.1:5432/test")
WORKLOADS = ("burst", "idle", "steady", "bigidle", "replicas")
QUICK_WORKLOADS = ("burst", "idle", "replicas")
DEFAULT_CONTENDERS = (
    "agentcron",
    "agentcron-c256",
    "agentcron-c256-thread",
    "agentcron-floor",
    "agentcron-serve",
    "agentcron-serve-c256",
    "agentcron-serve-sync",
    "agentcron-serve-sync-c256",
    "ceiling",
    "apscheduler3",
    "apscheduler3-background",
    "apscheduler4",
)
# Quick: where the served sync burst at 256 stands against APScheduler 3.11 and the ceiling
# (issue 33), without the served variants that each add a service's 40 s lead per round.
QUICK_CONTENDERS = tuple(
    name
    for name in DEFAULT_CONTENDERS
    if name not in ("agentcron-serve-c256", "agentcron-serve-sync")
)
DATABASES = ("postgresql", "sqlite")
PG_ONLY = ("bigidle", "replicas")
SINGLE_WINDOW = ("idle", "steady")


class Bench:
    """One ``python -m bench`` invocation: options, the peers still in the race, results."""

    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.admin = admin_dsn(args.pg)
        self.count = args.count or (2000 if args.quick else 10000)
        self.skipped: dict[str, str] = {}
        self.contenders: list[Contender] = []
        for name in args.contenders.split(","):
            contender = CONTENDERS[name]
            if contender.venv is not None:
                try:
                    ensure_venv(contender.venv)
                except (OSError, subprocess.CalledProcessError) as exc:
                    self.skip(name, f"its virtualenv could not be made: {exc}")
                    continue
            self.contenders.append(contender)

    def peers(self, *names: str) -> list[Contender]:
        """The peers among ``names`` that are still in the race."""
        return [contender for contender in self.contenders if contender.name in names]

    def skip(self, name: str, reason: str) -> None:
        log(f"skipping {name}: {reason}")
        self.skipped[name] = reason
        self.contenders = [c for c in self.contenders if c.name != name]

    async def burst(self, database: str) -> dict[str, Any]:
        rounds: list[dict[str, dict[str, Any]]] = []
        for number in range(1, self.args.rounds + 1):
            chosen = [c for c in self.contenders if database in c.databases]
            this_round: dict[str, dict[str, Any]] = {}
            for contender in random.sample(chosen, len(chosen)):
                log(f"burst on {database}, round {number}/{self.args.rounds}: {contender.name}")
                try:
                    figures = await workloads.burst(
                        contender, self.admin, database, self.count, lead=self.args.lead
                    )
                except AdapterFailed as exc:
                    if contender.venv is None:
                        raise
                    self.skip(contender.name, f"burst on {database}: {exc}")
                    continue
                log(f"  {json.dumps(figures)}")
                this_round[contender.name] = figures
            rounds.append(this_round)
        return {
            "count": self.count,
            "rounds": self.args.rounds,
            "per_round": rounds,
            **report.summarize(rounds, report.BURST_RATIOS),
        }

    async def replicas(self, database: str) -> dict[str, Any]:
        rounds = []
        for number in range(1, self.args.rounds + 1):
            log(f"replicas, round {number}/{self.args.rounds}: burst of {self.count}")
            figures = await workloads.replicas(self.admin, self.count)
            log(f"  {json.dumps(figures)}")
            rounds.append(figures)
        return {
            "count": self.count,
            "rounds": self.args.rounds,
            "per_round": rounds,
            **report.summarize(rounds, report.REPLICAS_RATIOS),
        }

    async def bigidle(self, database: str) -> dict[str, Any]:
        rows, count = self.args.bigidle_rows, 1000
        log(f"bigidle: loading {rows:,} idle schedules into a template database")
        template, load_s = await workloads.bigidle_template(self.admin, rows)
        log(f"  loaded in {load_s} s")
        rounds = []
        try:
            for number in range(1, self.args.rounds + 1):
                log(f"bigidle, round {number}/{self.args.rounds}")
                figures = await workloads.bigidle(self.admin, template, rows, count)
                log(f"  {json.dumps(figures)}")
                rounds.append(figures)
        finally:
            await sql(self.admin, f'DROP DATABASE IF EXISTS "{template}" WITH (FORCE)')
        return {
            "rows": rows,
            "count": count,
            "load_s": load_s,
            "rounds": self.args.rounds,
            "per_round": rounds,
            **report.summarize(rounds, report.bigidle_ratios(rows, count)),
        }

    async def idle(self, database: str) -> dict[str, Any]:
        window = self.args.idle_seconds or (15.0 if self.args.quick else 60.0)
        figures: dict[str, dict[str, Any]] = {}
        peers = [] if self.args.quick else self.peers("apscheduler3")  # optional: not in quick
        for contender in [CONTENDERS[AGENTCRON], *peers]:
            log(f"idle on {database}: {contender.name}, 10,000 schedules, {window:g} s window")
            figures[contender.name] = await workloads.idle(
                self.admin, database, 10000, window, contender
            )
            log(f"  {json.dumps(figures[contender.name])}")
        return {"rounds": 1, "per_round": [figures], **report.summarize([figures], {})}

    async def steady(self, database: str) -> dict[str, Any]:
        seconds = self.args.steady_seconds
        log(f"steady on {database}: 6,000 schedules every 60 s, {seconds:g} s")
        figures = await workloads.steady(self.admin, database, 6000, seconds)
        log(f"  {json.dumps({k: v for k, v in figures.items() if k != 'dead_tuples'})}")
        return single(figures)


def single(figures: dict[str, Any]) -> dict[str, Any]:
    """The section of a one-window workload (idle, steady): one round, one variant."""
    rounds = [{AGENTCRON: figures}]
    return {"rounds": 1, "per_round": rounds, **report.summarize(rounds, {})}


def machine(postgresql: str) -> dict[str, Any]:
    """What the figures were measured on (``postgresql``: the server's version)."""
    memory_kb = 0
    with contextlib.suppress(OSError):
        memory_kb = int(Path("/proc/meminfo").read_text().split()[1])
    return {
        "cpus": os.cpu_count(),
        "memory_gb": round(memory_kb / 1024 / 1024, 1),
        "postgresql": postgresql,
        "python": platform.python_version(),
        "platform": platform.platform(),
    }


def chart(results_path: Path, png: Path) -> bool:
    """Render the PNG in the bench-only plot virtualenv; False (and why) if that fails."""
    try:
        python = ensure_venv("plot")
        subprocess.run(
            [str(python), "-m", "bench.plot", str(results_path), str(png)],
            cwd=ROOT,
            env=dict(os.environ, PYTHONPATH=str(ROOT)),
            check=True,
        )
    except (OSError, subprocess.CalledProcessError) as exc:
        log(f"no chart: {exc}")
        return False
    return True


def parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m bench",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--quick", action="store_true", help="a few minutes (see above)")
    parser.add_argument("--workloads", help=f"comma-separated, of {', '.join(WORKLOADS)}")
    parser.add_argument("--db", help="comma-separated, of postgresql, sqlite")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--count", type=int, help="burst and replicas size (10,000; quick 2,000)")
    parser.add_argument("--pg", default=DEFAULT_PG, help="admin URL of the PostgreSQL server")
    parser.add_argument(
        "--contenders",
        help=f"of the burst, comma-separated, of {', '.join(CONTENDERS)}"
        " (default: every one but agentcron-c64 and apscheduler3-defaults; quick: of the served"
        " variants only agentcron-serve and agentcron-serve-sync-c256)",
    )
    parser.add_argument(
        "--lead",
        type=float,
        default=workloads.LEAD_SECONDS,
        help="burst: seconds from populating to T0, on top of each contender's own (5)",
    )
    parser.add_argument("--bigidle-rows", type=int, default=1_000_000)
    parser.add_argument("--idle-seconds", type=float, help="idle window (60; quick 15)")
    parser.add_argument("--steady-seconds", type=float, default=180.0)
    parser.add_argument("--no-chart", action="store_true")
    parser.add_argument("--seed", type=int, help="seed of the per-round order")
    args = parser.parse_args(argv)
    args.contenders = args.contenders or ",".join(
        QUICK_CONTENDERS if args.quick else DEFAULT_CONTENDERS
    )
    args.workloads = args.workloads or ",".join(QUICK_WORKLOADS if args.quick else WORKLOADS)
    args.db = args.db or ("postgresql" if args.quick else ",".join(DATABASES))
    for value, known in ((args.workloads, WORKLOADS), (args.db, DATABASES)):
        unknown = set(value.split(",")) - set(known)
        if unknown:
            parser.error(f"unknown: {', '.join(sorted(unknown))} (known: {', '.join(known)})")
    return args


async def run_all(args: argparse.Namespace, command: str) -> dict[str, Any]:
    bench = Bench(args)
    started = time.monotonic()
    results: dict[str, Any] = {
        "command": command,
        "quick": args.quick,
        "machine": machine(await sql(bench.admin, "SHOW server_version")),
        "skipped": bench.skipped,
        "workloads": {},
    }
    latest = RESULTS / "latest.json"
    RESULTS.mkdir(parents=True, exist_ok=True)
    for workload in args.workloads.split(","):
        databases = [
            db for db in args.db.split(",") if db == "postgresql" or workload not in PG_ONLY
        ]
        for database in databases:
            section = await getattr(bench, workload)(database)
            results["workloads"].setdefault(workload, {})[database] = section
            results["duration_s"] = round(time.monotonic() - started, 1)
            results["finished_at"] = datetime.now(UTC).isoformat(timespec="seconds")
            latest.write_text(json.dumps(results, indent=2) + "\n")  # kept if a later one fails
    return results


def headline(workload: str, database: str, section: dict[str, Any]) -> str:
    what = {
        "burst": f"burst of {section.get('count', 0):,}",
        "replicas": f"replicas: burst of {section.get('count', 0):,}, 1 vs 2 engine processes",
        "bigidle": f"bigidle: {section.get('count', 0):,} due next to "
        f"{section.get('rows', 0):,} idle (loaded in {section.get('load_s')} s) vs alone",
        "idle": "idle: 10,000 schedules, none due; per replica",
        "steady": "steady: 6,000 schedules every 60 s (100 fires/s)",
    }[workload]
    rounds = section["rounds"]
    return f"## {what}, on {database}; " + (
        f"medians of {rounds} round(s)" if workload not in SINGLE_WINDOW else "one window"
    )


def main(argv: list[str] | None = None) -> None:
    args = parse(argv)
    random.seed(args.seed)
    command = "python -m bench " + " ".join(sys.argv[1:] if argv is None else argv)
    results = asyncio.run(run_all(args, command.strip()))
    for workload, sections in results["workloads"].items():
        for database, section in sections.items():
            print(headline(workload, database, section) + "\n")
            print(report.tables(workload, section) + "\n")
    for name, reason in results["skipped"].items():
        print(f"skipped {name}: {reason}")
    latest = RESULTS / "latest.json"
    print(f"written: {latest.relative_to(ROOT)} ({results.get('duration_s')} s)")
    if not args.no_chart and chart(latest, RESULTS / "bench.png"):
        print(f"chart: {(RESULTS / 'bench.png').relative_to(ROOT)}")
