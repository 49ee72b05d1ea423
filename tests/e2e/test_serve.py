"""The service as a user runs it: a real process, real HTTP, the README's example."""

from __future__ import annotations

import json
import re
import shlex
import signal
import subprocess
import time
from pathlib import Path

import httpx
import pytest

from tests.e2e.conftest import Server

README = Path(__file__).resolve().parents[2] / "README.md"


def readme_curl_commands(marker: str = "quickstart") -> list[str]:
    """The curl commands of a marked README block, in order."""
    text = README.read_text()
    block = re.search(rf"<!-- {marker} -->\n```(?:sh|bash)?\n(.*?)```", text, re.S)
    assert block, f"README has no {marker} block"
    commands = []
    for line in block.group(1).replace("\\\n", " ").splitlines():
        line = line.strip()
        if line.startswith("curl "):
            commands.append(line)
    return commands


def test_readme_curl_example_works_verbatim(server: Server) -> None:
    commands = readme_curl_commands()
    assert commands, "no curl command in the quickstart"
    port = server.url.rsplit(":", 1)[1]
    outputs = [run_curl(command, port, server.key) for command in commands]
    created = json.loads(outputs[0])
    assert created["description"] == "At 08:00, Monday through Friday, Asia/Shanghai"
    assert created["next_run"]
    preview = json.loads(outputs[1])
    assert len(preview["next"]) == 10
    assert all(item.endswith("+08:00") for item in preview["next"])


def readme_argv(words: list[str], port: str, key: str | None) -> list[str]:
    """A README command's words with the test server's port and API key in place of the
    README's ``127.0.0.1:8000`` and ``$AGENTCRON_KEY`` (what the reader's shell would expand)."""
    assert key is not None
    return [
        word.replace("127.0.0.1:8000", f"127.0.0.1:{port}").replace("$AGENTCRON_KEY", key)
        for word in words
    ]


def run_curl(command: str, port: str, key: str | None, **substitutions: str) -> str:
    argv = []
    for arg in readme_argv(shlex.split(command), port, key):
        for name, value in substitutions.items():
            arg = arg.replace(name, value)
        argv.append(arg)
    done = subprocess.run(argv, capture_output=True, text=True, timeout=30)
    assert done.returncode == 0, (command, done.stderr)
    return done.stdout


def test_readme_firing_example_runs_the_agent(server: Server) -> None:
    create, history = readme_curl_commands("firing")
    port = server.url.rsplit(":", 1)[1]
    schedule = json.loads(run_curl(create, port, server.key))
    deadline = time.monotonic() + 25
    runs: list[dict[str, object]] = []
    while time.monotonic() < deadline:
        runs = json.loads(run_curl(history, port, server.key, SCHEDULE_ID=schedule["id"]))["items"]
        if any(run["status"] == "succeeded" for run in runs):
            break
        time.sleep(0.5)
    done = [run for run in runs if run["status"] == "succeeded"]
    assert done, f"no run succeeded: {runs}\n{server.log()[-3000:]}"
    assert done[0]["trigger"] == "schedule"
    assert done[0]["output"] == "agent got: hello agent\n"


def readme_block(marker: str) -> str:
    text = README.read_text()
    block = re.search(rf"<!-- {marker} -->\n```(?:sh|bash)?\n(.*?)```", text, re.S)
    assert block, f"README has no {marker} block"
    return block.group(1)


@pytest.mark.parametrize("marker", ["digest", "digest-chat"])
def test_readme_digest_examples_are_accepted(server: Server, marker: str) -> None:
    port = server.url.rsplit(":", 1)[1]
    # A backslash-newline continues the line in a shell; shlex would keep the newline as a word.
    commands = shlex.split(readme_block(marker).replace("\\\n", " "), comments=True)
    # One curl invocation per block, possibly after an `export`: run the curl part.
    start = commands.index("curl")
    argv = readme_argv(commands[start:], port, server.key)
    done = subprocess.run(
        [*argv, "-w", "\n%{http_code}"], capture_output=True, text=True, timeout=30
    )
    body, _, status = done.stdout.rpartition("\n")
    assert status == "201", body
    created = json.loads(body)
    assert created["description"] == "At 08:00, Monday through Friday, Asia/Shanghai"
    assert all("secret" not in c or c["secret"].startswith("whsec_…") for c in created["notify"])


def test_sigterm_stops_cleanly(server: Server) -> None:
    assert httpx.get(f"{server.url}/readyz").status_code == 200
    # uvicorn shuts down gracefully, then re-raises SIGTERM so the exit status says why.
    assert server.stop() in (0, -signal.SIGTERM)
    assert "service_stopped" in server.log()
    assert "Traceback" not in server.log()
