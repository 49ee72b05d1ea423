"""Start delay: how long after its due time a scheduled run starts, on a real server.

Starts `agentcron serve` on a fresh database (SQLite by default, or --pg URL of a server where
a scratch database may be created), creates N interval schedules with phases spread evenly
over the interval (a steady, idle-machine load), lets them fire for a while, and reports
percentiles of (started_at - due_at) read from the run ledger.

    .venv/bin/python bench/start_delay.py                      # SQLite
    .venv/bin/python bench/start_delay.py --pg postgresql+asyncpg://postgres@127.0.0.1/test
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import socket
import statistics
import sys
import tempfile
import time
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path

import asyncpg
import httpx
from sqlalchemy import select
from sqlalchemy.engine import make_url

from agentcron.core.keys import create_key
from agentcron.core.storage.database import Database
from agentcron.core.storage.migrate import upgrade
from agentcron.core.storage.models import Run

AGENTCRON = str(Path(sys.executable).with_name("agentcron"))


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


async def scratch_pg(url: str) -> tuple[str, str]:
    name = f"agentcron_bench_{uuid.uuid4().hex[:8]}"
    admin = make_url(url).set(drivername="postgresql").render_as_string(hide_password=False)
    conn = await asyncpg.connect(admin)
    try:
        await conn.execute(f'CREATE DATABASE "{name}"')
    finally:
        await conn.close()
    return make_url(url).set(database=name).render_as_string(hide_password=False), admin


async def drop_pg(admin: str, url: str) -> None:
    conn = await asyncpg.connect(admin)
    try:
        await conn.execute(f'DROP DATABASE IF EXISTS "{make_url(url).database}" WITH (FORCE)')
    finally:
        await conn.close()


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    index = min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))
    return ordered[index]


async def measure(
    url: str, schedules: int, every: int, seconds: float, workdir: Path
) -> list[float]:
    await asyncio.to_thread(upgrade, url)
    keys_db = Database(url)
    try:
        key, _record = await create_key(keys_db, "bench")  # every /api/v1 call needs a key
    finally:
        await keys_db.dispose()
    port = free_port()
    env = dict(os.environ)
    env.update(
        AGENTCRON_DATABASE_URL=url,
        AGENTCRON_DATA_DIR=str(workdir / "data"),
        AGENTCRON_LOG_LEVEL="WARNING",
        AGENTCRON_LOG_FORMAT="json",
    )
    log = (workdir / "server.log").open("wb")
    server = await asyncio.create_subprocess_exec(
        AGENTCRON, "serve", "--port", str(port), env=env, stdout=log, stderr=log
    )
    base = f"http://127.0.0.1:{port}"
    try:
        headers = {"Authorization": f"Bearer {key}"}
        async with httpx.AsyncClient(base_url=base, timeout=10, headers=headers) as http:
            for _ in range(100):
                try:
                    if (await http.get("/healthz")).status_code == 200:
                        break
                except httpx.TransportError:
                    await asyncio.sleep(0.1)
            start = datetime.now(UTC).replace(microsecond=0) + timedelta(seconds=2)
            for i in range(schedules):
                phase = timedelta(seconds=every * i / schedules)
                response = await http.post(
                    "/api/v1/schedules",
                    json={
                        "name": f"delay-{i}",
                        "prompt": "x",
                        "trigger": {
                            "every_seconds": every,
                            "start_at": (start + phase).isoformat(),
                        },
                        "runner": {"type": "command", "argv": ["true"]},
                    },
                )
                response.raise_for_status()
            window_start = datetime.now(UTC)
            await asyncio.sleep(seconds)
            window_end = datetime.now(UTC)
    finally:
        server.send_signal(signal.SIGTERM)
        await asyncio.wait_for(server.wait(), 60)
        log.close()

    db = Database(url)
    try:
        async with db.session(write=False) as session:
            rows = await session.execute(
                select(Run.due_at, Run.started_at).where(
                    Run.trigger == "schedule",
                    Run.due_at >= window_start,
                    Run.due_at <= window_end - timedelta(seconds=1),
                )
            )
            pairs = rows.all()
    finally:
        await db.dispose()
    return [
        (started - due).total_seconds() * 1000
        for due, started in pairs
        if started is not None and due is not None
    ]


async def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--pg", help="PostgreSQL URL of a server where a scratch database may be created"
    )
    parser.add_argument("--schedules", type=int, default=100)
    parser.add_argument("--every", type=int, default=5, help="interval of each schedule, seconds")
    parser.add_argument("--seconds", type=float, default=20.0, help="how long to let them fire")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        workdir = Path(tmp)
        admin = None
        if args.pg:
            url, admin = await scratch_pg(args.pg)
        else:
            url = f"sqlite+aiosqlite:///{workdir / 'bench.db'}"
        try:
            started = time.monotonic()
            delays = await measure(url, args.schedules, args.every, args.seconds, workdir)
        finally:
            if admin:
                await drop_pg(admin, url)
    backend = "postgresql" if args.pg else "sqlite"
    print(
        f"backend={backend} schedules={args.schedules} every={args.every}s runs={len(delays)} "
        f"({time.monotonic() - started:.0f} s)"
    )
    if delays:
        print(
            f"start delay ms: p50={statistics.median(delays):.1f} "
            f"p90={percentile(delays, 0.9):.1f} p99={percentile(delays, 0.99):.1f} "
            f"max={max(delays):.1f} min={min(delays):.1f}"
        )


if __name__ == "__main__":
    asyncio.run(main())
