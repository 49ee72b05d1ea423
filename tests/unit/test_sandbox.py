"""The ``command`` runner inside bubblewrap, with real processes: what the agent can reach, and
that the engine's signals (cancel, freeze and thaw) still reach the agent. Stdin, exit codes and
the timeout's TERM then KILL are test_command_runner.py's, run there in the sandbox too.

bwrap's ``--new-session`` gives the agent a process group of the sandbox's own; the runner
learns it from bwrap's info and signals it (see core/runners/command/). Each test's agent
carries a marker in its argv so its processes can be found in the host's /proc.
"""

from __future__ import annotations

import asyncio
import sys
import uuid
from pathlib import Path
from typing import Any

import pytest

from agentcron.core.errors import RunPermanentError, StartupError
from agentcron.core.runners.base import CancelToken, RunOutcome
from agentcron.core.runners.containment import Containment, Sandbox, check_sandbox
from tests.e2e.conftest import processes_with
from tests.unit.test_command_runner import marker, none_left, wait_for_file
from tests.unit.test_command_runner import run as run_command

PY = sys.executable
REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def sandbox(tmp_path: Path, bwrap: str) -> Sandbox:
    return Sandbox(bwrap, tmp_path / "data")


@pytest.fixture
def workdir(tmp_path: Path) -> Path:
    return tmp_path / "data" / "tasks" / "alice" / "s1"


async def run(
    script: str,
    workdir: Path,
    sandbox: Sandbox,
    token: CancelToken | None = None,
    **config: Any,
) -> RunOutcome:
    """``sh -c script marker``: ``$0`` is a marker unique to the test."""
    argv = ["sh", "-c", script, marker(workdir)]
    containment = Containment(sandbox=sandbox)
    return await run_command(argv, workdir, token=token, containment=containment, **config)


def states(text: str) -> set[str]:
    """The state letters of the processes carrying ``text`` (T: stopped)."""
    letters = set()
    for pid in processes_with(text):
        try:
            letters.add(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0])
        except OSError:
            continue
    return letters


async def test_a_graceful_agent_finishes_its_cleanup_within_the_grace(
    workdir: Path, sandbox: Sandbox
) -> None:
    script = (
        "trap 'sleep 0.3; echo cleaned > cleanup.txt; exit 0' TERM; echo started > ready.txt; "
        "while true; do sleep 0.05; done"
    )
    token = CancelToken()
    job = asyncio.ensure_future(run(script, workdir, sandbox, token, kill_grace_seconds=5))
    await wait_for_file(workdir / "ready.txt")
    token.cancel("cancel")
    with pytest.raises(RunPermanentError, match=r"cancelled \(cancel\)"):
        await asyncio.wait_for(job, 10)
    assert (workdir / "cleanup.txt").read_text() == "cleaned\n"
    assert await none_left(marker(workdir))


async def test_cancel_stops_the_agent_and_what_it_started(workdir: Path, sandbox: Sandbox) -> None:
    # The second child leaves the agent's process group (and session): it must die anyway,
    # with the sandbox's PID namespace.
    script = 'sleep 60 & setsid sh -c "sleep 61" "$0-escaped" & echo started > ready.txt; wait'
    token = CancelToken()
    job = asyncio.ensure_future(run(script, workdir, sandbox, token))
    await wait_for_file(workdir / "ready.txt")
    for _ in range(100):
        if processes_with(f"{marker(workdir)}-escaped"):
            break
        await asyncio.sleep(0.02)
    assert processes_with(f"{marker(workdir)}-escaped")
    token.cancel("cancel")
    with pytest.raises(RunPermanentError, match=r"cancelled \(cancel\)"):
        await asyncio.wait_for(job, 10)
    assert await none_left(marker(workdir))


async def test_suspend_freezes_the_sandboxed_agent_and_resume_thaws_it(
    workdir: Path, sandbox: Sandbox
) -> None:
    script = (
        "i=0; while true; do i=$((i+1)); echo $i > count.txt; sleep 0.05; "
        'if [ "$i" -ge 400 ]; then exit 0; fi; done'
    )
    token = CancelToken()
    job = asyncio.ensure_future(run(script, workdir, sandbox, token))
    await wait_for_file(workdir / "count.txt")
    token.suspend()
    await asyncio.sleep(0.3)  # let SIGSTOP land
    frozen_at = (workdir / "count.txt").read_text()
    await asyncio.sleep(0.6)
    assert (workdir / "count.txt").read_text() == frozen_at, "the agent kept running"
    assert "T" in states(marker(workdir))
    token.resume()
    await asyncio.sleep(0.6)
    assert (workdir / "count.txt").read_text() != frozen_at, "the agent was not thawed"
    # A cancel while frozen is at once: the frozen agent is killed, never thawed.
    token.suspend()
    await asyncio.sleep(0.2)
    token.cancel("lease_unconfirmed")
    with pytest.raises(RunPermanentError, match="cancelled"):
        await asyncio.wait_for(job, 10)
    assert await none_left(marker(workdir))


async def test_the_sandboxed_agent_dies_with_the_service(tmp_path: Path, bwrap: str) -> None:
    # --die-with-parent: a service killed with SIGKILL does not leave its agents running
    # (unconfined, their process group would outlive it).
    data_dir = tmp_path / "data"
    workdir = data_dir / "tasks" / "alice" / "s1"
    tag = f"agentcron-orphan-test-{uuid.uuid4().hex[:8]}"
    service = (
        "import asyncio\n"
        "from pathlib import Path\n"
        "from agentcron.core.runners import build_runner, validate_runner\n"
        "from agentcron.core.runners.base import CancelToken\n"
        "from agentcron.core.runners.containment import Containment, Sandbox\n"
        "from tests.factories import run_request\n"
        f"sandbox = Sandbox({bwrap!r}, Path({str(data_dir)!r}))\n"
        f"req = run_request(workdir=Path({str(workdir)!r}), timeout_seconds=60,\n"
        "    containment=Containment(sandbox=sandbox))\n"
        "runner = build_runner(validate_runner({'type': 'command', 'argv': ['sh', '-c', "
        f"'echo up > ready.txt; sleep 60', {tag!r}]}}))\n"
        "asyncio.run(runner.run(req, CancelToken()))\n"
    )
    proc = await asyncio.create_subprocess_exec(PY, "-c", service, cwd=REPO)
    try:
        await wait_for_file(workdir / "ready.txt", within=30)
        assert processes_with(tag)
    finally:
        proc.kill()
        await proc.wait()
    assert await none_left(tag)


def test_check_refuses_a_missing_binary_with_the_remedy(tmp_path: Path) -> None:
    containment = Containment(sandbox=Sandbox("/nonexistent/bwrap", tmp_path))
    with pytest.raises(StartupError) as caught:
        check_sandbox(containment)
    message = caught.value.message
    assert "\n" not in message
    assert "apt-get install bubblewrap" in message and "AGENTCRON_SANDBOX=none" in message


def test_check_refuses_a_binary_that_cannot_sandbox(tmp_path: Path) -> None:
    fake = tmp_path / "bwrap"
    fake.write_text("#!/bin/sh\necho 'bwrap: No permissions to create new namespace' >&2\nexit 1\n")
    fake.chmod(0o755)
    with pytest.raises(StartupError, match="cannot make a sandbox here .*No permissions"):
        check_sandbox(Containment(sandbox=Sandbox(str(fake), tmp_path)))


def test_check_accepts_a_working_bwrap(tmp_path: Path, bwrap: str) -> None:
    check_sandbox(Containment(sandbox=Sandbox(bwrap, tmp_path, network="none")))
