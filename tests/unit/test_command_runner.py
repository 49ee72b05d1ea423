"""The ``command`` runner with real processes: stdin, output, exit codes, cancellation.

Tests taking ``containment`` run their agent as is and inside bubblewrap; what only the sandbox
does is in test_sandbox.py.
"""

from __future__ import annotations

import asyncio
import os
import sys
from pathlib import Path

import pytest

from agentcron.core.errors import RunPermanentError, TargetUnavailable
from agentcron.core.runners import build_runner, validate_runner
from agentcron.core.runners.base import CancelToken, RunOutcome, TransientRunError
from agentcron.core.runners.command.runner import OUTPUT_LIMIT
from agentcron.core.runners.containment import Containment, Sandbox
from tests.e2e.conftest import processes_with
from tests.factories import run_request
from tests.integration.engine_kit import process_alive, wait_dead

PY = sys.executable


@pytest.fixture(params=["unconfined", "sandboxed"])
def containment(request: pytest.FixtureRequest, tmp_path: Path) -> Containment:
    if request.param == "unconfined":
        return Containment()
    return Containment(sandbox=Sandbox(request.getfixturevalue("bwrap"), tmp_path / "data"))


@pytest.fixture
def workdir(tmp_path: Path) -> Path:
    """A task's directory in the data directory, made by the runner."""
    return tmp_path / "data" / "tasks" / "alice" / "s1"


async def run(
    argv: list[str],
    workdir: Path,
    *,
    prompt: str = "hello agent",
    token: CancelToken | None = None,
    containment: Containment | None = None,
    **config: object,
) -> RunOutcome:
    runner = build_runner(validate_runner({"type": "command", "argv": argv, **config}))
    req = run_request(workdir=workdir, prompt=prompt, containment=containment or Containment())
    return await runner.run(req, token or CancelToken())


def marker(workdir: Path) -> str:
    """A mark unique to the test, for its agent's argv, to find its processes in /proc."""
    return f"agentcron-command-test-{abs(hash(str(workdir)))}"


async def none_left(text: str, within: float = 5.0) -> bool:
    for _ in range(int(within / 0.05)):
        if not processes_with(text):
            return True
        await asyncio.sleep(0.05)
    return not processes_with(text)


def group_members(pgid: int) -> list[int]:
    """Live (non-zombie) processes whose process group is ``pgid``."""
    members = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[2]) == pgid and fields[0] != "Z":
            members.append(int(entry.name))
    return members


def real(path: Path) -> str:
    return os.path.realpath(path)


def read_text(path: Path) -> str:
    return path.read_text().strip() if path.exists() else ""


async def wait_for_file(path: Path, within: float = 10.0) -> str:
    """The stripped content of ``path`` once it has some; ``AssertionError`` after ``within``."""
    for _ in range(int(within / 0.02)):
        if text := read_text(path):
            return text
        await asyncio.sleep(0.02)
    raise AssertionError(f"{path} was not written within {within} s")


async def test_prompt_arrives_on_stdin_in_the_task_directory(
    workdir: Path, containment: Containment
) -> None:
    prompt = "Summarise today's headlines.\nLine two, ünïcode."
    outcome = await run(["sh", "-c", "cat; pwd"], workdir, prompt=prompt, containment=containment)
    assert outcome.output == f"{prompt}{real(workdir)}\n"


async def test_output_is_the_last_64_kib_of_stdout(tmp_path: Path) -> None:
    script = (
        "import sys\ndata = ''.join(f'{i:08d}\\n' for i in range(20000))\nsys.stdout.write(data)\n"
    )
    outcome = await run([PY, "-c", script], tmp_path)
    expected = "".join(f"{i:08d}\n" for i in range(20000))[-OUTPUT_LIMIT:]
    assert len(outcome.output) == OUTPUT_LIMIT
    assert outcome.output == expected


