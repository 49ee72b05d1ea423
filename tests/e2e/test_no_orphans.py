"""No agent outlives its service (docs/reliability.md, "No agent outlives its service").

A real ``agentcron serve`` on SQLite starts a ``command`` agent that starts a child of its own;
the server is killed with SIGKILL, so none of its code runs, and both processes must be gone
within a second: the service's reaper process (``core.runners.command.reaper``) sees its pipe
close and kills the agent's process group.
"""

from __future__ import annotations

import os
import shutil
import signal
from pathlib import Path

import httpx
import pytest

from tests.e2e.conftest import (
    Fleet,
    Server,
    command_runner,
    make_key,
    migrate,
    schedule_body,
    sqlite_env,
    wait_for,
)
from tests.integration.engine_kit import process_alive

# The module's tests share one server: `make test` (--dist loadgroup) keeps them on one
# xdist worker, or each worker that got one of them would start a server of its own.
pytestmark = pytest.mark.xdist_group("no-orphans-server")

# $1, $2: where the agent writes its own pid and its child's. The file is written whole
# (to a temporary name, then renamed) so a pid is never read half-written.
AGENT = """
echo $$ > "$1.new" && mv "$1.new" "$1"
sleep 60 &
echo $! > "$2.new" && mv "$2.new" "$2"
wait
"""
KILL_WITHIN_SECONDS = 1.0


@pytest.fixture(scope="module")
def migrated(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    """A migrated SQLite database with an API key in it, made once: each test serves a copy
    (a SIGKILLed server cannot be reused, and migrating again per test costs seconds)."""
    where = tmp_path_factory.mktemp("template")
    env = sqlite_env(where, "template")
    migrate(env)
    return where / "agentcron.db", make_key(env)


@pytest.fixture
def server(migrated: tuple[Path, str], fleet: Fleet, tmp_path: Path) -> Server:
    template, key = migrated
    shutil.copy(template, tmp_path / "agentcron.db")
    running = fleet.start(sqlite_env(tmp_path, "no-orphans"), "server")
    running.key = key
    return running


def read_pid(path: Path) -> int | None:
    try:
        return int(path.read_text())
    except (FileNotFoundError, ValueError):
        return None


async def start_agent(server: Server, tmp_path: Path) -> tuple[int, int]:
    """Run a schedule now whose agent starts a child; (agent's pid, child's pid) once both run."""
    leader, child = tmp_path / "leader.pid", tmp_path / "child.pid"
    agent = command_runner(AGENT, "orphan-agent", str(leader), str(child))
    body = schedule_body("orphans", {"cron": "0 0 1 1 *"}, agent)  # due only at new year
    async with httpx.AsyncClient(base_url=server.url, headers=server.headers, timeout=30) as api:
        created = await api.post("/api/v1/schedules", json=body)
        assert created.status_code == 201, created.text
        ran = await api.post(f"/api/v1/schedules/{created.json()['id']}/run")
        assert ran.status_code == 202, ran.text

    async def both_running() -> tuple[int, int] | None:
        pids = read_pid(leader), read_pid(child)
        if pids[0] and pids[1] and all(process_alive(pid) for pid in pids):
            return pids[0], pids[1]
        return None

    return await wait_for(both_running, "the agent and its child to run", within=20, interval=0.05)


@pytest.mark.parametrize("frozen", [False, True], ids=["running", "frozen"])
async def test_a_sigkilled_service_takes_its_agent_and_the_agents_child_with_it(
    server: Server, tmp_path: Path, frozen: bool
) -> None:
    pids = await start_agent(server, tmp_path)
    if frozen:
        # As the engine freezes an attempt whose lease it cannot confirm: a stopped group must
        # be killed as well, not left stopped (or thawed by the kernel's SIGCONT to orphaned
        # groups). The gate exec'd the agent: its group is the agent's.
        assert os.getpgid(pids[0]) == pids[0]
        os.killpg(pids[0], signal.SIGSTOP)
    assert server.kill() == -signal.SIGKILL

    async def all_gone() -> bool:
        return not any(process_alive(pid) for pid in pids)

    await wait_for(
        all_gone, "the agent and its child to die with the service", KILL_WITHIN_SECONDS, 0.01
    )
