"""What every workload needs: contenders and their virtualenvs, scratch databases, adapter
processes, and PostgreSQL's own counters.

A scratch database is a fresh PostgreSQL database (created from the admin URL, dropped with
``WITH (FORCE)`` afterwards, optionally cloned from a template) or a SQLite file in a fresh
temporary directory. Adapters get it as a plain ``postgresql://`` or ``sqlite:///`` URL.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import tempfile
import uuid
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

import asyncpg
from sqlalchemy.engine import make_url

ROOT = Path(__file__).resolve().parent.parent
VENVS = ROOT / "bench" / ".venvs"
PEER_PACKAGES = {
    "apscheduler3": ["apscheduler>=3.11,<4", "sqlalchemy>=2", "psycopg2-binary"],
    # sqlalchemy[asyncio]: SQLAlchemy 2.1 no longer pulls in greenlet by itself.
    "apscheduler4": [
        "apscheduler==4.0.0a6",
        "sniffio",
        "sqlalchemy[asyncio]",
        "asyncpg",
        "aiosqlite",
    ],
    "plot": ["matplotlib"],
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


def venv_ready(name: str) -> bool:
    """Whether ``bench/.venvs/<name>`` has been created completely (tests never create it)."""
    return (VENVS / name / ".installed").exists()


@dataclass(frozen=True)
class Contender:
    """One adapter: which interpreter runs which module, with which extra environment, on
    which databases."""

    name: str
    module: str
    venv: str | None = None  # None: the project's interpreter
    env: tuple[tuple[str, str], ...] = ()
    databases: tuple[str, ...] = ("postgresql", "sqlite")
    # Seconds of lead before T0 on top of the workload's: for an adapter that starts more
    # than itself before T0 (a whole service process), so it is ready in time.
    lead_s: float = 0.0

    def python(self) -> str:
        return sys.executable if self.venv is None else str(ensure_venv(self.venv))


# Before T0 a served contender runs ``agentcron migrate``, populates, starts its adapter and
# then the service (four interpreters importing the app): up to 45 s on a loaded two-core
# machine. It must be ready before T0, or the burst measures its start-up.
SERVE_LEAD_SECONDS = 40.0
AGENTCRON = "agentcron"
CONTENDERS = {
    AGENTCRON: Contender(AGENTCRON, "bench.adapters.agentcron"),
    # Not a default: how far the engine goes when more runs may execute at once. With the
    # default concurrency 4, every start waits for one admission statement shared by at most
    # four runs, which bounds a no-op burst far below what the claim path could feed.
    "agentcron-c64": Contender(
        "agentcron-c64",
        "bench.adapters.agentcron",
        env=(("AGENTCRON_SCHEDULER_CONCURRENCY", "64"),),
    ),
    # Not a default either: with 256 slots a claim of 500 feeds every slot at once, so what
    # remains is the engine's own work between runs (the slot gap), not a cap on runs at once.
    "agentcron-c256": Contender(
        "agentcron-c256",
        "bench.adapters.agentcron",
        env=(("AGENTCRON_SCHEDULER_CONCURRENCY", "256"),),
    ),
    # agentcron-c256 with a sync no-op (``bench.noop:run``), which the python runner calls in a
    # worker thread: what that thread's round trip adds to every run.
    "agentcron-c256-thread": Contender(
        "agentcron-c256-thread",
        "bench.adapters.agentcron",
        env=(
            ("AGENTCRON_SCHEDULER_CONCURRENCY", "256"),
            ("BENCH_NOOP_TARGET", "bench.noop:run"),
        ),
    ),
    # The engine of agentcron-c256 over a run store that costs nothing (no database): what
    # the engine's own work per run costs, the floor under every agentcron contender.
    "agentcron-floor": Contender(
        "agentcron-floor",
        "bench.adapters.floor",
        env=(("AGENTCRON_SCHEDULER_CONCURRENCY", "256"),),
        databases=("postgresql",),
    ),
    # The service as deployed: `agentcron serve` (HTTP, info logging, the engine in its
    # lifespan) at the default concurrency, with an API client reading while the burst runs.
    "agentcron-serve": Contender(
        "agentcron-serve", "bench.adapters.serve", lead_s=SERVE_LEAD_SECONDS
    ),
    # What users run (issue 33): the service with a sync target, a plain module function
    # (``bench.noop:run``) that the python runner calls in a worker thread, at the default
    # concurrency and at 256; and the async no-op at 256.
    "agentcron-serve-sync": Contender(
        "agentcron-serve-sync",
        "bench.adapters.serve",
        env=(("BENCH_NOOP_TARGET", "bench.noop:run"),),
        lead_s=SERVE_LEAD_SECONDS,
    ),
    "agentcron-serve-sync-c256": Contender(
        "agentcron-serve-sync-c256",
        "bench.adapters.serve",
        env=(
            ("AGENTCRON_SCHEDULER_CONCURRENCY", "256"),
            ("BENCH_NOOP_TARGET", "bench.noop:run"),
        ),
        lead_s=SERVE_LEAD_SECONDS,
    ),
    "agentcron-serve-c256": Contender(
        "agentcron-serve-c256",
        "bench.adapters.serve",
        env=(("AGENTCRON_SCHEDULER_CONCURRENCY", "256"),),
        lead_s=SERVE_LEAD_SECONDS,
    ),
    "ceiling": Contender("ceiling", "bench.ceiling", databases=("postgresql",)),
    "apscheduler3": Contender("apscheduler3", "bench.adapters.apscheduler3", "apscheduler3"),
    "apscheduler3-defaults": Contender(
        "apscheduler3-defaults",
        "bench.adapters.apscheduler3",
        "apscheduler3",
        (("BENCH_APS_DEFAULTS", "1"),),
    ),
    # APScheduler 3.11 as its users run a sync job: ``BackgroundScheduler`` with its default
    # executor (a pool of 10 threads), the same job store, a sync no-op (``bench.noop``).
    "apscheduler3-background": Contender(
        "apscheduler3-background",
        "bench.adapters.apscheduler3",
        "apscheduler3",
        (("BENCH_APS_BACKGROUND", "1"),),
    ),
    "apscheduler4": Contender("apscheduler4", "bench.adapters.apscheduler4", "apscheduler4"),
}


def admin_dsn(url: str, database: str | None = None) -> str:
    """A plain ``postgresql://`` URL (asyncpg's form) of ``url``, optionally another database."""
    parsed = make_url(url).set(drivername="postgresql")
    if database is not None:
        parsed = parsed.set(database=database)
    return parsed.render_as_string(hide_password=False)


