"""A real ``agentcron serve`` process on a free loopback port, and API keys made by the real
``agentcron keys create`` command against its database."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, BinaryIO, TypeVar

import httpx
import pytest
from sqlalchemy import select

from core.storage import Database, Run, Schedule
from tests.conftest import PgServer, bearer, clone_pg

AGENTCRON = str(Path(sys.executable).with_name("agentcron"))
T = TypeVar("T")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@dataclass
class Server:
    url: str
    process: subprocess.Popen[bytes]
    log_path: Path
    log_file: BinaryIO
    key: str | None = None  # an API key of owner "local" in its database, when one was made

    @property
    def headers(self) -> dict[str, str]:
        """The Authorization header of ``key`` (set by the ``server`` fixture)."""
        assert self.key is not None, "no API key was made for this server's database"
        return bearer(self.key)

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def stop(self, timeout: float = 30) -> int:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
        try:
            return self.process.wait(timeout=timeout)
        finally:
            self.log_file.close()


def start_server(env: dict[str, str], log_path: Path, timeout: float = 30) -> Server:
    """Start ``agentcron serve`` and wait until /healthz answers."""
    port = free_port()
    log = log_path.open("ab")
    process = subprocess.Popen(
        [AGENTCRON, "serve", "--port", str(port)],
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    server = Server(f"http://127.0.0.1:{port}", process, log_path, log)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise AssertionError(f"server exited with {process.returncode}:\n{server.log()}")
        try:
            if httpx.get(f"{server.url}/healthz", timeout=1).status_code == 200:
                return server
        except httpx.TransportError:
            pass
        time.sleep(0.1)
    server.stop()
    raise AssertionError(f"server did not become healthy:\n{server.log()}")


@pytest.fixture
def server_env(tmp_path: Path) -> dict[str, str]:
    env = dict(os.environ)
    env.update(
        AGENTCRON_DATABASE_URL=f"sqlite+aiosqlite:///{tmp_path / 'agentcron.db'}",
        AGENTCRON_DATA_DIR=str(tmp_path / "data"),
        AGENTCRON_LOG_FORMAT="json",
    )
    return env


def make_key(env: dict[str, str], owner: str = "local", *, admin: bool = False) -> str:
    """A new API key in the database of ``env``, made by ``agentcron keys create`` (a real
    process, as a user would), which prints the key alone on its last line."""
    argv = [AGENTCRON, "keys", "create", "--owner", owner, *(["--admin"] if admin else [])]
    done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    key = done.stdout.strip().splitlines()[-1]
    assert key.startswith("ac_"), done.stdout
    return key


@pytest.fixture
def server(server_env: dict[str, str], tmp_path: Path) -> Iterator[Server]:
    """A served, migrated SQLite database; ``server.key`` is an API key of owner "local"."""
    subprocess.run([AGENTCRON, "migrate"], env=server_env, check=True, capture_output=True)
    key = make_key(server_env)
    running = start_server(server_env, tmp_path / "server.log")
    running.key = key
    yield running
    running.stop()


# -- several real processes on one database (replicas, crash, drain, restart) -------------------


def stop_server(server: Server, timeout: float = 30) -> int:
    """SIGTERM, wait up to ``timeout``, then SIGKILL: never leaves the process running.

    Returns the exit status (negative: killed by that signal). The log file is closed.
    """
    try:
        if server.process.poll() is None:
            server.process.send_signal(signal.SIGTERM)
        try:
            return server.process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            server.process.kill()
            server.process.wait(timeout=10)
            raise AssertionError(
                f"server did not stop within {timeout} s of SIGTERM:\n{server.log()[-4000:]}"
            ) from None
    finally:
        server.log_file.close()


def kill_server(server: Server) -> int:
    """SIGKILL (a crash): no shutdown code runs. Returns the exit status."""
    try:
        if server.process.poll() is None:
            server.process.kill()
        return server.process.wait(timeout=10)
    finally:
        server.log_file.close()


class Fleet:
    """The servers one test starts; whatever still runs at teardown is killed."""

    def __init__(self, log_dir: Path) -> None:
        self.log_dir = log_dir
        self.servers: list[Server] = []

    def start(self, env: dict[str, str], name: str) -> Server:
        """Start ``agentcron serve`` (blocking until /healthz answers); log in ``<name>.log``."""
        server = start_server(env, self.log_dir / f"{name}.log")
        self.servers.append(server)
        return server

    def close(self) -> None:
        for server in self.servers:
            if server.process.poll() is None:
                server.process.kill()
                server.process.wait(timeout=10)
            server.log_file.close()


@pytest.fixture
def fleet(tmp_path: Path) -> Iterator[Fleet]:
    """Starts servers for this test and kills any survivor at teardown, even on failure."""
    servers = Fleet(tmp_path)
    try:
        yield servers
    finally:
        servers.close()


@pytest.fixture
async def pg_url(pg_server: PgServer | None) -> str:
    """A freshly migrated PostgreSQL database for this test (skip, or fail under
    AGENTCRON_REQUIRE_PG=1, when PostgreSQL is unreachable: as the ``db_url`` fixture does)."""
    return await clone_pg(pg_server)


def engine_env(database_url: str, data_dir: Path, instance_id: str, **extra: str) -> dict[str, str]:
    """The environment of one engine process: JSON logs, its own instance id and data dir.

    ``extra`` keys are AGENTCRON_* names without the prefix (``LEASE_SECONDS="3"``).
    """
    env = dict(os.environ)
    env.update(
        AGENTCRON_DATABASE_URL=database_url,
        AGENTCRON_DATA_DIR=str(data_dir),
        AGENTCRON_LOG_FORMAT="json",
        AGENTCRON_INSTANCE_ID=instance_id,
    )
    env.update({f"AGENTCRON_{key}": value for key, value in extra.items()})
    return env


def processes_with(marker: str) -> list[int]:
    """Pids of live processes whose command line contains ``marker`` (read from /proc)."""
    pids = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes()
            state = (entry / "stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if marker.encode() in cmdline and state != "Z":
            pids.append(int(entry.name))
    return pids


def kill_processes_with(marker: str) -> list[int]:
    """SIGKILL the process groups of every process carrying ``marker``; returns their pids."""
    pids = processes_with(marker)
    for pid in pids:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pid, signal.SIGKILL)
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    return pids


class RunProbe:
    """Reads runs and schedules straight from the database (not through the API)."""

    def __init__(self, database_url: str) -> None:
        self.db = Database(database_url, pool_size=2)

    async def runs(self, schedule_id: str | uuid.UUID | None = None) -> list[Run]:
        query = select(Run).order_by(Run.schedule_id, Run.due_at, Run.created_at)
        if schedule_id is not None:
            query = query.where(Run.schedule_id == uuid.UUID(str(schedule_id)))
        async with self.db.session(write=False) as session:
            return list((await session.execute(query)).scalars())

    async def run(self, run_id: uuid.UUID) -> Run:
        async with self.db.session(write=False) as session:
            run = await session.get(Run, run_id)
        assert run is not None, f"run {run_id} vanished"
        return run

    async def schedule(self, schedule_id: str | uuid.UUID) -> Schedule:
        async with self.db.session(write=False) as session:
            schedule = await session.get(Schedule, uuid.UUID(str(schedule_id)))
        assert schedule is not None, f"schedule {schedule_id} vanished"
        return schedule

    async def close(self) -> None:
        await self.db.dispose()


@pytest.fixture
async def probe_factory() -> AsyncIterator[Callable[[str], RunProbe]]:
    """``probe_factory(url)`` opens a ``RunProbe``; every probe is closed at teardown."""
    probes: list[RunProbe] = []

    def open_probe(database_url: str) -> RunProbe:
        probes.append(RunProbe(database_url))
        return probes[-1]

    yield open_probe
    for probe in probes:
        await probe.close()


async def wait_for(
    check: Callable[[], Awaitable[T]],
    what: str,
    within: float = 30,
    interval: float = 0.15,
) -> T:
    """Poll ``check`` until it returns a truthy value (returned); fail after ``within`` s."""
    deadline = time.monotonic() + within
    while True:
        value = await check()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"gave up after {within:g} s waiting for {what}; last: {value!r}")
        await asyncio.sleep(interval)


def json_events(log_text: str, event: str) -> list[dict[str, Any]]:
    """The JSON log lines of one ``event`` (non-JSON lines are ignored)."""
    found = []
    for line in log_text.splitlines():
        if f'"{event}"' not in line:
            continue
        with contextlib.suppress(ValueError):
            record = json.loads(line)
            if isinstance(record, dict) and record.get("event") == event:
                found.append(record)
    return found


def command_runner(script: str, *args: str) -> dict[str, Any]:
    """A ``command`` runner spec running ``sh -c script`` with ``$0``, ``$1``... = ``args``."""
    return {"type": "command", "argv": ["sh", "-c", script, *args]}


def iso(moment: datetime) -> str:
    return moment.astimezone(UTC).isoformat()
