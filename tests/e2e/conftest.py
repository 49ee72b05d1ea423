"""A real ``agentcron serve`` process on a free loopback port."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

import httpx
import pytest

AGENTCRON = str(Path(sys.executable).with_name("agentcron"))


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


@pytest.fixture
def server(server_env: dict[str, str], tmp_path: Path) -> Iterator[Server]:
    subprocess.run([AGENTCRON, "migrate"], env=server_env, check=True, capture_output=True)
    running = start_server(server_env, tmp_path / "server.log")
    yield running
    running.stop()
