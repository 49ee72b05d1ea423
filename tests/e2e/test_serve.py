"""The service as a user runs it: a real process, real HTTP, the README's example."""

from __future__ import annotations

import json
import os
import re
import shlex
import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from agentcron.web.engine.heap import YOUNG_THRESHOLD
from tests.e2e.conftest import Server, keyed_server, sqlite_env, wait_until

README = Path(__file__).resolve().parents[2] / "README.md"
REPO = README.parent


def readme_block(marker: str, language: str = "(?:sh|bash)?") -> str:
    text = README.read_text()
    block = re.search(rf"<!-- {marker} -->\n```{language}\n(.*?)```", text, re.S)
    assert block, f"README has no {marker} block"
    return block.group(1)


@pytest.fixture(scope="module")
def readme_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """One server for the README's examples, which make schedules of their own and read only
    those: a server start each cost seconds on a loaded machine."""
    root = tmp_path_factory.mktemp("readme")
    running = keyed_server(sqlite_env(root), root / "server.log")
    yield running
    running.stop()


def readme_curl_commands(marker: str = "quickstart") -> list[str]:
    """The curl commands of a marked README block, in order."""
    lines = readme_block(marker).replace("\\\n", " ").splitlines()
    return [line.strip() for line in lines if line.strip().startswith("curl ")]


def test_readme_curl_example_works_verbatim(readme_server: Server) -> None:
    commands = readme_curl_commands()
    assert commands, "no curl command in the quickstart"
    outputs = [run_curl(command, readme_server) for command in commands]
    created = json.loads(outputs[0])
    assert created["description"] == "At 08:00, Monday through Friday, Asia/Shanghai"
    assert created["next_run"]
    preview = json.loads(outputs[1])
    assert len(preview["next"]) == 10
    assert all(item.endswith("+08:00") for item in preview["next"])


def run_curl(command: str, server: Server, **substitutions: str) -> str:
    """Run a README curl command with the test server's URL and API key in place of the
    README's ``http://127.0.0.1:8000`` and ``$AGENTCRON_KEY`` (what the reader's shell would
    expand)."""
    assert server.key is not None
    substitutions |= {"http://127.0.0.1:8000": server.url, "$AGENTCRON_KEY": server.key}
    argv = []
    for arg in shlex.split(command):
        for name, value in substitutions.items():
            arg = arg.replace(name, value)
        argv.append(arg)
    done = subprocess.run(argv, capture_output=True, text=True, timeout=30)
    assert done.returncode == 0, (command, done.stderr)
    return done.stdout


def test_readme_firing_example_runs_the_agent(readme_server: Server) -> None:
    create, history = readme_curl_commands("firing")
    schedule = json.loads(run_curl(create, readme_server))

    def succeeded() -> list[dict[str, Any]]:
        runs = json.loads(run_curl(history, readme_server, SCHEDULE_ID=schedule["id"]))["items"]
        return [run for run in runs if run["status"] == "succeeded"]

    done = wait_until(succeeded, "a run to succeed", within=25, interval=0.5)
    assert done[0]["trigger"] == "schedule"
    assert done[0]["output"] == "agent got: hello agent\n"


def run_readme_block(marker: str, server: Server) -> dict[str, Any]:
    """Run a README block as the reader would: in ``sh``, from the checkout, with the key
    exported; only the port is the test server's. Returns the created schedule."""
    port = server.url.rsplit(":", 1)[1]
    script = readme_block(marker).replace("127.0.0.1:8000", f"127.0.0.1:{port}")
    env = {"PATH": os.environ["PATH"], "AGENTCRON_KEY": server.key or ""}
    done = subprocess.run(
        ["sh", "-c", script], cwd=REPO, env=env, capture_output=True, text=True, timeout=30
    )
    assert done.returncode == 0, done.stderr
    created: dict[str, Any] = json.loads(done.stdout)
    assert "id" in created, created
    return created


