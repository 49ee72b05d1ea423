"""The ``command`` runner with real processes: stdin, environment, exit codes, cancellation."""

from __future__ import annotations

import asyncio
import os
import sys
from pathlib import Path

import pytest

from agentcron.core.errors import RunPermanentError
from agentcron.core.runners import build_runner, validate_runner
from agentcron.core.runners.base import CancelToken, RunOutcome, TransientRunError
from agentcron.core.runners.command.runner import OUTPUT_LIMIT
from tests.factories import run_request

PY = sys.executable


async def run(
    argv: list[str],
    workdir: Path,
    *,
    prompt: str = "hello agent",
    token: CancelToken | None = None,
    **config: object,
) -> RunOutcome:
    runner = build_runner(validate_runner({"type": "command", "argv": argv, **config}))
    return await runner.run(run_request(workdir=workdir, prompt=prompt), token or CancelToken())


def process_state(pid: int) -> str | None:
    """The state letter of ``pid`` from /proc (``Z`` for a zombie), None if it is gone."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError):
        return None
    return stat.rsplit(")", 1)[1].split()[0]


def alive(pid: int) -> bool:
    """Whether ``pid`` still runs. A zombie has already died: it only waits to be reaped,
    which is up to its new parent (PID 1 here may never do it)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return process_state(pid) not in (None, "Z")


def group_members(pgid: int) -> list[int]:
    """Live (non-zombie) processes whose process group is ``pgid``."""
    members = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except (FileNotFoundError, ProcessLookupError):
            continue
        if int(fields[2]) == pgid and fields[0] != "Z":
            members.append(int(entry.name))
    return members


def read_text(path: Path) -> str:
    return path.read_text().strip() if path.exists() else ""


async def eventually_dead(pid: int, within: float = 5.0) -> bool:
    """True once ``pid`` no longer runs; False if it still runs after ``within`` seconds."""
    for _ in range(int(within / 0.05)):
        if not alive(pid):
            return True
        await asyncio.sleep(0.05)
    return not alive(pid)


async def wait_for_file(path: Path, within: float = 10.0) -> str:
    """The stripped content of ``path`` once it has some; ``AssertionError`` after ``within``."""
    for _ in range(int(within / 0.02)):
        if text := read_text(path):
            return text
        await asyncio.sleep(0.02)
    raise AssertionError(f"{path} was not written within {within} s")


async def test_prompt_arrives_on_stdin_in_the_task_directory_made_on_demand(
    tmp_path: Path,
) -> None:
    prompt = "Summarise today's headlines.\nLine two, ünïcode."
    workdir = tmp_path / "tasks" / "abc"
    outcome = await run(["sh", "-c", "cat; pwd"], workdir, prompt=prompt)
    assert outcome.output == f"{prompt}{workdir.resolve()}\n"


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
        (["sh", "-c", "kill -9 $$"], TransientRunError, "SIGKILL"),  # a foreign signal
        (["/nonexistent/agent-binary"], RunPermanentError, "cannot start"),
    ],
)
async def test_exit_75_and_a_foreign_signal_are_transient_a_missing_executable_permanent(
    argv: list[str], error: type[Exception], message: str, tmp_path: Path
) -> None:
    with pytest.raises(error, match=message):
        await run(argv, tmp_path)


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


async def test_missing_executable_is_permanent(tmp_path: Path) -> None:
    with pytest.raises(RunPermanentError, match="cannot start"):
        await run(["/nonexistent/agent-binary"], tmp_path)


async def test_agent_that_never_reads_stdin_still_succeeds(tmp_path: Path) -> None:
    outcome = await run(["sh", "-c", "echo done"], tmp_path, prompt="x" * 1_000_000)
    assert outcome.output == "done\n"


async def test_cancel_terminates_the_whole_process_group(tmp_path: Path) -> None:
    token = CancelToken()
    script = "sleep 60 & echo $! > child.pid; echo $$ > leader.pid; wait"
    job = asyncio.ensure_future(run(["sh", "-c", script], tmp_path, token=token))
    child = int(await wait_for_file(tmp_path / "child.pid"))
    leader = int(await wait_for_file(tmp_path / "leader.pid"))
    assert alive(child)
    token.cancel("cancel")
    with pytest.raises(RunPermanentError, match=r"cancelled \(cancel\)"):
        await asyncio.wait_for(job, 10)
    assert await eventually_dead(child)
    assert await eventually_dead(leader)
    assert group_members(leader) == []


async def test_sigkill_after_grace_for_a_process_that_traps_term(tmp_path: Path) -> None:
    script = (
        "import pathlib, signal, time\n"
        "signal.signal(signal.SIGTERM, lambda *a: pathlib.Path('term').write_text('TERM'))\n"
        "pathlib.Path('ready').write_text(str(__import__('os').getpid()))\n"
        "while True:\n"
        "    time.sleep(1)\n"
    )
    token = CancelToken()
    job = asyncio.ensure_future(
        run([PY, "-c", script], tmp_path, token=token, kill_grace_seconds=0.5)
    )
    pid = int(await wait_for_file(tmp_path / "ready"))
    token.cancel("timeout")
    with pytest.raises(RunPermanentError, match=r"cancelled \(timeout\)"):
        await asyncio.wait_for(job, 10)
    # It got SIGTERM first (and ignored it), then SIGKILL ended it.
    assert read_text(tmp_path / "term") == "TERM"
    assert await eventually_dead(pid)


async def test_background_child_does_not_outlive_a_finished_run(tmp_path: Path) -> None:
    # The leader exits 0 at once but leaves a child holding its stdout: the run must neither
    # wait for the child nor leave it running.
    outcome = await asyncio.wait_for(
        run(["sh", "-c", "sleep 60 & echo $! > child.pid; echo started"], tmp_path), 10
    )
    assert outcome.output == "started\n"
    child = int(read_text(tmp_path / "child.pid"))
    assert await eventually_dead(child)
