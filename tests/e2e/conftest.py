"""A real ``agentcron serve`` process on a free loopback port, and API keys made by the real
``agentcron keys create`` command against its database."""

from __future__ import annotations

import asyncio
import contextlib
import json
import math
import os
import signal
import socket
import subprocess
import sys
import time
import uuid
from collections import Counter, defaultdict
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, BinaryIO, TypeVar

import httpx
import pytest
from sqlalchemy import func, select

from agentcron.core.storage.database import Database
from agentcron.core.storage.models import Run, Schedule
from agentcron.testing.kit import until
from tests.conftest import PG_URL, PgServer, bearer, clone_pg, pg_url_for, run_sql

AGENTCRON = str(Path(sys.executable).with_name("agentcron"))
T = TypeVar("T")


def captured(
    argv: list[str], timeout: float = 60, **options: Any
) -> subprocess.CompletedProcess[str]:
    """``argv`` run to completion, stdout and stderr captured as text (the caller checks the
    status); ``options`` are subprocess.run's (``env``, ``cwd``, ``input``...)."""
    return subprocess.run(argv, capture_output=True, text=True, timeout=timeout, **options)


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
        """SIGTERM, wait up to ``timeout``, then SIGKILL: never leaves the process running.

        Returns the exit status (negative: killed by that signal). The log file is closed.
        """
        try:
            if self.process.poll() is None:
                self.process.send_signal(signal.SIGTERM)
            try:
                return self.process.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=10)
                raise AssertionError(
                    f"server did not stop within {timeout} s of SIGTERM:\n{self.log()[-4000:]}"
                ) from None
        finally:
            self.log_file.close()

    def kill(self) -> int:
        """SIGKILL (a crash): no shutdown code runs. Returns the exit status."""
        try:
            if self.process.poll() is None:
                self.process.kill()
            return self.process.wait(timeout=10)
        finally:
            self.log_file.close()


# How long a server may take to answer /healthz: its imports alone are seconds of CPU, and on
# a loaded machine (five test workers on two cores, each starting servers) they took 30 s. The
# wait ends at the first answer, so a healthy server costs no more for the bound.
HEALTHY_WITHIN = 120.0


def start_server(
    env: dict[str, str],
    log_path: Path,
    timeout: float = HEALTHY_WITHIN,
    *,
    argv: tuple[str, ...] = (AGENTCRON, "serve"),
    cwd: Path | None = None,
) -> Server:
    """Start ``agentcron serve`` (or ``argv``: a server taking ``--port``) and wait until
    /healthz answers."""
    port = free_port()
    log = log_path.open("ab")
    command = [*argv, "--port", str(port)]
    process = subprocess.Popen(command, env=env, cwd=cwd, stdout=log, stderr=subprocess.STDOUT)
    server = Server(f"http://127.0.0.1:{port}", process, log_path, log)
    if wait_healthy(server.url, process, timeout):
        return server
    if process.poll() is not None:
        raise AssertionError(f"server exited with {process.returncode}:\n{server.log()}")
    server.stop()
    raise AssertionError(f"server did not become healthy:\n{server.log()}")


