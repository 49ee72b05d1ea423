"""``CommandRunner``: one attempt of a ``command`` runner, from its environment to its outcome.

It owns the attempt's environment (built from nothing, with the run's metadata and the
resolved secrets), starting the process plainly or inside the operator's sandbox, feeding the
prompt, stopping the process on a timeout or cancel, and reading the exit status as the
contract in ``core.runners.command`` says.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import signal
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from agentcron.core.errors import RunPermanentError, TargetUnavailable
from agentcron.core.runners.base import (
    AttemptStopped,
    CancelToken,
    RunOutcome,
    RunRequest,
    TransientRunError,
)
from agentcron.core.runners.command.process import (
    Group,
    Tail,
    exit_status,
    follow_suspension,
    sandbox_pid,
    signal_group,
)
from agentcron.core.runners.command.reaper import GO, REAPER, gated
from agentcron.core.runners.containment import Sandbox, agent_environment, environment_args

EX_TEMPFAIL = 75
OUTPUT_LIMIT = 64 * 1024
STDERR_LIMIT = 8 * 1024
STDERR_LINES = 20
# bwrap writes its info before it starts the agent, within milliseconds.
SANDBOX_INFO_SECONDS = 5.0


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


class CommandRunner:
    """Runs ``argv`` once per attempt; see ``core.runners.command`` for the exit-code contract."""

    suspendable = True  # SIGSTOP and SIGCONT of the process group

    def __init__(
        self, argv: list[str], env: Mapping[str, str | Mapping[str, str]], grace: float
    ) -> None:
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
        # TRACEPARENT, TRACESTATE: the attempt's trace context, as OpenTelemetry's SDKs read
        # it from the environment (the run's config may still set its own).
        env.update({name.upper(): value for name, value in request.trace.items()})
        # A value {"secret": NAME} is the owner's stored secret, resolved for this attempt.
        env.update(
            {
                k: v if isinstance(v, str) else request.secrets[v["secret"]]
                for k, v in self.env.items()
            }
        )
        return env

    async def run(self, request: RunRequest, cancel: CancelToken) -> RunOutcome:
        request.workdir.mkdir(parents=True, exist_ok=True)
        # Resolved: a task directory moved to the per-owner layout is reached through a
        # symbolic link, and a sandbox binds the real directory.
        workdir = request.workdir.resolve()
        sandbox = request.containment.sandbox
        # A sandbox has a /tmp of its own; unconfined, a fresh directory per attempt keeps
        # concurrent agents' temporary files apart (not private: same user).
        scratch = None if sandbox else tempfile.mkdtemp(prefix=f"agentcron-{request.run_id}-")
        try:
            env = self._environment(request, workdir, scratch or "/tmp")
            return await self._run(request.prompt, workdir, env, sandbox, cancel)
        finally:
            if scratch is not None:
                await asyncio.to_thread(shutil.rmtree, scratch, True)

    async def _spawn(
        self, workdir: Path, env: dict[str, str], sandbox: Sandbox | None
    ) -> tuple[asyncio.subprocess.Process, int | None]:
        """The started process, and in a sandbox the read end of bwrap's info pipe.

        Started through the reaper's gate (``core.runners.command.reaper``), so a missing
        command is looked for first, as ``execvp`` would, rather than seen as the shell's 127.
        """
        pipes: dict[str, Any] = {
            "stdin": asyncio.subprocess.PIPE,
            "stdout": asyncio.subprocess.PIPE,
            "stderr": asyncio.subprocess.PIPE,
            "start_new_session": True,
        }
        try:
            self._check_executable(env.get("PATH", ""), workdir)
            if sandbox is None:
                proc = await asyncio.create_subprocess_exec(
                    *gated(self.argv, env), cwd=workdir, env=env, **pipes
                )
                return proc, None
            info_read, info_write = os.pipe()
            env_fd = os.memfd_create("agentcron-agent-env")
            try:
                data = memoryview(environment_args(env))
                while data:
                    data = data[os.write(env_fd, data) :]
                os.lseek(env_fd, 0, os.SEEK_SET)
                argv = sandbox.argv(self.argv, workdir, info_fd=info_write, env_fd=env_fd)
                # bwrap itself starts with an empty environment: the agent's (read from
                # env_fd) must not apply to bwrap, which runs outside the sandbox.
                proc = await asyncio.create_subprocess_exec(
                    *gated(argv, {}), cwd=workdir, env={}, pass_fds=(info_write, env_fd), **pipes
                )
            except BaseException:
                os.close(info_read)
                raise
            finally:
                os.close(info_write)
                os.close(env_fd)
            return proc, info_read
        except (FileNotFoundError, PermissionError, NotADirectoryError) as exc:
            # The command is gone or not executable: every later run would fail the same way.
            what = self.argv[0] if sandbox is None else sandbox.binary
            raise TargetUnavailable(f"cannot start {what!r}: {exc.strerror}") from exc

    def _check_executable(self, path: str, workdir: Path) -> None:
        """``TargetUnavailable`` unless ``argv[0]`` resolves to an executable, as the gate's
        (or the sandbox's) exec will look for it: else the shell's exit 127 (or bwrap's exit 1)
        would hide a command that is gone."""
        program = self.argv[0]
        if os.sep in program:
            found = (workdir / program).is_file() and os.access(workdir / program, os.X_OK)
        else:
            found = shutil.which(program, path=path) is not None
        if not found:
            raise TargetUnavailable(
                f"cannot start {program!r}: No such file or directory, or not executable"
            )

    async def _run(
        self,
        prompt: str,
        workdir: Path,
        env: dict[str, str],
        sandbox: Sandbox | None,
        cancel: CancelToken,
    ) -> RunOutcome:
        proc, info_fd = await self._spawn(workdir, env, sandbox)
        group = Group(proc.pid)
        stdout, stderr = Tail(OUTPUT_LIMIT), Tail(STDERR_LIMIT)
        assert proc.stdin and proc.stdout and proc.stderr
        readers = [
            asyncio.ensure_future(stdout.drain(proc.stdout)),
            asyncio.ensure_future(stderr.drain(proc.stderr)),
        ]
        waiter = asyncio.ensure_future(exit_status(proc))
        cancelled = asyncio.ensure_future(cancel.wait())
        feeder: asyncio.Future[None] | None = None
        learner: asyncio.Future[int | None] | None = None
        freezer: asyncio.Future[None] | None = None
        try:
            # Registered before GO opens the gate: from now on the service's death, however
            # it comes, kills the group (a sandbox dies with bwrap, --die-with-parent).
            REAPER.register(proc.pid)
            feeder = asyncio.ensure_future(self._feed(proc.stdin, GO + prompt.encode()))
            if info_fd is not None:
                # Known before anything is signalled, so a SIGTERM reaches the agent, not bwrap.
                learner = asyncio.ensure_future(sandbox_pid(info_fd))
                await asyncio.wait(
                    {learner, waiter},
                    timeout=SANDBOX_INFO_SECONDS,
                    return_when=asyncio.FIRST_COMPLETED,
                )
                if learner.done():
                    group.sandbox = learner.result()
            freezer = asyncio.ensure_future(follow_suspension(group, cancel))
            await asyncio.wait({waiter, cancelled}, return_when=asyncio.FIRST_COMPLETED)
            if not waiter.done():
                await self._terminate(group, waiter, cancel)
            # The leader is gone; anything it left in its group must not outlive the run
            # (and must not keep our pipes open). A sandbox's processes died with it.
            signal_group(proc.pid, signal.SIGKILL)
            await asyncio.wait(readers, timeout=2.0)
            with contextlib.suppress(TimeoutError):  # let the transport see its pipes close
                async with asyncio.timeout(2.0):  # not wait_for: it can swallow a cancel (3.11)
                    await proc.wait()
        finally:
            for fut in (*readers, feeder, waiter, cancelled, learner, freezer):
                if fut is not None:
                    fut.cancel()
            if info_fd is not None:
                os.close(info_fd)
            if proc.returncode is None:
                group.signal(signal.SIGKILL)
                with contextlib.suppress(ProcessLookupError):
                    proc.kill()
                await proc.wait()
            # However the attempt ended, nothing of its group may outlive the registration.
            group.signal(signal.SIGKILL)
            REAPER.unregister(proc.pid)

        code = proc.returncode
        if cancel.cancelled:
            raise AttemptStopped(
                f"cancelled ({cancel.reason}); the process was stopped", stdout.text() or None
            )
        if sandbox is not None and code is not None and code - 128 in signal.valid_signals():
            code = 128 - code  # bwrap's 128 + n: the agent died of signal n
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
    async def _feed(stdin: asyncio.StreamWriter, data: bytes) -> None:
        # An agent that never reads stdin must not fail the run with a broken pipe.
        with contextlib.suppress(BrokenPipeError, ConnectionResetError):
            stdin.write(data)
            await stdin.drain()
            stdin.close()
            await stdin.wait_closed()

    async def _terminate(
        self, group: Group, waiter: asyncio.Future[int], cancel: CancelToken
    ) -> None:
        # SIGTERM and a grace period, unless the engine is losing the run's lease: then another
        # replica may start the run any moment, and this attempt must be gone first. A frozen
        # group is never thawed to wind down (the cancel is then at once).
        if not cancel.at_once:
            group.signal(signal.SIGTERM)
            hurry = asyncio.ensure_future(cancel.wait_at_once())
            waits: set[asyncio.Future[Any]] = {waiter, hurry}
            try:
                await asyncio.wait(waits, timeout=self.grace, return_when=asyncio.FIRST_COMPLETED)
            finally:
                hurry.cancel()
        if not waiter.done():
            group.signal(signal.SIGKILL)
            await waiter
