"""The service as a user runs it: a real process, real HTTP, the README's example."""

from __future__ import annotations

import json
import re
import shlex
import signal
import subprocess
from pathlib import Path

import httpx

from tests.e2e.conftest import Server

README = Path(__file__).resolve().parents[2] / "README.md"


def readme_curl_commands() -> list[str]:
    """The curl commands of the README's quick start, in order."""
    text = README.read_text()
    block = re.search(r"<!-- quickstart -->\n```(?:sh|bash)?\n(.*?)```", text, re.S)
    assert block, "README has no quickstart block"
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
    outputs = []
    for command in commands:
        argv = [arg.replace("127.0.0.1:8000", f"127.0.0.1:{port}") for arg in shlex.split(command)]
        done = subprocess.run(argv, capture_output=True, text=True, timeout=30)
        assert done.returncode == 0, (command, done.stderr)
        outputs.append(done.stdout)
    created = json.loads(outputs[0])
    assert created["description"] == "At 08:00, Monday through Friday, Asia/Shanghai"
    assert created["next_run"]
    preview = json.loads(outputs[1])
    assert len(preview["next"]) == 10
    assert all(item.endswith("+08:00") for item in preview["next"])


def test_sigterm_stops_cleanly(server: Server) -> None:
    assert httpx.get(f"{server.url}/readyz").status_code == 200
    # uvicorn shuts down gracefully, then re-raises SIGTERM so the exit status says why.
    assert server.stop() in (0, -signal.SIGTERM)
    assert "service_stopped" in server.log()
    assert "Traceback" not in server.log()
