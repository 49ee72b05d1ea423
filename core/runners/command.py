"""The ``command`` runner: an argv run in the task's working directory, prompt on stdin.

Exit 0 succeeds; 75 (EX_TEMPFAIL) is transient; any other exit code is permanent; death by a
signal the engine did not send is transient. The child gets its own process group so a timeout
or cancel reaches every process it started (SIGTERM, then SIGKILL after a grace period; SIGKILL
at once when the engine is losing the run's lease, ``CancelToken.at_once``). While the engine
cannot confirm the run's lease the group is frozen with SIGSTOP, and thawed with SIGCONT once
it can (``CancelToken.suspend``/``resume``).

The process never sees the service's environment: it gets ``agent_environment`` (PATH, HOME =
its working directory, locale, TZ, a TMPDIR of its own, the variables the operator passes
through with ``AGENTCRON_AGENT_ENV``), the run's metadata (``run_metadata``) and the runner
config's ``env``.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import shutil
import signal
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from core.errors import InvalidSchedule, RunPermanentError, TargetUnavailable
from core.runners.base import CancelToken, Runner, RunOutcome, RunRequest, TransientRunError
from core.runners.containment import agent_environment

EX_TEMPFAIL = 75
OUTPUT_LIMIT = 64 * 1024
STDERR_LIMIT = 8 * 1024
STDERR_LINES = 20
KILL_GRACE_SECONDS = 5.0
FIELDS = frozenset({"type", "argv", "env", "kill_grace_seconds"})
EXIT_POLL_SECONDS = 0.002
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


class _Tail:
    """Keeps the last ``limit`` bytes of a stream without holding all of it."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.data = bytearray()

    async def drain(self, stream: asyncio.StreamReader) -> None:
        while chunk := await stream.read(65536):
            self.data += chunk
            if len(self.data) > self.limit:
                del self.data[: len(self.data) - self.limit]

    def text(self) -> str:
        return self.data.decode("utf-8", errors="replace")


def _signal_group(pid: int, sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, sig)


async def _follow_suspension(pid: int, cancel: CancelToken) -> None:
    """SIGSTOP the group while the engine suspends the attempt, SIGCONT when it resumes it; a
    cancelled attempt is never thawed (it is killed frozen)."""
    while not cancel.cancelled:
        await cancel.wait_suspended()
        _signal_group(pid, signal.SIGSTOP)
        await cancel.wait_resumed()
        if cancel.cancelled:
            return
        _signal_group(pid, signal.SIGCONT)


def run_metadata(request: RunRequest) -> dict[str, str]:
    """The run's identity in an agent's environment (``AGENTCRON_*``)."""
    return {
        "AGENTCRON_RUN_ID": str(request.run_id),
        "AGENTCRON_SCHEDULE_ID": str(request.schedule_id),
        "AGENTCRON_TASK_ID": str(request.task_id),
        "AGENTCRON_ATTEMPT": str(request.attempt),
        "AGENTCRON_TRIGGER": request.trigger,
        "AGENTCRON_DUE_AT": request.due_at.isoformat() if request.due_at else "",
        "AGENTCRON_INSTANCE_ID": request.instance_id,
    }


async def _exited(proc: asyncio.subprocess.Process) -> int:
    """The leader's exit status as soon as it exits. ``Process.wait()`` also waits for the
    pipes to close, which a background child holding stdout can delay for as long as it runs.

    asyncio has no public event for "exited, pipes still open", so on Linux we wait for the
    process's pidfd to become readable (it does at exit) and poll only where there is none.
    """
    if proc.returncode is None:
        try:
            pidfd = os.pidfd_open(proc.pid)
        except (AttributeError, OSError):  # no pidfd here, or the child is already reaped
            pidfd = None
        if pidfd is not None:
            loop = asyncio.get_running_loop()
            exited: asyncio.Future[None] = loop.create_future()

            def on_exit() -> None:
                if not exited.done():
                    exited.set_result(None)

            loop.add_reader(pidfd, on_exit)
            try:
                await exited
            finally:
                loop.remove_reader(pidfd)
                os.close(pidfd)
    # asyncio's child watcher records the status a moment after the exit itself.
    while proc.returncode is None:  # noqa: ASYNC110
        await asyncio.sleep(EXIT_POLL_SECONDS)
    return proc.returncode


