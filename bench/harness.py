"""The burst benchmark: agentcron, the asyncpg ceiling and APScheduler 3.11, side by side.

Workload (issue 5, burst only): N one-shot schedules all due at one instant T0, on PostgreSQL,
scheduler process started before T0. Per round, each contender in a random order gets a fresh
scratch database, ``populate`` (not timed), ``CHECKPOINT``, then ``fire`` in its own process.
From the adapter's JSON line: time from T0 until every run started and until every run
finished, fires/s, first-run lateness, runs lost or duplicated, peak RSS of the contender
process, maximum event-loop lag. From the database: commits per fire, the delta of
``pg_stat_database.xact_commit`` of the scratch database over ``fire`` (all the contender's
transactions, read-only ones too) minus the adapter's own bookkeeping transactions.

The summary gives per-contender medians over rounds, and the medians (min-max) of per-round
ratios of the all-started time: APScheduler / agentcron (how many times faster agentcron is)
and agentcron / ceiling (how far from the minimal loop). Peers run in virtualenvs the harness
creates under ``bench/.venvs`` (never project dependencies); the chart is drawn in one too.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import random
import statistics
import subprocess
import sys
import time
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import asyncpg
from sqlalchemy.engine import make_url

ROOT = Path(__file__).resolve().parent.parent
VENVS = ROOT / "bench" / ".venvs"
RESULTS = ROOT / "bench" / "results"
DEFAULT_PG = os.environ.get("AGENTCRON_BENCH_PG_URL", "postgresql://postgres@127.0.0.1:5432/test")
PEER_PACKAGES = {
    "apscheduler3": ["apscheduler>=3.11,<4", "sqlalchemy>=2", "psycopg2-binary"],
    "plot": ["matplotlib"],
}


@dataclass(frozen=True)
class Contender:
    """One adapter: which interpreter runs which module, with which extra environment."""

    name: str
    module: str
    venv: str | None = None  # None: the project's interpreter
    env: tuple[tuple[str, str], ...] = ()

    def python(self) -> str:
        return sys.executable if self.venv is None else str(ensure_venv(self.venv))


CONTENDERS = {
    "agentcron": Contender("agentcron", "bench.adapters.agentcron"),
    "ceiling": Contender("ceiling", "bench.ceiling"),
    "apscheduler3": Contender("apscheduler3", "bench.adapters.apscheduler3", "apscheduler3"),
    "apscheduler3-defaults": Contender(
        "apscheduler3-defaults",
        "bench.adapters.apscheduler3",
        "apscheduler3",
        (("BENCH_APS_DEFAULTS", "1"),),
    ),
}


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def ensure_venv(name: str) -> Path:
    """The interpreter of ``bench/.venvs/<name>``, created with its packages on first use."""
    venv = VENVS / name
    python = venv / "bin" / "python"
    marker = venv / ".installed"
    if not marker.exists():
        log(f"creating {venv} with {' '.join(PEER_PACKAGES[name])}")
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
        subprocess.run(
            [str(python), "-m", "pip", "install", "-q", *PEER_PACKAGES[name]], check=True
        )
        marker.write_text(" ".join(PEER_PACKAGES[name]) + "\n")
    return python


def _dsn(url: str, database: str | None = None) -> str:
    parsed = make_url(url).set(drivername="postgresql")
    if database is not None:
        parsed = parsed.set(database=database)
    return parsed.render_as_string(hide_password=False)


async def _admin(admin: str, statement: str, *args: Any) -> Any:
    conn = await asyncpg.connect(admin)
    try:
        return await conn.fetchval(statement, *args)
    finally:
        await conn.close()


def _adapter(
    contender: Contender, command: str, dsn: str, count: int, t0: datetime, give_up_after: float
) -> subprocess.Popen[str]:
    env = dict(os.environ, PYTHONPATH=str(ROOT), **dict(contender.env))
    argv = [contender.python(), "-m", contender.module, command, "--dsn", dsn]
    argv += ["--count", str(count), "--at", t0.isoformat(), "--give-up-after", str(give_up_after)]
    return subprocess.Popen(argv, cwd=ROOT, env=env, stdout=subprocess.PIPE, text=True)


async def run_one(
    contender: Contender, admin: str, count: int, give_up_after: float = 600.0
) -> dict[str, Any]:
    """One burst of ``count`` runs for one contender on a fresh scratch database."""
    database = f"agentcron_bench_{uuid.uuid4().hex[:10]}"
    await _admin(admin, f'CREATE DATABASE "{database}"')
    dsn = _dsn(admin, database)
    try:
        # Populating is not timed; T0 leaves it room, plus the contender's start-up.
        t0 = datetime.now(UTC).replace(microsecond=0) + timedelta(seconds=5 + count / 1500)
        populate = _adapter(contender, "populate", dsn, count, t0, give_up_after)
        if await asyncio.to_thread(populate.wait) != 0:
            raise RuntimeError(f"{contender.name} populate failed")
        await _admin(admin, "CHECKPOINT")
        commits = "SELECT xact_commit FROM pg_stat_database WHERE datname = $1"
        before = await _admin(admin, commits, database)
        fire = _adapter(contender, "fire", dsn, count, t0, give_up_after)
        out, _ = await asyncio.to_thread(fire.communicate)
        if fire.returncode != 0:
            raise RuntimeError(f"{contender.name} fire failed ({fire.returncode})")
        await asyncio.sleep(1.0)  # backends report their counters as they exit
        after = await _admin(admin, commits, database)
        figures: dict[str, Any] = json.loads(out.strip().splitlines()[-1])
        figures["contender"] = contender.name
        transactions = after - before - figures["own_transactions"]
        figures["commits_per_fire"] = round(transactions / count, 3)
        return figures
    finally:
        await _admin(admin, f'DROP DATABASE IF EXISTS "{database}" WITH (FORCE)')


def _median_range(values: list[float]) -> dict[str, float]:
    return {
        "median": round(statistics.median(values), 3),
        "min": round(min(values), 3),
        "max": round(max(values), 3),
    }


def summarize(rounds: list[dict[str, dict[str, Any]]]) -> dict[str, Any]:
    """Per-contender medians over rounds, and the medians (min-max) of per-round ratios."""
    names = sorted({name for round_ in rounds for name in round_})
    medians: dict[str, dict[str, Any]] = {}
    for name in names:
        runs = [round_[name] for round_ in rounds if name in round_]
        row: dict[str, Any] = {}
        for key in (
            "all_started_s",
            "all_finished_s",
            "fires_per_s",
            "first_lateness_ms",
            "commits_per_fire",
            "peak_rss_mb",
            "max_loop_lag_ms",
        ):
            values = [run[key] for run in runs if run.get(key) is not None]
            row[key] = round(statistics.median(values), 3) if values else None
        row["lost_max"] = max(run["lost"] for run in runs)
        row["duplicated_max"] = max(run["duplicated"] for run in runs)
        row["rounds"] = len(runs)
        medians[name] = row
    ratios: dict[str, dict[str, float]] = {}
    for label, (num, den) in {
        "apscheduler3 / agentcron (all started)": ("apscheduler3", "agentcron"),
        "agentcron / ceiling (all started)": ("agentcron", "ceiling"),
        "apscheduler3 / ceiling (all started)": ("apscheduler3", "ceiling"),
    }.items():
        values = [
            r[num]["all_started_s"] / r[den]["all_started_s"]
            for r in rounds
            if num in r and den in r and r[num]["all_started_s"] and r[den]["all_started_s"]
        ]
        if values:
            ratios[label] = _median_range(values)
    return {"medians": medians, "ratios": ratios}


def table(summary: dict[str, Any]) -> str:
    """The summary as a Markdown table (medians over rounds) plus the ratios."""
    columns = [
        ("all started s", "all_started_s"),
        ("all finished s", "all_finished_s"),
        ("fires/s", "fires_per_s"),
        ("first lateness ms", "first_lateness_ms"),
        ("lost", "lost_max"),
        ("doubled", "duplicated_max"),
        ("commits/fire", "commits_per_fire"),
        ("peak RSS MB", "peak_rss_mb"),
        ("max loop lag ms", "max_loop_lag_ms"),
    ]
    lines = [
        "| contender | " + " | ".join(title for title, _ in columns) + " |",
        "| --- |" + " ---: |" * len(columns),
    ]
    for name, row in summary["medians"].items():
        cells = ["-" if row[key] is None else f"{row[key]:g}" for _, key in columns]
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    lines.append("")
    for label, value in summary["ratios"].items():
        lines.append(
            f"- {label}: median {value['median']:.2f}x (min {value['min']:.2f}, "
            f"max {value['max']:.2f})"
        )
    return "\n".join(lines)


def machine(admin: str) -> dict[str, Any]:
    """What the figures were measured on."""
    memory_kb = 0
    try:
        with open("/proc/meminfo") as meminfo:
            memory_kb = int(meminfo.readline().split()[1])
    except OSError:
        pass
    version = asyncio.run(_admin(admin, "SHOW server_version"))
    return {
        "cpus": os.cpu_count(),
        "memory_gb": round(memory_kb / 1024 / 1024, 1),
        "postgresql": version,
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


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="python -m bench",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--quick", action="store_true", help="2,000 schedules (default 10,000)")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--count", type=int, help="schedules per burst (overrides --quick)")
    parser.add_argument("--pg", default=DEFAULT_PG, help="admin URL of the PostgreSQL server")
    parser.add_argument(
        "--contenders",
        default="agentcron,ceiling,apscheduler3",
        help=f"comma-separated, of {', '.join(CONTENDERS)}",
    )
    parser.add_argument("--no-chart", action="store_true")
    parser.add_argument("--seed", type=int, help="seed of the per-round contender order")
    args = parser.parse_args(argv)
    count = args.count or (2000 if args.quick else 10000)
    contenders = [CONTENDERS[name] for name in args.contenders.split(",")]
    admin = _dsn(args.pg)
    rng = random.Random(args.seed)
    command = "python -m bench " + " ".join(sys.argv[1:] if argv is None else argv)
    started = time.monotonic()
    rounds: list[dict[str, dict[str, Any]]] = []
    for number in range(1, args.rounds + 1):
        order = rng.sample(contenders, len(contenders))
        this_round: dict[str, dict[str, Any]] = {}
        for contender in order:
            log(f"round {number}/{args.rounds}: {contender.name}, burst of {count}")
            figures = asyncio.run(run_one(contender, admin, count))
            log(f"  {json.dumps(figures)}")
            this_round[contender.name] = figures
        rounds.append(this_round)
    summary = summarize(rounds)
    report = {
        "workload": "burst",
        "database": "postgresql",
        "count": count,
        "rounds": args.rounds,
        "command": command.strip(),
        "machine": machine(admin),
        "finished_at": datetime.now(UTC).isoformat(timespec="seconds"),
        "duration_s": round(time.monotonic() - started, 1),
        "per_round": rounds,
        **summary,
    }
    RESULTS.mkdir(parents=True, exist_ok=True)
    latest = RESULTS / "latest.json"
    latest.write_text(json.dumps(report, indent=2) + "\n")
    print(f"burst of {count} on PostgreSQL, {args.rounds} round(s); medians over rounds\n")
    print(table(summary))
    print(f"\nwritten: {latest.relative_to(ROOT)}")
    if not args.no_chart and chart(latest, RESULTS / "burst.png"):
        print(f"chart: {(RESULTS / 'burst.png').relative_to(ROOT)}")
