"""Owner isolation where runs execute, through the real app and engine on both databases.

Owners' keys create ``command`` schedules through the API; the app's own engine (scheduler on)
runs them as real processes. The service's environment holds secret-looking variables
(monkeypatched) that no agent may see. With ``AGENTCRON_SANDBOX=bwrap`` a probe agent reports,
as JSON on stdout, what it could reach: another owner's task file, the SQLite file, the
service's ``/proc/<pid>/environ``, PostgreSQL's sockets and TCP port, paths outside its
directory.
"""

from __future__ import annotations

import json
import os
import shutil
import uuid
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi import FastAPI
from sqlalchemy import update
from structlog.testing import capture_logs

from agentcron.core.config import Settings
from agentcron.core.storage.database import Database
from agentcron.core.storage.models import Task
from agentcron.core.workdirs import TaskDirectories, adopt_legacy_directory
from tests.integration.delivery_kit import created, owner, schedule_body, serving
from tests.integration.engine_kit import API, run_to_end
from tests.sandbox import HOST_PYTHON

INSTANCE = "containment-replica"
SERVICE_SECRETS = {
    # Names the service really reads, with values that must never reach an agent.
    "AGENTCRON_DATABASE_URL": "postgresql+asyncpg://agentcron:hunter2-db@db.internal/prod",
    "OPENAI_API_KEY": "sk-test-0123456789abcdef0123456789abcdef",
    "AGENTCRON_TEST_SERVICE_ONLY": "service-only-value",
}
DOCUMENTED = {"PATH", "HOME", "LANG", "TMPDIR"} | {
    f"AGENTCRON_{name}"
    for name in ("RUN_ID", "SCHEDULE_ID", "TASK_ID", "ATTEMPT", "TRIGGER", "DUE_AT", "INSTANCE_ID")
}
SHELL_OWN = {"PWD", "SHLVL", "_", "OLDPWD"}
REPO = Path(__file__).resolve().parents[2]

# What a sandboxed agent can reach, as JSON on stdout; its parameters come on stdin.
PROBE = r"""
import json, os, socket, sys
p = json.loads(sys.stdin.read())
def read(path):
    try:
        with open(path, "rb") as f:
            data = f.read(64)
    except FileNotFoundError:
        return "missing"
    except OSError as exc:
        return exc.strerror
    if not data:
        return "empty"
    return "sqlite" if data.startswith(b"SQLite format 3") else "read"
def write(path):
    try:
        with open(path, "w") as f:
            f.write("written by the agent")
    except OSError as exc:
        return exc.strerror
    return "written"
def listdir(path):
    try:
        return sorted(os.listdir(path))
    except OSError as exc:
        return exc.strerror
def connect(port):
    try:
        socket.create_connection(("127.0.0.1", port), 2).close()
    except OSError as exc:
        return type(exc).__name__
    return "connected"
print(json.dumps({
    "other_notes": read(p["other_notes"]),
    "tasks": listdir(p["tasks"]),
    "database": {path: read(path) for path in p["database"]},
    "service_environ": read("/proc/%d/environ" % p["service_pid"]),
    "pids": sorted(int(n) for n in os.listdir("/proc") if n.isdigit()),
    "writes": {path: write(path) for path in p["writes"]},
    "inside": write("inside.txt"),
    "sockets": {d: listdir(d) for d in ("/run/postgresql", "/var/run/postgresql")},
    "tcp": connect(p["pg_port"]),
}))
"""


def settings_for(db_url: str, data_dir: Path, **fields: Any) -> Settings:
    fast = {"log_format": "console", "scheduler_tick_seconds": 0.2, "drain_timeout_seconds": 1}
    # The agents here are these owners' own commands: what an agent can reach once it runs
    # is the subject, not what the policy lets tenants run (test_tenants.py).
    ours = {"database_url": db_url, "data_dir": data_dir, "trusted_owners": "local,alice,bob"}
    return Settings(instance_id=INSTANCE, **ours, **fast, **fields)


async def create(http: httpx.AsyncClient, argv: list[str], **fields: Any) -> str:
    schedule = await created(http, schedule_body({"type": "command", "argv": argv}, **fields))
    return str(schedule["id"])


async def workdir_of(http: httpx.AsyncClient, task_id: str) -> str:
    task = (await http.get(f"{API}/tasks/{task_id}")).json()
    workdir: str = task["workdir"]
    return workdir


def read_env(path: Path) -> dict[str, str]:
    """``env -0`` output: NUL-separated NAME=VALUE."""
    pairs = [item.partition("=") for item in path.read_text().split("\0") if item]
    return {name: value for name, _, value in pairs}