def finished_run(server: Server, schedule_id: str, within: float = 30) -> dict[str, Any]:
    """Run the schedule now and wait for the run to finish; returns the run."""
    started = httpx.post(
        f"{server.url}/api/v1/schedules/{schedule_id}/run", headers=server.headers, timeout=10
    )
    assert started.status_code == 202, started.text
    run_url = f"{server.url}/api/v1/runs/{started.json()['id']}"

    def ended() -> dict[str, Any] | None:
        run: dict[str, Any] = httpx.get(run_url, headers=server.headers, timeout=10).json()
        return run if run["status"] not in ("pending", "running") else None

    return wait_until(ended, "the run to finish", within)


def test_readme_digest_example_runs_as_written(readme_server: Server) -> None:
    created = run_readme_block("digest", readme_server)
    assert created["description"] == "At 08:00, Monday through Friday, Asia/Shanghai"
    assert created["warnings"] == []  # the agent's path is absolute, and it is there
    assert all("secret" not in c or c["secret"].startswith("whsec_…") for c in created["notify"])
    # As the README says: run it now, and it succeeds with five bullets; the log file in the
    # schedule's working directory gets the run.
    run = finished_run(readme_server, created["id"])
    assert run["status"] == "succeeded", run
    assert run["output"].count("\n- item") == 5, run["output"]
    assert "asked: Summarise the news in five bullets." in run["output"]
    workdir = readme_server.log_path.parent / "data" / "tasks" / "local" / created["id"]
    log = workdir / "digests.jsonl"
    wait_until(log.exists, "the digest's log file", 15, interval=0.2)
    [line] = log.read_text().splitlines()
    assert json.loads(line)["run"]["id"] == run["id"]


def test_readme_chat_digest_example_is_accepted_and_says_what_its_runs_need(
    readme_server: Server,
) -> None:
    created = run_readme_block("digest-chat", readme_server)
    assert created["description"] == "At 08:00, Monday through Friday, Asia/Shanghai"
    assert created["mode"] == "persistent"
    # The `export` in the block sets the reader's shell, not the service's environment: a run
    # fails at once, with the sentence the README quotes.
    assert "DIGEST_API_KEY" not in os.environ, "the test needs a service without the key"
    # Said at once, as the README says, and saved all the same.
    assert [(w["code"], w["field"]) for w in created["warnings"]] == [
        ("variable_not_set", "runner.api_key_env")
    ]
    run = finished_run(readme_server, created["id"])
    assert run["status"] == "failed", run
    assert "environment variable DIGEST_API_KEY (runner.api_key_env) is not set" in run["error"]


@pytest.mark.parametrize(
    ("stop", "codes"),
    [(signal.SIGTERM, (0, -signal.SIGTERM)), (signal.SIGINT, (0,))],
    ids=["sigterm", "ctrl-c"],
)
def test_the_started_service_settles_its_heap_and_stops_cleanly(
    server: Server, stop: signal.Signals, codes: tuple[int, ...]
) -> None:
    assert httpx.get(f"{server.url}/readyz").status_code == 200
    # Started, it froze its heap out of garbage collection: unfrozen, every full collection
    # of a busy engine walked the ~200,000 objects of the started service, pauses of 100 ms
    # and more in which no run started (docs/design.md, Architecture).
    [settled] = [json.loads(line) for line in server.log().splitlines() if '"heap_settled"' in line]
    assert settled["frozen"] > 50_000, settled
    # And it collects its young objects less often (docs/library.md: a tenth of a burst's CPU).
    assert settled["young_threshold"] == YOUNG_THRESHOLD, settled
    # uvicorn shuts down gracefully, then re-raises SIGTERM so the exit status says why; a
    # Ctrl-C ends with status 0.
    server.process.send_signal(stop)
    assert server.process.wait(timeout=30) in codes, server.log()[-4000:]
    server.log_file.close()
    assert "service_stopped" in server.log()
    assert "Traceback" not in server.log()
