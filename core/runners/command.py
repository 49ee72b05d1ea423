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
config's ``env``. With the operator's sandbox (``RunRequest.containment.sandbox``) it runs
inside bubblewrap (``core.runners.containment.Sandbox``). bwrap's ``--new-session`` puts the
agent in a process group of the sandbox's own, which the runner learns from bwrap's info
(``child-pid``): SIGSTOP, SIGCONT and SIGKILL go to both groups, SIGTERM only to the agent's,
since bwrap would die of it and take the agent with it at once, without its grace period.
A sandboxed agent killed by a signal makes bwrap exit with 128 + the signal's number, which is
read as death by that signal.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import re
import shutil
import signal
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from core import policy
from core.errors import InvalidSchedule, RunPermanentError, TargetUnavailable
from core.runners.base import CancelToken, Runner, RunOutcome, RunRequest, TransientRunError
from core.runners.containment import Sandbox, agent_environment, environment_args
from core.secrets import check_reference

EX_TEMPFAIL = 75
OUTPUT_LIMIT = 64 * 1024
STDERR_LIMIT = 8 * 1024
STDERR_LINES = 20
KILL_GRACE_SECONDS = 5.0
FIELDS = frozenset({"type", "argv", "agent", "params", "env", "kill_grace_seconds"})
EXIT_POLL_SECONDS = 0.002
# bwrap writes its info before it starts the agent, within milliseconds.
SANDBOX_INFO_SECONDS = 5.0
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


class _Group:
    """Where a signal to the agent goes: the leader's process group and, in a sandbox, the
    sandbox's own group once bwrap has said which it is (see the module docstring)."""

    def __init__(self, leader: int) -> None:
        self.leader = leader
        self.sandbox: int | None = None

    def signal(self, sig: signal.Signals) -> None:
        if self.sandbox is not None:
            _signal_group(self.sandbox, sig)
            if sig == signal.SIGTERM:
                return
        _signal_group(self.leader, sig)


async def _follow_suspension(group: _Group, cancel: CancelToken) -> None:
    """SIGSTOP the group while the engine suspends the attempt, SIGCONT when it resumes it; a
    cancelled attempt is never thawed (it is killed frozen)."""
    while not cancel.cancelled:
        await cancel.wait_suspended()
        group.signal(signal.SIGSTOP)
        await cancel.wait_resumed()
        if cancel.cancelled:
            return
        group.signal(signal.SIGCONT)