class CommandRunner:
    """Runs ``argv`` once per attempt; see the module docstring for the exit-code contract."""

    suspendable = True  # SIGSTOP and SIGCONT of the process group

    def __init__(self, argv: list[str], env: Mapping[str, str], grace: float) -> None:
        self.argv = argv
        self.env = dict(env)
        self.grace = grace

    def _environment(self, request: RunRequest, home: Path, tmpdir: str) -> dict[str, str]:
        # Built from nothing, never copied: the service's own environment holds its database
        # URL and API keys, and the agent may be any owner's code.
        env = agent_environment(
            os.environ, home=home, tmpdir=tmpdir, passthrough=request.containment.agent_env
        )
        env.update(run_metadata(request))
        env.update(self.env)
        return env

    async def run(self, request: RunRequest, cancel: CancelToken) -> RunOutcome:
        request.workdir.mkdir(parents=True, exist_ok=True)
        # Resolved: a task directory moved to the per-owner layout is reached through a
        # symbolic link.
        workdir = request.workdir.resolve()
        # A fresh directory per attempt keeps concurrent agents' temporary files apart (not
        # private: same user).
        scratch = tempfile.mkdtemp(prefix=f"agentcron-{request.run_id}-")
        try:
            env = self._environment(request, workdir, scratch)
            return await self._run(request.prompt, workdir, env, cancel)
        finally:
            await asyncio.to_thread(shutil.rmtree, scratch, True)

    async def _run(
        self, prompt: str, workdir: Path, env: dict[str, str], cancel: CancelToken
    ) -> RunOutcome:
        try:
            proc = await asyncio.create_subprocess_exec(
                *self.argv,
                cwd=workdir,
                env=env,
                stdin=asyncio.subprocess.PIPE,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE,
                start_new_session=True,
            )
        except (FileNotFoundError, PermissionError, NotADirectoryError) as exc:
            # The command is gone or not executable: every later run would fail the same way.
            raise TargetUnavailable(f"cannot start {self.argv[0]!r}: {exc.strerror}") from exc

        stdout, stderr = _Tail(OUTPUT_LIMIT), _Tail(STDERR_LIMIT)
        assert proc.stdin and proc.stdout and proc.stderr
        readers = [
            asyncio.ensure_future(stdout.drain(proc.stdout)),
            asyncio.ensure_future(stderr.drain(proc.stderr)),
        ]
        feeder = asyncio.ensure_future(self._feed(proc.stdin, prompt))
        waiter = asyncio.ensure_future(_exited(proc))
        cancelled = asyncio.ensure_future(cancel.wait())
        freezer = asyncio.ensure_future(_follow_suspension(proc.pid, cancel))
        try:
            await asyncio.wait({waiter, cancelled}, return_when=asyncio.FIRST_COMPLETED)
            if not waiter.done():
                await self._terminate(proc.pid, waiter, cancel)
            # The leader is gone; anything it left in its group must not outlive the run
            # (and must not keep our pipes open).
            _signal_group(proc.pid, signal.SIGKILL)
            await asyncio.wait(readers, timeout=2.0)
            with contextlib.suppress(TimeoutError):  # let the transport see its pipes close
                await asyncio.wait_for(proc.wait(), 2.0)
        finally:
            for fut in (*readers, feeder, waiter, cancelled, freezer):
                fut.cancel()
            if proc.returncode is None:
                _signal_group(proc.pid, signal.SIGKILL)
                with contextlib.suppress(ProcessLookupError):
                    proc.kill()
                await proc.wait()

        code = proc.returncode
        if cancel.cancelled:
            raise RunPermanentError(f"cancelled ({cancel.reason}); the process was stopped")
        if code == 0:
            return RunOutcome(output=stdout.text())
        tail = "\n".join(stderr.text().splitlines()[-STDERR_LINES:])
        detail = f"\n{tail}" if tail else ""
        if code == EX_TEMPFAIL:
            raise TransientRunError(f"exit code {code} (temporary failure){detail}")
        if code is not None and code < 0:
            name = signal.Signals(-code).name if -code in signal.valid_signals() else str(-code)
            raise TransientRunError(f"killed by signal {name}{detail}")
        raise RunPermanentError(f"exit code {code}{detail}")

    @staticmethod
    async def _feed(stdin: asyncio.StreamWriter, prompt: str) -> None:
        # An agent that never reads stdin must not fail the run with a broken pipe.
        with contextlib.suppress(BrokenPipeError, ConnectionResetError):
            stdin.write(prompt.encode())
            await stdin.drain()
            stdin.close()
            await stdin.wait_closed()

    async def _terminate(self, pid: int, waiter: asyncio.Future[int], cancel: CancelToken) -> None:
        # SIGTERM and a grace period, unless the engine is losing the run's lease: then another
        # replica may start the run any moment, and this attempt must be gone first. A frozen
        # group is never thawed to wind down (the cancel is then at once).
        if not cancel.at_once:
            _signal_group(pid, signal.SIGTERM)
            hurry = asyncio.ensure_future(cancel.wait_at_once())
            waits: set[asyncio.Future[Any]] = {waiter, hurry}
            try:
                await asyncio.wait(waits, timeout=self.grace, return_when=asyncio.FIRST_COMPLETED)
            finally:
                hurry.cancel()
        if not waiter.done():
            _signal_group(pid, signal.SIGKILL)
            await waiter