@pytest.fixture
def service_env(monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    """The service's environment with production-like secrets (restored afterwards)."""
    for name, value in SERVICE_SECRETS.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("AGENT_PASS_ME", "passed-through-by-the-operator")
    monkeypatch.delenv("LC_ALL", raising=False)
    monkeypatch.delenv("TZ", raising=False)
    return dict(os.environ)


# -- the environment and the directory layout, without a sandbox ---------------------------


async def test_an_agent_gets_only_the_documented_environment(
    db_url: str, tmp_path: Path, service_env: dict[str, str]
) -> None:
    data_dir = tmp_path / "data"
    settings = settings_for(db_url, data_dir, agent_env="AGENT_PASS_ME")
    with capture_logs() as lines:
        async with serving(settings) as app, owner(app, "alice") as alice:
            schedule_id = await create(alice, ["sh", "-c", "env -0 > env.txt"])
            run = await run_to_end(alice, schedule_id)
            assert run["status"] == "succeeded", run
            workdir = await workdir_of(alice, run["task_id"])
    (started,) = [line for line in lines if line["event"] == "engine_started"]
    assert started["sandbox"] == "none" and started["agent_env"] == ["AGENT_PASS_ME"]

    # Each owner has a root of its own: tasks/<owner>/<schedule id>.
    assert Path(workdir) == (data_dir / "tasks" / "alice" / schedule_id).resolve()
    raw = (Path(workdir) / "env.txt").read_text()
    env = read_env(Path(workdir) / "env.txt")
    assert set(env) - SHELL_OWN == DOCUMENTED | {"AGENT_PASS_ME"}
    for name, value in SERVICE_SECRETS.items():
        assert name not in env and value not in raw
    assert env["AGENT_PASS_ME"] == "passed-through-by-the-operator"
    assert env["HOME"] == workdir
    assert env["PATH"] == service_env["PATH"]
    assert env["AGENTCRON_INSTANCE_ID"] == INSTANCE
    assert env["AGENTCRON_SCHEDULE_ID"] == schedule_id
    assert env["AGENTCRON_RUN_ID"] == run["id"] and env["AGENTCRON_TASK_ID"] == run["task_id"]
    assert (env["AGENTCRON_TRIGGER"], env["AGENTCRON_ATTEMPT"]) == ("manual", "1")


@pytest.mark.parametrize("backend", ["sqlite"])  # what any same-user process can do
async def test_without_the_sandbox_an_agent_reads_what_the_service_user_can(
    db_url: str, tmp_path: Path, service_env: dict[str, str]
) -> None:
    # The reason tenants must only run operator-declared agents when there is no sandbox:
    # another owner's files and the service's own environment are one open() away.
    data_dir = tmp_path / "data"
    async with serving(settings_for(db_url, data_dir)) as app:
        async with owner(app, "bob") as bob:
            bob_id = await create(bob, ["sh", "-c", "echo bob-private > notes.txt"])
            assert (await run_to_end(bob, bob_id))["status"] == "succeeded"
        async with owner(app, "alice") as alice:
            script = (
                f"cat ../../bob/{bob_id}/notes.txt; "
                # /proc/<pid>/environ is the environment the process started with.
                f"tr '\\0' '\\n' < /proc/{os.getpid()}/environ | grep -c '^PATH='"
            )
            run = await run_to_end(alice, await create(alice, ["sh", "-c", script]))
    assert run["status"] == "succeeded", run
    assert run["output"] == "bob-private\n1\n"


async def test_a_legacy_task_directory_moves_once_under_its_owner(
    db: Database, db_url: str, tmp_path: Path, service_env: dict[str, str]
) -> None:
    data_dir = tmp_path / "data"
    settings = settings_for(db_url, data_dir)
    async with serving(settings) as app, owner(app, "alice") as alice:
        schedule_id = await create(alice, ["sh", "-c", "echo run >> kept.txt; cat kept.txt"])
        first = await run_to_end(alice, schedule_id)
        assert first["status"] == "succeeded", first
    # As the layout before owners had roots: the directory at tasks/<schedule id>, and the
    # first run's task row pointing there.
    tasks = (data_dir / "tasks").resolve()
    legacy, moved = tasks / schedule_id, tasks / "alice" / schedule_id
    moved.rename(legacy)
    (tasks / "alice").rmdir()
    async with db.session() as session:
        first_task = update(Task).where(Task.id == uuid.UUID(first["task_id"]))
        await session.execute(first_task.values(workdir=str(legacy)))

    async with serving(settings) as app, owner(app, "alice") as alice:
        second = await run_to_end(alice, schedule_id)
        # The old task keeps its stored directory, which still leads to the same files.
        assert await workdir_of(alice, first["task_id"]) == str(legacy)
        assert await workdir_of(alice, second["task_id"]) == str(moved)
    assert second["status"] == "succeeded", second
    assert second["output"] == "run\nrun\n"  # what the first run kept survived the move
    assert moved.is_dir() and not moved.is_symlink()
    assert legacy.is_symlink() and legacy.resolve() == moved

    async with serving(settings) as app, owner(app, "alice") as alice:  # and only once
        third = await run_to_end(alice, schedule_id)
    assert third["output"] == "run\nrun\nrun\n"
    assert legacy.is_symlink() and sorted(p.name for p in moved.iterdir()) == ["kept.txt"]


def test_the_new_directory_wins_over_a_legacy_one(tmp_path: Path) -> None:
    schedule_id = uuid.uuid4()
    legacy, new = tmp_path / str(schedule_id), tmp_path / "alice" / str(schedule_id)
    legacy.mkdir()
    (legacy / "old.txt").write_text("old")
    new.mkdir(parents=True)
    (new / "new.txt").write_text("new")
    adopt_legacy_directory(tmp_path, "alice", schedule_id)
    assert (legacy / "old.txt").read_text() == "old" and not legacy.is_symlink()
    assert sorted(p.name for p in new.iterdir()) == ["new.txt"]


def test_an_owner_that_is_not_a_path_component_is_refused(tmp_path: Path) -> None:
    workdir = TaskDirectories(tmp_path).workdir  # where every store puts a schedule's tasks
    for bad in ("..", "../bob", "a/b", ".hidden", ""):
        with pytest.raises(ValueError, match="an owner is"):
            workdir(bad, uuid.uuid4())
    assert workdir("alice@example.org", uuid.UUID(int=1)).endswith(
        "/tasks/alice@example.org/00000000-0000-0000-0000-000000000001"
    )


# -- the sandbox ---------------------------------------------------------------------------


async def probe(app: FastAPI, data_dir: Path, db_url: str, writes: list[Path]) -> Any:
    """Bob's agent keeps a note; Alice's probe reports what it can reach. Returns (bob's
    workdir, alice's workdir, the probe's report)."""
    async with owner(app, "bob") as bob:
        bob_id = await create(bob, ["sh", "-c", "echo bob-private > notes.txt"])
        bob_run = await run_to_end(bob, bob_id)
        assert bob_run["status"] == "succeeded", bob_run  # writing inside works
        bob_dir = Path(await workdir_of(bob, bob_run["task_id"]))
    database = make_database_paths(db_url)
    tasks = (data_dir / "tasks").resolve()
    params: dict[str, Any] = {"service_pid": os.getpid(), "pg_port": 5432, "tasks": str(tasks)}
    params["other_notes"] = str(bob_dir / "notes.txt")
    params |= {"database": [str(p) for p in database], "writes": [str(p) for p in writes]}
    async with owner(app, "alice") as alice:
        schedule_id = await create(alice, [HOST_PYTHON, "-c", PROBE], prompt=json.dumps(params))
        run = await run_to_end(alice, schedule_id)
        assert run["status"] == "succeeded", run
        alice_dir = Path(await workdir_of(alice, run["task_id"]))
    return bob_dir, alice_dir, json.loads(run["output"])


def make_database_paths(db_url: str) -> list[Path]:
    if not db_url.startswith("sqlite"):
        return []
    main = Path(db_url.split("///", 1)[1])
    return [main, *(p for p in main.parent.iterdir() if p.name.startswith(main.name + "-"))]


async def test_a_sandboxed_agent_reaches_only_its_own_directory(
    db_url: str,
    backend: str,
    tmp_path: Path,
    service_env: dict[str, str],
    bwrap: str,
) -> None:
    data_dir = tmp_path / "data"
    outside = tmp_path / "outside.txt"  # under /tmp: the sandbox's /tmp is its own tmpfs
    in_repo = REPO / f".sandbox-escape-{uuid.uuid4().hex}.txt"
    in_data = data_dir / "planted.txt"
    planted_in_bobs = data_dir / "tasks" / "bob" / "planted-by-alice.txt"  # another owner's root
    settings = settings_for(db_url, data_dir, sandbox="bwrap", sandbox_binary=bwrap)
    try:
        async with serving(settings) as app:
            writes = [outside, in_repo, in_data, planted_in_bobs]
            bob_dir, alice_dir, report = await probe(app, data_dir, db_url, writes)
    finally:
        in_repo.unlink(missing_ok=True)

    # Another owner's directory, and every other task directory: not there at all.
    assert report["other_notes"] == "missing"
    assert report["tasks"] == ["alice"]
    assert (bob_dir / "notes.txt").read_text() == "bob-private\n"
    # The service's database file (SQLite; here outside the data dir): /dev/null is bound
    # over it and its siblings, which a nodev mount will not even open.
    for path, seen in report["database"].items():
        assert seen == "Permission denied", (path, seen)
    if backend == "sqlite":
        assert report["database"]
    # The service's process and its environment: another PID namespace.
    assert report["service_environ"] == "missing"
    assert os.getpid() not in report["pids"] and len(report["pids"]) < 10
    # PostgreSQL's Unix sockets: hidden (an empty tmpfs) where the host has them. With host
    # networking a database that trusts loopback is reachable: see the README.
    for directory, listing in report["sockets"].items():
        assert listing == ([] if is_dir(directory) else "No such file or directory"), directory
    if backend == "postgresql":
        assert report["tcp"] == "connected"
    # Writing: inside works; the repository is read-only; what it wrote to its /tmp and over
    # the data dir's tmpfs vanished with the sandbox, never reaching the host.
    assert report["inside"] == "written"
    assert (alice_dir / "inside.txt").read_text() == "written by the agent"
    # The checkout is read-only inside, or not there at all when it lies under /tmp (a CI
    # clone may): the sandbox's /tmp is a private, empty one.
    hidden = REPO.resolve().is_relative_to("/tmp")
    expected = "No such file or directory" if hidden else "Read-only file system"
    assert report["writes"][str(in_repo)] == expected
    assert not in_repo.exists() and not outside.exists() and not in_data.exists()
    assert sorted(p.name for p in (data_dir / "tasks").iterdir()) == ["alice", "bob"]
    assert [p.name for p in (data_dir / "tasks" / "bob").iterdir()] == [bob_dir.name]


def is_dir(path: str) -> bool:
    return os.path.isdir(path)


async def test_a_sqlite_database_in_the_data_dir_is_not_there_at_all(
    tmp_path: Path,
    sqlite_template: Path,
    service_env: dict[str, str],
    bwrap: str,
) -> None:
    data_dir = tmp_path / "var"
    data_dir.mkdir()
    shutil.copy(sqlite_template, data_dir / "agentcron.db")
    db_url = f"sqlite+aiosqlite:///{data_dir / 'agentcron.db'}"
    settings = settings_for(db_url, data_dir, sandbox="bwrap", sandbox_binary=bwrap)
    async with serving(settings) as app:
        _, _, report = await probe(app, data_dir, db_url, [])
    assert report["database"] and set(report["database"].values()) == {"missing"}


@pytest.mark.parametrize("backend", ["postgresql"])  # the database is a TCP port away
async def test_network_none_cuts_the_agent_off_the_database(
    db_url: str,
    tmp_path: Path,
    service_env: dict[str, str],
    bwrap: str,
) -> None:
    # With host networking it is reachable: test_a_sandboxed_agent_reaches_only_its_own_directory.
    data_dir = tmp_path / "data"
    bwrapped: dict[str, Any] = {"sandbox": "bwrap", "sandbox_binary": bwrap}
    none = settings_for(db_url, data_dir, sandbox_network="none", **bwrapped)
    with capture_logs() as lines:
        async with serving(none) as app:
            _, _, report = await probe(app, data_dir, db_url, [])
    assert report["tcp"] in ("ConnectionRefusedError", "OSError"), report["tcp"]
    (started,) = [line for line in lines if line["event"] == "engine_started"]
    assert started["sandbox"] == "bwrap (network none)"


@pytest.mark.parametrize("backend", ["sqlite"])  # start-up, not storage
async def test_an_api_only_process_starts_without_bwrap(db_url: str, tmp_path: Path) -> None:
    # It runs no agent. (That the service refuses to start without it: tests/unit/
    # test_sandbox.py, tests/e2e/test_startup.py::test_a_sandbox_without_bubblewrap_is_refused.)
    binary = "/nonexistent/bwrap"
    settings = settings_for(db_url, tmp_path / "data", sandbox="bwrap", sandbox_binary=binary)
    async with serving(settings, disable_scheduler=True):
        pass