async def sql(dsn: str, statement: str, *args: Any) -> Any:
    """One statement on a connection of its own; its first value."""
    conn = await asyncpg.connect(dsn)
    try:
        return await conn.fetchval(statement, *args)
    finally:
        await conn.close()


@asynccontextmanager
async def scratch(admin: str, database: str, template: str | None = None) -> AsyncIterator[str]:
    """A fresh database of kind ``database`` (``postgresql`` or ``sqlite``) for one run."""
    if database == "sqlite":
        with tempfile.TemporaryDirectory(prefix="agentcron-bench-") as tmp:
            yield f"sqlite:///{tmp}/bench.db"
        return
    name = f"agentcron_bench_{uuid.uuid4().hex[:10]}"
    clone = f' TEMPLATE "{template}"' if template else ""
    await sql(admin, f'CREATE DATABASE "{name}"{clone}')
    try:
        yield admin_dsn(admin, name)
    finally:
        await sql(admin, f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def database_name(dsn: str) -> str:
    return str(make_url(dsn).database)


async def commits(admin: str, dsn: str) -> int:
    """``pg_stat_database.xact_commit`` of the scratch database (read from the admin one, so
    reading it is not a transaction of the scratch database)."""
    statement = "SELECT xact_commit FROM pg_stat_database WHERE datname = $1"
    return int(await sql(admin, statement, database_name(dsn)))


async def spawn(
    contender: Contender, command: str, dsn: str, stderr: int | None = None, **options: Any
) -> Any:
    """Start ``python -m <adapter> <command> --dsn URL --<option> value ...``; stdout piped."""
    argv = [contender.python(), "-m", contender.module, command, "--dsn", dsn]
    for key, value in options.items():
        if value is not None:
            text = value.isoformat() if isinstance(value, datetime) else str(value)
            argv += [f"--{key.replace('_', '-')}", text]
    env = dict(
        os.environ, PYTHONPATH=str(ROOT), BENCH_CONTENDER=contender.name, **dict(contender.env)
    )
    return await asyncio.create_subprocess_exec(
        *argv, cwd=ROOT, env=env, stdout=asyncio.subprocess.PIPE, stderr=stderr, limit=1 << 20
    )


async def read_json(process: Any, event: str | None = None) -> dict[str, Any]:
    """The next JSON line of an adapter's stdout (the next ``{"event": event}`` line if
    given); the process failing or ending first is an error."""
    while True:
        line = await process.stdout.readline()
        if not line:
            code = await process.wait()
            raise RuntimeError(f"adapter ended (exit {code}) before {event or 'its result'}")
        text = line.decode().strip()
        if text.startswith("{"):
            figures: dict[str, Any] = json.loads(text)
            if event is None or figures.get("event") == event:
                return figures


class AdapterFailed(RuntimeError):
    """An adapter command exited non-zero; the message ends with its last line of stderr."""


async def run(
    contender: Contender,
    command: str,
    dsn: str,
    on_event: Callable[[str], None] | None = None,
    **options: Any,
) -> dict[str, Any]:
    """Run an adapter command to its end; its last JSON line (``{}`` if it printed none).
    ``on_event`` is called with the name of every ``{"event": ...}`` line as it is printed.
    Its stderr is passed on once it ended."""
    process = await spawn(contender, command, dsn, stderr=asyncio.subprocess.PIPE, **options)
    errors_read = asyncio.ensure_future(process.stderr.read())
    lines: list[str] = []
    async for raw in process.stdout:
        text = raw.decode().strip()
        if text.startswith("{"):
            lines.append(text)
            if on_event is not None and '"event"' in text:
                event = json.loads(text).get("event")
                if event:
                    on_event(event)
    await process.wait()
    errors = (await errors_read).decode(errors="replace").strip()
    if errors:
        print(errors, file=sys.stderr, flush=True)
    if process.returncode != 0:
        last = errors.splitlines()[-1] if errors else "no output"
        raise AdapterFailed(
            f"{contender.name} {command} failed (exit {process.returncode}): {last}"
        )
    figures: dict[str, Any] = json.loads(lines[-1]) if lines else {}
    return figures