class CommandRunnerType:
    """``{"type": "command", "argv": [str, ...], "env": {str: str}?}``."""

    name = "command"

    def validate(self, config: Mapping[str, Any]) -> dict[str, Any]:
        unknown = set(config) - FIELDS
        if unknown:
            field = sorted(unknown)[0]
            raise InvalidSchedule(f"unknown field {field!r}", field=f"runner.{field}")
        argv = config.get("argv")
        if not isinstance(argv, list) or not argv:
            raise InvalidSchedule("argv must be a non-empty list of strings", field="runner.argv")
        if len(argv) > 1000:
            raise InvalidSchedule("argv has more than 1000 items", field="runner.argv")
        for index, item in enumerate(argv):
            if not isinstance(item, str) or (index == 0 and not item):
                raise InvalidSchedule("must be a non-empty string", field=f"runner.argv.{index}")
        env = config.get("env", {})
        if not isinstance(env, dict):
            raise InvalidSchedule("env must be an object of strings", field="runner.env")
        for key, value in env.items():
            if not _ENV_NAME.match(key) or not isinstance(value, str):
                raise InvalidSchedule(
                    "env names must be identifiers and values strings", field=f"runner.env.{key}"
                )
        grace = config.get("kill_grace_seconds", KILL_GRACE_SECONDS)
        if isinstance(grace, bool) or not isinstance(grace, int | float) or not 0 < grace <= 300:
            raise InvalidSchedule(
                "kill_grace_seconds must be a number in (0, 300]",
                field="runner.kill_grace_seconds",
            )
        normalised: dict[str, Any] = {"type": self.name, "argv": list(argv)}
        if env:
            normalised["env"] = dict(env)
        if "kill_grace_seconds" in config:
            normalised["kill_grace_seconds"] = grace
        return normalised

    def build(self, config: Mapping[str, Any]) -> Runner:
        return CommandRunner(
            list(config["argv"]),
            config.get("env", {}),
            float(config.get("kill_grace_seconds", KILL_GRACE_SECONDS)),
        )