def wait_healthy(
    url: str, process: subprocess.Popen[bytes], timeout: float = HEALTHY_WITHIN
) -> bool:
    """Wait until ``url``/healthz answers 200: True; False after ``timeout`` or as soon as
    ``process`` has exited (the caller says why, with its log)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and process.poll() is None:
        try:
            if httpx.get(f"{url}/healthz", timeout=1).status_code == 200:
                return True
        except httpx.TransportError:
            pass
        time.sleep(0.1)
    return False


def sqlite_env(root: Path, instance_id: str = "e2e", **extra: str) -> dict[str, str]:
    """``engine_env`` of the SQLite file ``agentcron.db`` in ``root``."""
    url = f"sqlite+aiosqlite:///{root / 'agentcron.db'}"
    return engine_env(url, root / "data", instance_id, **extra)


def migrate(env: dict[str, str]) -> None:
    """``agentcron migrate`` (a real process) on the database of ``env``."""
    subprocess.run([AGENTCRON, "migrate"], env=env, check=True, capture_output=True)


@pytest.fixture
def server_env(tmp_path: Path) -> dict[str, str]:
    return sqlite_env(tmp_path)


def make_key(env: dict[str, str], owner: str = "local", *, admin: bool = False) -> str:
    """A new API key in the database of ``env``, made by ``agentcron keys create`` (a real
    process, as a user would), which prints the key alone on its last line."""
    argv = [AGENTCRON, "keys", "create", "--owner", owner, *(["--admin"] if admin else [])]
    done = captured(argv, env=env)
    assert done.returncode == 0, done.stderr
    key = done.stdout.strip().splitlines()[-1]
    assert key.startswith("ac_"), done.stdout
    return key


def keyed_server(env: dict[str, str], log_path: Path) -> Server:
    """``agentcron migrate``, ``make_key`` and ``start_server`` on the database of ``env``:
    ``key`` is an API key of owner "local"."""
    migrate(env)
    key = make_key(env)
    running = start_server(env, log_path)
    running.key = key
    return running


@pytest.fixture
def server(server_env: dict[str, str], tmp_path: Path) -> Iterator[Server]:
    """A served, migrated SQLite database; ``server.key`` is an API key of owner "local"."""
    running = keyed_server(server_env, tmp_path / "server.log")
    yield running
    running.stop()


# -- several real processes on one database (replicas, crash, drain, restart) -------------------


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
            server.kill()


@pytest.fixture
def fleet(tmp_path: Path) -> Iterator[Fleet]:
    """Starts servers for this test and kills any survivor at teardown, even on failure."""
    servers = Fleet(tmp_path)
    try:
        yield servers
    finally:
        servers.close()


@pytest.fixture
async def pg_url(pg_server: PgServer | None) -> AsyncIterator[str]:
    """A freshly migrated PostgreSQL database for this test (skip, or fail under
    AGENTCRON_REQUIRE_PG=1, when PostgreSQL is unreachable: as the ``db_url`` fixture does)."""
    url = await clone_pg(pg_server)
    yield url
    assert pg_server is not None
    await pg_server.give_back(url)


@contextlib.asynccontextmanager
async def scratch_pg_database(
    prefix: str, workdir: Path, *, keep: bool = False
) -> AsyncIterator[str]:
    """A new database on ``AGENTCRON_TEST_PG_URL``'s server, migrated by ``agentcron migrate``,
    for the scripts run outside pytest (the soak, reproductions); dropped at the end unless
    ``keep``. Yields its URL."""
    name = f"{prefix}_{uuid.uuid4().hex[:10]}"
    await run_sql(PG_URL, f'CREATE DATABASE "{name}"')
    database_url = pg_url_for(name)
    try:
        env = engine_env(database_url, workdir / "data", f"{prefix}-migrate")
        await asyncio.to_thread(migrate, env)
        yield database_url
    finally:
        if not keep:
            await run_sql(PG_URL, f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


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

    async def statuses(self, due_from: datetime, due_to: datetime) -> Counter[str]:
        """How many scheduled runs due in [due_from, due_to] are in each status: one small
        aggregate, for polling a table of many thousand runs without loading them."""
        query = (
            select(Run.status, func.count())
            .where(Run.trigger == "schedule", Run.due_at.between(due_from, due_to))
            .group_by(Run.status)
        )
        async with self.db.session(write=False) as session:
            rows = (await session.execute(query)).all()
        return Counter({str(status): int(count) for status, count in rows})

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
    """Poll ``check`` until it returns a truthy value (returned); fail after ``within`` s
    (the library's test kit's ``until``)."""
    value: T = await until(check, what, within, step=interval)
    return value


def wait_until(check: Callable[[], T], what: str, within: float = 30, interval: float = 0.3) -> T:
    """``wait_for`` for a test without an event loop: poll ``check`` until it returns a truthy
    value (returned); fail after ``within`` s."""
    deadline = time.monotonic() + within
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"gave up after {within:g} s waiting for {what}; last: {value!r}")
        time.sleep(interval)


def log_lines(path: Path) -> list[tuple[str, ...]]:
    """The words of each line an agent appended to ``path`` (none before it made the file)."""
    return [tuple(line.split()) for line in path.read_text().splitlines()] if path.exists() else []


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


TRUE = {"type": "command", "argv": ["true"]}  # an agent that does nothing and succeeds


def schedule_body(
    name: str, trigger: dict[str, Any], runner: dict[str, Any] = TRUE, **fields: Any
) -> dict[str, Any]:
    """A schedule's API body, prompt "p" unless ``fields`` (which add to it, or win) say."""
    return {"name": name, "prompt": "p", "trigger": trigger, "runner": runner} | fields


def one_shot(runner: dict[str, Any], delay: float = 4, **fields: Any) -> dict[str, Any]:
    """A schedule body with one due time, ``delay`` seconds from now (so one run): ahead of
    the request's arrival on a loaded machine, or it is refused as past."""
    at = datetime.now(UTC) + timedelta(seconds=delay)
    return schedule_body("one-shot", {"at": iso(at)}, runner, prompt="work") | fields


