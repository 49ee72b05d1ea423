"""The example hosts of ``examples/``, run for real.

zcbot (``examples/zcbot_host``) is served by uvicorn from its own directory, as its developers
run it: its own ``core`` package is imported beside the installed ``agentcron``, its lifespan
starts the engine, its auth decides the owner under ``/scheduling``, and its agent runs through
the handler under the task's run lock (its ``ZCBOT_SCHEDULER=off`` is ``disable_scheduler``:
tests/integration/test_library.py). The AstraBox provider's distribution is built and
installed into a directory of its own and found through its installed entry point.
"""

from __future__ import annotations

import os
import shutil
import signal
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.e2e.conftest import Server, captured, start_server, wait_until
from tests.examples import ASTRABOX, EXAMPLES, PROVIDER_GROUP

ZCBOT = EXAMPLES / "zcbot_host"
ALICE = {"Authorization": "Bearer token-a"}
BOB = {"Authorization": "Bearer token-b"}
pytestmark = pytest.mark.slow


@pytest.fixture
def zcbot(tmp_path: Path) -> Iterator[Server]:
    """zcbot under uvicorn. At the end SIGTERM: its lifespan (the engine's drain included) must
    run to its end, and uvicorn exit by the signal it caught."""
    environment = {k: v for k, v in os.environ.items() if not k.startswith("AGENTCRON_")}
    environment.pop("PYTHONPATH", None)  # nothing of the checkout but the installed agentcron
    environment.update(
        ZCBOT_DATABASE_URL=f"sqlite:///{tmp_path / 'zcbot.db'}",
        ZCBOT_DATA_DIR=str(tmp_path / "data"),
        ZCBOT_USERS="alice=token-a,bob=token-b",
        ZCBOT_SCHEDULER_TICK_SECONDS="0.2",
        ZCBOT_AGENT_SECONDS="0.3",
    )
    uvicorn = (sys.executable, "-m", "uvicorn", "app:app")
    server = start_server(environment, tmp_path / "zcbot.log", argv=uvicorn, cwd=ZCBOT)
    yield server
    assert server.stop() in (0, -signal.SIGTERM), server.log()
    assert "Application shutdown complete" in server.log()


def schedule_body(task: str) -> dict[str, Any]:
    return {
        "name": f"zcbot {task}",
        "prompt": "what changed today?",
        "trigger": {"cron": "0 9 * * 1-5", "timezone": "Asia/Shanghai"},
        "runner": {"type": "handler", "data": {"task": task}},
    }


def wait_runs(url: str, schedule_id: str, count: int) -> list[dict[str, Any]]:
    def ended() -> list[dict[str, Any]]:
        answer = httpx.get(f"{url}/scheduling/api/v1/schedules/{schedule_id}/runs", headers=ALICE)
        runs: list[dict[str, Any]] = answer.json()["items"]
        done = len(runs) >= count and all(
            run["status"] not in ("pending", "running") for run in runs
        )
        return runs if done else []

    return wait_until(ended, f"{count} runs to end", within=20, interval=0.1)


def test_zcbot_runs_its_agent_through_the_engine_under_its_own_auth(zcbot: Server) -> None:
    health = httpx.get(f"{zcbot.url}/healthz").json()
    assert health["scheduler"] == "on"
    assert Path(health["core"]).resolve() == (ZCBOT / "core" / "__init__.py").resolve()
    api = f"{zcbot.url}/scheduling/api/v1/schedules"
    assert httpx.post(api, json=schedule_body("news")).status_code == 401
    created = httpx.post(api, json=schedule_body("news"), headers=ALICE)
    assert created.status_code == 201, created.text
    schedule = created.json()
    assert schedule["owner"] == "alice"
    assert httpx.get(api, headers=BOB).json()["items"] == []
    assert httpx.get(f"{api}/{schedule['id']}", headers=BOB).status_code == 404
    # Two runs of one task at once: the engine starts both (overlap allow), zcbot's run lock
    # lets its agent take one at a time.
    for _ in range(2):
        assert httpx.post(f"{api}/{schedule['id']}/run", headers=ALICE).status_code == 202
    runs = wait_runs(zcbot.url, schedule["id"], 2)
    assert [run["status"] for run in runs] == ["succeeded", "succeeded"]
    assert {run["output"] for run in runs} == {"zcbot answered 'what changed today?' for news"}
    task = httpx.get(f"{zcbot.url}/tasks/news", headers=ALICE).json()
    assert sorted(run["run_id"] for run in task["runs"]) == sorted(run["id"] for run in runs)
    assert task["most_at_once"] == 1


def test_the_provider_distribution_installs_and_is_found_by_its_entry_point(
    tmp_path: Path,
) -> None:
    source = shutil.copytree(ASTRABOX, tmp_path / "src", ignore=shutil.ignore_patterns("__py*"))
    target = tmp_path / "site"
    pip = [sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target", str(target)]
    installed = captured([*pip, str(source)], 120)
    assert installed.returncode == 0, installed.stderr
    probe = (
        "from importlib.metadata import entry_points\n"
        f"(point,) = entry_points(group={PROVIDER_GROUP!r}, name='agentcron')\n"
        "provider = point.load()()\n"
        "print(point.dist.name, provider.name, type(provider).__module__)\n"
    )
    env = {**os.environ, "PYTHONPATH": str(target)}
    found = captured([sys.executable, "-c", probe], env=env, cwd=tmp_path)
    assert found.returncode == 0, found.stderr
    assert found.stdout.split() == ["agentcron-astrabox", "agentcron", "agentcron_astrabox"]
