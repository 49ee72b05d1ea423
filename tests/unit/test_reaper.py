"""The reaper and the gate of ``core.runners.command.reaper`` with real processes.

Closing the reaper's pipe is what the kernel does when the service dies, SIGKILL included;
``tests/e2e/test_no_orphans.py`` kills a real ``agentcron serve``.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from agentcron.core.runners.command.reaper import GO, Reaper, gated
from tests.integration.engine_kit import process_alive
from tests.unit.test_command_runner import group_members


def gone_within(pid: int, seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while process_alive(pid):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.01)
    return True


@pytest.fixture
def reaper() -> Iterator[Reaper]:
    reaper = Reaper()
    yield reaper
    reaper.close()


@pytest.fixture
def group() -> Iterator[subprocess.Popen[bytes]]:
    """A session of its own: a shell (the group's leader) with a child of its own."""
    proc = subprocess.Popen(["sh", "-c", "sleep 60 & wait"], start_new_session=True)
    yield proc
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()


def wait_for_members(pgid: int, count: int) -> list[int]:
    deadline = time.monotonic() + 5
    while len(found := group_members(pgid)) < count:
        assert time.monotonic() < deadline, f"group {pgid} has {found}"
        time.sleep(0.01)
    return found


@pytest.mark.parametrize("frozen", [False, True], ids=["running", "frozen"])
def test_the_reapers_end_of_file_kills_every_registered_group(
    reaper: Reaper, group: subprocess.Popen[bytes], frozen: bool
) -> None:
    pids = wait_for_members(group.pid, 2)
    reaper.register(group.pid)
    assert reaper.process is not None
    reaper_pid = reaper.process.pid
    assert os.getsid(reaper_pid) == reaper_pid  # a session of its own: no terminal's signals
    if frozen:
        os.killpg(group.pid, signal.SIGSTOP)  # as for a lease that cannot be confirmed
    reaper.close()  # what the kernel does to the service's descriptors when it dies
    group.wait(timeout=1)
    assert all(gone_within(pid, 1) for pid in pids)


def test_an_unregistered_group_is_left_alone(
    reaper: Reaper, group: subprocess.Popen[bytes]
) -> None:
    wait_for_members(group.pid, 2)
    reaper.register(group.pid)
    reaper.unregister(group.pid)
    reaper.close()
    assert group.poll() is None


def test_the_reaper_ignores_stop_signals_and_a_killed_one_is_replaced(
    reaper: Reaper, group: subprocess.Popen[bytes]
) -> None:
    pids = wait_for_members(group.pid, 2)
    reaper.register(group.pid)
    first = reaper.process
    assert first is not None
    time.sleep(0.3)  # past its start-up, when it ignores them
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        first.send_signal(sig)
    time.sleep(0.1)
    assert first.poll() is None
    first.kill()
    first.wait()
    # The next registration finds the pipe broken: a new reaper gets every group.
    reaper.register(group.pid)
    assert reaper.process is not None and reaper.process is not first
    reaper.close()
    assert all(gone_within(pid, 1) for pid in pids)


def test_the_gate_never_starts_the_agent_if_the_service_dies_before_go(
    tmp_path: Path,
) -> None:
    started = tmp_path / "started"
    argv = gated(["sh", "-c", f"touch {started}"], {})
    gate = subprocess.Popen(argv, stdin=subprocess.PIPE, env={}, start_new_session=True)
    assert gate.stdin is not None
    gate.stdin.close()  # the service died before registering the group
    assert gate.wait(timeout=5) == 0
    assert not started.exists()


@pytest.mark.parametrize("env", [{}, {"PWD": "/somewhere/else", "A": "1"}])
def test_the_gate_passes_stdin_and_the_environment_exactly(
    tmp_path: Path, env: dict[str, str]
) -> None:
    def through_gate(argv: list[str]) -> bytes:
        done = subprocess.run(
            gated(argv, env), input=GO + b"the prompt", env=env, cwd=tmp_path, capture_output=True
        )
        assert done.returncode == 0, done.stderr
        return done.stdout

    assert through_gate(["/bin/cat"]) == b"the prompt"
    # The shell of the gate adds no PWD of its own, and keeps one given as it was.
    items = through_gate(["/usr/bin/env", "-0"]).split(b"\0")
    seen = dict(item.split(b"=", 1) for item in items if item)
    assert seen == {key.encode(): value.encode() for key, value in env.items()}
