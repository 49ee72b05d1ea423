"""Owner isolation where runs execute, through the real app and engine on both databases.

Owners' keys create ``command`` schedules through the API; the app's own engine (scheduler on)
runs them as real processes. The service's environment holds secret-looking variables
(monkeypatched) that no agent may see.
"""

from __future__ import annotations

import asyncio
import os
import time
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi import FastAPI
from sqlalchemy import update

from core.config import Settings
from core.scheduler import adopt_legacy_directory
from core.storage import Database, Task
from tests.conftest import app_client, issue_key
from web.app import create_app

API = "/api/v1"
HOURLY = {"every_seconds": 3600}  # never due during a test: runs come from "run now"
TERMINAL = {"succeeded", "failed", "timed_out", "cancelled", "skipped"}
INSTANCE = "containment-replica"
SERVICE_SECRETS = {
    # Names the service really reads, with values that must never reach an agent.
    "AGENTCRON_DATABASE_URL": "postgresql+asyncpg://agentcron:hunter2-db@db.internal/prod",
    "OPENAI_API_KEY": "sk-test-0123456789abcdef0123456789abcdef",
    "AGENTCRON_TEST_SERVICE_ONLY": "service-only-value",
}
DOCUMENTED = {
    "PATH",
    "HOME",
    "LANG",
    "TMPDIR",
    "AGENTCRON_RUN_ID",
    "AGENTCRON_SCHEDULE_ID",
    "AGENTCRON_TASK_ID",
    "AGENTCRON_ATTEMPT",
    "AGENTCRON_TRIGGER",
    "AGENTCRON_DUE_AT",
    "AGENTCRON_INSTANCE_ID",
}
SHELL_OWN = {"PWD", "SHLVL", "_", "OLDPWD"}


def settings_for(db_url: str, data_dir: Path, **fields: Any) -> Settings:
    return Settings(
        database_url=db_url,
        data_dir=data_dir,
        log_format="console",
        scheduler_tick_seconds=0.2,
        drain_timeout_seconds=1,
        instance_id=INSTANCE,
        **fields,
    )


@asynccontextmanager
async def serving(settings: Settings) -> AsyncIterator[FastAPI]:
    """The app with its engine running (scheduler on)."""
    app = create_app(settings)
    async with app.router.lifespan_context(app):
        yield app


@asynccontextmanager
async def owner(app: FastAPI, name: str) -> AsyncIterator[httpx.AsyncClient]:
    async with app_client(app, await issue_key(app, name)) as http:
        yield http


async def create(http: httpx.AsyncClient, argv: list[str], **fields: Any) -> str:
    body = {
        "name": "agent",
        "prompt": "go",
        "trigger": HOURLY,
        "runner": {"type": "command", "argv": argv},
        **fields,
    }
    response = await http.post(f"{API}/schedules", json=body)
    assert response.status_code == 201, response.text
    schedule_id: str = response.json()["id"]
    return schedule_id


async def run_to_end(http: httpx.AsyncClient, schedule_id: str, within: float = 20) -> Any:
    queued = await http.post(f"{API}/schedules/{schedule_id}/run")
    assert queued.status_code == 202, queued.text
    run_id = queued.json()["id"]
    deadline = time.monotonic() + within
    while True:
        run = (await http.get(f"{API}/runs/{run_id}")).json()
        if run["status"] in TERMINAL:
            return run
        assert time.monotonic() < deadline, f"run {run_id} still {run['status']}"
        await asyncio.sleep(0.05)


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


# -- the environment and the directory layout ------------------------------------------


async def test_an_agent_gets_only_the_documented_environment(
    db_url: str, tmp_path: Path, service_env: dict[str, str]
) -> None:
    data_dir = tmp_path / "data"
    settings = settings_for(db_url, data_dir, agent_env="AGENT_PASS_ME")
    async with serving(settings) as app, owner(app, "alice") as alice:
        schedule_id = await create(alice, ["sh", "-c", "env -0 > env.txt"])
        run = await run_to_end(alice, schedule_id)
        assert run["status"] == "succeeded", run
        workdir = await workdir_of(alice, run["task_id"])

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
    db_url: str, tmp_path: Path, service_env: dict[str, str]
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
    db = Database(db_url)
    try:
        async with db.session() as session:
            await session.execute(
                update(Task)
                .where(Task.id == uuid.UUID(first["task_id"]))
                .values(workdir=str(legacy))
            )
    finally:
        await db.dispose()

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


async def test_an_owner_that_is_not_a_path_component_is_refused(tmp_path: Path) -> None:
    from core.scheduler import Ledger

    ledger = Ledger(Database("sqlite+aiosqlite://"), owner="x", data_dir=tmp_path)
    try:
        for bad in ("..", "../bob", "a/b", ".hidden", ""):
            with pytest.raises(ValueError, match="an owner is"):
                ledger._workdir(bad, uuid.uuid4())
        assert ledger._workdir("alice@example.org", uuid.UUID(int=1)).endswith(
            "/tasks/alice@example.org/00000000-0000-0000-0000-000000000001"
        )
    finally:
        await ledger.db.dispose()