async def create_schedule(server: Server, key: str, body: dict[str, Any]) -> dict[str, Any]:
    """POST ``body`` to ``server`` as the owner of ``key``; the created schedule."""
    async with httpx.AsyncClient(timeout=30, headers=bearer(key)) as http:
        response = await http.post(f"{server.url}/api/v1/schedules", json=body)
    assert response.status_code == 201, response.text
    created: dict[str, Any] = response.json()
    return created


async def finished(probe: RunProbe, run_id: uuid.UUID) -> Run | None:
    """The run once it has ended (neither pending nor running), else None."""
    run = await probe.run(run_id)
    return run if run.status not in ("pending", "running") else None


def grid(start: datetime, every: timedelta, low: datetime, high: datetime) -> list[datetime]:
    """The due times ``start + k * every`` (any integer k) within [low, high]."""
    k = math.ceil((low - start) / every)
    times = []
    while (due := start + k * every) <= high:
        times.append(due)
        k += 1
    return times


# -- agents that log when they start and when they end -----------------------------------------

# $1: the log; $2: how many seconds the agent works. "$0" is free for a marker. Each line is one
# O_APPEND write (one ``echo``), so the lines of many agents writing at once never interleave;
# `date +%s%N` is the wall clock in nanoseconds, comparable across the replicas of one host.
TIMED_AGENT = """
echo "START $AGENTCRON_RUN_ID $AGENTCRON_ATTEMPT $AGENTCRON_INSTANCE_ID $(date +%s%N)" >> "$1"
sleep "$2"
echo "END $AGENTCRON_RUN_ID $AGENTCRON_ATTEMPT $AGENTCRON_INSTANCE_ID $(date +%s%N)" >> "$1"
"""


def timed_agent(log: Path, seconds: float, marker: str = "agent") -> dict[str, Any]:
    """A ``command`` runner spec whose agent works ``seconds`` and logs START and END lines
    ("<START|END> <run id> <attempt> <instance id> <epoch ns>") to ``log``."""
    return command_runner(TIMED_AGENT, marker, str(log), f"{seconds:g}")


@dataclass
class Execution:
    """One execution of an agent, as the agent itself logged it."""

    run_id: str
    attempt: int
    instance: str
    started_ns: int
    last_ns: int  # its last line: when it was last known alive
    ended_ns: int | None = None  # None: it never logged its END (stopped, killed, or still going)

    def overlaps(self, other: Execution) -> bool:
        # An execution without an END may still be going: it overlaps whatever came after it.
        never = float("inf")
        mine = self.ended_ns if self.ended_ns is not None else never
        theirs = other.ended_ns if other.ended_ns is not None else never
        return self.started_ns < theirs and other.started_ns < mine


def read_executions(log: Path) -> list[Execution]:
    """The executions logged in ``log`` by agents writing "<START|BEAT|END> <run id> <attempt>
    <instance id> <epoch ns>" lines (``TIMED_AGENT``), in the order they started. A BEAT or an
    END belongs to the latest START of the same run, attempt and instance."""
    if not log.exists():
        return []
    executions: list[Execution] = []
    latest: dict[tuple[str, int, str], Execution] = {}
    for line in log.read_text().splitlines():
        phase, run_id, attempt_text, instance, ns_text = line.split()
        key, ns = (run_id, int(attempt_text), instance), int(ns_text)
        if phase == "START":
            latest[key] = Execution(run_id, int(attempt_text), instance, ns, ns)
            executions.append(latest[key])
            continue
        latest[key].last_ns = ns
        if phase == "END":
            latest[key].ended_ns = ns
    return sorted(executions, key=lambda execution: execution.started_ns)


def doubled(items: Iterable[Any]) -> list[Any]:
    """What occurs more than once in ``items``."""
    return [item for item, count in Counter(items).items() if count > 1]


def overlapping(executions: Iterable[Execution]) -> list[tuple[Execution, Execution]]:
    """Pairs (earlier, later) of executions of one run whose times intersect."""
    by_run: dict[str, list[Execution]] = defaultdict(list)
    for execution in executions:
        by_run[execution.run_id].append(execution)
    pairs: list[tuple[Execution, Execution]] = []
    for runs in by_run.values():
        runs.sort(key=lambda execution: execution.started_ns)
        for index, earlier in enumerate(runs):
            pairs.extend((earlier, later) for later in runs[index + 1 :] if earlier.overlaps(later))
    return pairs