@pytest.mark.parametrize(
    ("argv", "error", "message"),
    [
        (["sh", "-c", "echo try later >&2; exit 75"], TransientRunError, "exit code 75"),
        (["sh", "-c", "echo no >&2; exit 3"], RunPermanentError, "exit code 3"),
        # Inside bwrap, a death by a signal is read back from bwrap's status 128 + its number.
        (["sh", "-c", "kill -9 $$"], TransientRunError, "killed by signal SIGKILL"),
        (["no-such-agent-xyz"], TargetUnavailable, "cannot start 'no-such-agent-xyz'"),
    ],
)
async def test_exit_codes_a_foreign_signal_and_a_missing_command_keep_their_meaning(
    argv: list[str], error: type[Exception], message: str, workdir: Path, containment: Containment
) -> None:
    with pytest.raises(error, match=message):
        await run(argv, workdir, containment=containment)


async def test_other_exit_codes_are_permanent_with_the_stderr_tail(tmp_path: Path) -> None:
    script = (
        "for i in $(seq 1 100); do echo noise $i >&2; done; echo 'API key rejected' >&2; exit 3"
    )
    with pytest.raises(RunPermanentError) as caught:
        await run(["sh", "-c", script], tmp_path)
    message = caught.value.message
    assert message.startswith("exit code 3")
    assert message.endswith("API key rejected")
    assert "noise 100" in message
    assert "noise 1\n" not in message  # only the tail, not all of stderr


async def test_agent_that_never_reads_stdin_still_succeeds(tmp_path: Path) -> None:
    outcome = await run(["sh", "-c", "echo done"], tmp_path, prompt="x" * 1_000_000)
    assert outcome.output == "done\n"


async def test_cancel_terminates_the_whole_process_group(tmp_path: Path) -> None:
    token = CancelToken()
    script = "sleep 60 & echo $! > child.pid; echo $$ > leader.pid; wait"
    job = asyncio.ensure_future(run(["sh", "-c", script], tmp_path, token=token))
    child = int(await wait_for_file(tmp_path / "child.pid"))
    leader = int(await wait_for_file(tmp_path / "leader.pid"))
    assert process_alive(child)
    token.cancel("cancel")
    with pytest.raises(RunPermanentError, match=r"cancelled \(cancel\)"):
        await asyncio.wait_for(job, 10)
    await wait_dead(child, 5)
    await wait_dead(leader, 5)
    assert group_members(leader) == []


async def test_timeout_sends_sigterm_to_the_agent_then_sigkill(
    workdir: Path, containment: Containment
) -> None:
    # The agent traps TERM and ignores it: it must see TERM (not just die with bwrap), then
    # SIGKILL after the grace period must end it and everything it started.
    script = (
        "trap 'echo TERM >> term.txt' TERM; sleep 60 & echo started > ready.txt; "
        "while true; do sleep 0.05; done"
    )
    token = CancelToken()
    argv = ["sh", "-c", script, marker(workdir)]
    job = asyncio.ensure_future(
        run(argv, workdir, token=token, containment=containment, kill_grace_seconds=1)
    )
    await wait_for_file(workdir / "ready.txt")
    token.cancel("timeout")
    with pytest.raises(RunPermanentError, match=r"cancelled \(timeout\)"):
        await asyncio.wait_for(job, 10)
    assert read_text(workdir / "term.txt") == "TERM"
    assert await none_left(marker(workdir))


async def test_background_child_does_not_outlive_a_finished_run(tmp_path: Path) -> None:
    # The leader exits 0 at once but leaves a child holding its stdout: the run must neither
    # wait for the child nor leave it running.
    outcome = await asyncio.wait_for(
        run(["sh", "-c", "sleep 60 & echo $! > child.pid; echo started"], tmp_path), 10
    )
    assert outcome.output == "started\n"
    child = int(read_text(tmp_path / "child.pid"))
    await wait_dead(child, 5)