async def _sandbox_pid(fd: int) -> int | None:
    """The sandbox's init (``child-pid``) from bwrap's ``--info-fd`` JSON, read to its end;
    None if bwrap closed it without one (it failed before making the sandbox)."""
    loop = asyncio.get_running_loop()
    os.set_blocking(fd, False)
    data = bytearray()
    while True:
        try:
            chunk = os.read(fd, 4096)
        except BlockingIOError:
            readable: asyncio.Future[None] = loop.create_future()

            def ready(future: asyncio.Future[None] = readable) -> None:
                if not future.done():
                    future.set_result(None)

            loop.add_reader(fd, ready)
            try:
                await readable
            finally:
                loop.remove_reader(fd)
            continue
        if not chunk:
            break
        data += chunk
    try:
        return int(json.loads(data)["child-pid"])
    except (ValueError, KeyError, TypeError):
        return None


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
        """The started process, and in a sandbox the read end of bwrap's info pipe."""
        pipes: dict[str, Any] = {
            "stdin": asyncio.subprocess.PIPE,
            "stdout": asyncio.subprocess.PIPE,
            "stderr": asyncio.subprocess.PIPE,
            "start_new_session": True,
        }
        try:
            if sandbox is None:
                proc = await asyncio.create_subprocess_exec(
                    *self.argv, cwd=workdir, env=env, **pipes
                )
                return proc, None
            self._check_executable(env.get("PATH", ""), workdir)
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
                    *argv, cwd=workdir, env={}, pass_fds=(info_write, env_fd), **pipes
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
        """``TargetUnavailable`` unless ``argv[0]`` resolves to an executable, as the sandbox's
        execvp will look for it: else bwrap's exit 1 would hide a command that is gone."""
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
        group = _Group(proc.pid)
        stdout, stderr = _Tail(OUTPUT_LIMIT), _Tail(STDERR_LIMIT)
        assert proc.stdin and proc.stdout and proc.stderr
        readers = [
            asyncio.ensure_future(stdout.drain(proc.stdout)),
            asyncio.ensure_future(stderr.drain(proc.stderr)),
        ]
        feeder = asyncio.ensure_future(self._feed(proc.stdin, prompt))
        waiter = asyncio.ensure_future(_exited(proc))
        cancelled = asyncio.ensure_future(cancel.wait())
        learner: asyncio.Future[int | None] | None = None
        freezer: asyncio.Future[None] | None = None
        try:
            if info_fd is not None:
                # Known before anything is signalled, so a SIGTERM reaches the agent, not bwrap.
                learner = asyncio.ensure_future(_sandbox_pid(info_fd))
                await asyncio.wait(
                    {learner, waiter},
                    timeout=SANDBOX_INFO_SECONDS,
                    return_when=asyncio.FIRST_COMPLETED,
                )
                if learner.done():
                    group.sandbox = learner.result()
            freezer = asyncio.ensure_future(_follow_suspension(group, cancel))
            await asyncio.wait({waiter, cancelled}, return_when=asyncio.FIRST_COMPLETED)
            if not waiter.done():
                await self._terminate(group, waiter, cancel)
            # The leader is gone; anything it left in its group must not outlive the run
            # (and must not keep our pipes open). A sandbox's processes died with it.
            _signal_group(proc.pid, signal.SIGKILL)
            await asyncio.wait(readers, timeout=2.0)
            with contextlib.suppress(TimeoutError):  # let the transport see its pipes close
                await asyncio.wait_for(proc.wait(), 2.0)
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

        code = proc.returncode
        if cancel.cancelled:
            raise RunPermanentError(f"cancelled ({cancel.reason}); the process was stopped")
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
    async def _feed(stdin: asyncio.StreamWriter, prompt: str) -> None:
        # An agent that never reads stdin must not fail the run with a broken pipe.
        with contextlib.suppress(BrokenPipeError, ConnectionResetError):
            stdin.write(prompt.encode())
            await stdin.drain()
            stdin.close()
            await stdin.wait_closed()

    async def _terminate(
        self, group: _Group, waiter: asyncio.Future[int], cancel: CancelToken
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


class CommandRunnerType:
    """``{"type": "command", "argv": [str, ...], "env": {str: str | {"secret": NAME}}?}``, or
    an agent the operator declared in place of ``argv``: ``{"type": "command", "agent": NAME,
    "params": {str: str}?, "env": ...}`` (``core.policy``; its argv is the operator's template,
    filled with ``params``, and resolved again at each attempt)."""

    name = "command"

    def validate(self, config: Mapping[str, Any]) -> dict[str, Any]:
        unknown = set(config) - FIELDS
        if unknown:
            field = sorted(unknown)[0]
            raise InvalidSchedule(f"unknown field {field!r}", field=f"runner.{field}")
        normalised: dict[str, Any] = {"type": self.name}
        if "agent" in config:
            normalised.update(_agent_form(config))
        else:
            if "params" in config:
                raise InvalidSchedule("params go with an agent", field="runner.params")
            normalised["argv"] = _checked_argv(config.get("argv"))
        env = config.get("env", {})
        if not isinstance(env, dict):
            raise InvalidSchedule("env must be an object of strings", field="runner.env")
        normalised_env: dict[str, str | dict[str, str]] = {}
        for key, value in env.items():
            if not _ENV_NAME.match(key):
                raise InvalidSchedule(
                    "env names must be identifiers and values strings", field=f"runner.env.{key}"
                )
            if isinstance(value, str):
                normalised_env[key] = value
            elif isinstance(value, dict):
                # The owner's stored secret, resolved by the engine at each attempt.
                normalised_env[key] = check_reference(value, f"runner.env.{key}")
            else:
                raise InvalidSchedule(
                    'env values are strings or secret references {"secret": "NAME"}',
                    field=f"runner.env.{key}",
                )
        grace = config.get("kill_grace_seconds", KILL_GRACE_SECONDS)
        if isinstance(grace, bool) or not isinstance(grace, int | float) or not 0 < grace <= 300:
            raise InvalidSchedule(
                "kill_grace_seconds must be a number in (0, 300]",
                field="runner.kill_grace_seconds",
            )
        if env:
            normalised["env"] = normalised_env
        if "kill_grace_seconds" in config:
            normalised["kill_grace_seconds"] = grace
        return normalised

    def build(self, config: Mapping[str, Any]) -> Runner:
        argv: list[str] = list(config.get("argv", ()))
        env = dict(config.get("env", {}))
        if "agent" in config:
            agent = policy.current().agent(str(config["agent"]))
            argv = agent.command(config.get("params", {}))
            env = {**agent.env, **env}
        return CommandRunner(
            list(argv), env, float(config.get("kill_grace_seconds", KILL_GRACE_SECONDS))
        )


def _checked_argv(argv: object) -> list[str]:
    if not isinstance(argv, list) or not argv:
        raise InvalidSchedule("argv must be a non-empty list of strings", field="runner.argv")
    if len(argv) > 1000:
        raise InvalidSchedule("argv has more than 1000 items", field="runner.argv")
    for index, item in enumerate(argv):
        if not isinstance(item, str) or (index == 0 and not item):
            raise InvalidSchedule("must be a non-empty string", field=f"runner.argv.{index}")
    return list(argv)


def _agent_form(config: Mapping[str, Any]) -> dict[str, Any]:
    """``agent`` and ``params`` of a declared agent, checked against its declaration."""
    if "argv" in config:
        raise InvalidSchedule("give either argv or agent, not both", field="runner.argv")
    name = config["agent"]
    agents = policy.current().agents
    if not isinstance(name, str) or name not in agents:
        declared = ", ".join(sorted(agents)) or "none (AGENTCRON_AGENTS_FILE)"
        raise InvalidSchedule(
            f"no agent {name!r} is declared; declared: {declared}", "runner.agent"
        )
    params = agents[name].check_params(config.get("params"), "runner.params")
    return {"agent": name, **({"params": params} if params else {})}
