"""Where agent processes run: the environment they start with, and the optional sandbox.

An agent is another owner's code from the service's point of view, so nothing of the service's
own state reaches it by default: its environment is built from nothing
(``agent_environment``), never copied from the service's (which holds the database URL and
API keys), and with ``AGENTCRON_SANDBOX=bwrap`` every ``command`` runs inside bubblewrap
(``Sandbox``), which hides the data directory but for the task's own working directory, the
SQLite database, PostgreSQL's Unix sockets and the service's processes.

This module knows nothing of runs or schedules: ``Containment`` is the operator's choice,
made once at start (``containment_from_settings``) and handed to every attempt on
``RunRequest.containment``.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Literal

from agentcron.core.errors import StartupError
from agentcron.core.storage.database import sqlite_file

if TYPE_CHECKING:
    from agentcron.core.config import Settings

# What an agent gets when the service itself has no PATH (a bare systemd unit, say).
DEFAULT_PATH = "/usr/local/bin:/usr/bin:/bin"
DEFAULT_LANG = "C.UTF-8"
# PostgreSQL's Unix sockets: with trust or peer authentication, reaching one is logging in.
POSTGRES_SOCKET_DIRS = ("/run/postgresql", "/var/run/postgresql")
# SQLite keeps a database's recent writes beside it; the engine's flock is one more file.
SQLITE_SIBLINGS = ("-wal", "-shm", "-journal", ".engine.lock")
SANDBOX_PROBE_SECONDS = 10.0

Network = Literal["host", "none"]


def agent_environment(
    service_env: Mapping[str, str],
    *,
    home: Path,
    tmpdir: str,
    passthrough: Iterable[str] = (),
) -> dict[str, str]:
    """The environment every agent process starts from, before its run's metadata and its
    runner config's ``env`` are added.

    Only ``PATH`` (the service's, or ``DEFAULT_PATH``), ``HOME``, ``LANG`` (the service's, or
    ``C.UTF-8``), ``LC_ALL`` and ``TZ`` (when the service has them), ``TMPDIR``, and the
    variables the operator names in ``passthrough`` (``AGENTCRON_AGENT_ENV``; one the service
    does not have is left out). Nothing else of ``service_env`` is read.
    """
    env = {
        "PATH": service_env.get("PATH") or DEFAULT_PATH,
        # The task's directory, not the service user's home: that one holds the service's own
        # configuration (~/.pgpass, cloud credentials, shell history), and tools write their
        # caches and dotfiles under $HOME, which should land with the task's other files.
        "HOME": str(home),
        "LANG": service_env.get("LANG") or DEFAULT_LANG,
        "TMPDIR": tmpdir,
    }
    for name in ("LC_ALL", "TZ"):
        if service_env.get(name):
            env[name] = service_env[name]
    for name in passthrough:
        if name in service_env:
            env[name] = service_env[name]
    return env


@dataclass(frozen=True)
class Sandbox:
    """bubblewrap (``bwrap``) around every ``command`` agent.

    Inside: the whole filesystem read-only; ``data_dir`` replaced by an empty tmpfs but for
    the task's working directory, bound read-write; ``hidden`` directories replaced by empty
    tmpfs and ``hidden`` files by an empty read-only file (the SQLite database when it lives
    outside the data directory, the operator's ``AGENTCRON_SANDBOX_HIDE``); PostgreSQL's
    socket directories empty; a private ``/tmp``; a minimal ``/dev``; its own PID namespace
    with its own ``/proc`` (no other process, the service included, can be seen or
    signalled); a session of its own; killed with the service (``--die-with-parent``).
    ``network="none"`` adds a network namespace with nothing but its own loopback.
    """

    binary: str
    data_dir: Path
    network: Network = "host"
    hidden: tuple[Path, ...] = ()

    def argv(
        self, command: Sequence[str], workdir: Path, *, info_fd: int, env_fd: int
    ) -> list[str]:
        """bwrap's command line running ``command`` in ``workdir``.

        bwrap writes its JSON info (``child-pid``: the sandbox's init, leader of the
        sandbox's process group) to ``info_fd``, and reads the agent's environment from
        ``env_fd`` (``environment_args``): on the command line it would be readable by every
        user of the host in ``/proc/<pid>/cmdline``, and in bwrap's own environment it would
        apply to bwrap itself (an ``LD_PRELOAD`` from a runner config would then run outside
        the sandbox).
        """
        args = [
            self.binary,
            "--ro-bind", "/", "/",
            "--dev", "/dev",
            "--proc", "/proc",
            "--tmpfs", "/tmp",
        ]  # fmt: skip
        covered: set[str] = {"/tmp"}
        for directory in POSTGRES_SOCKET_DIRS:
            real = os.path.realpath(directory)
            if real not in covered and os.path.isdir(real):
                covered.add(real)
                args += ["--tmpfs", real]
        for path in (self.data_dir, *self.hidden):
            real = os.path.realpath(path)
            if real in covered:
                continue
            if os.path.isdir(real):
                covered.add(real)
                args += ["--tmpfs", real]
            elif os.path.exists(real):
                args += ["--ro-bind", "/dev/null", real]
        where = os.path.realpath(workdir)
        args += ["--bind", where, where, "--chdir", where]
        args += ["--unshare-pid", "--die-with-parent", "--new-session"]
        if self.network == "none":
            args.append("--unshare-net")
        args += ["--info-fd", str(info_fd), "--args", str(env_fd), "--", *command]
        return args

    def describe(self) -> str:
        return f"bwrap (network {self.network})"


def environment_args(env: Mapping[str, str]) -> bytes:
    """``env`` as bwrap's ``--args`` input: NUL-separated ``--clearenv --setenv NAME VALUE``."""
    words = ["--clearenv"]
    for name, value in env.items():
        words += ["--setenv", name, value]
    return b"".join(word.encode() + b"\0" for word in words)


@dataclass(frozen=True)
class Containment:
    """What the operator decided for every agent process: the service variables passed
    through (``AGENTCRON_AGENT_ENV``), and the sandbox (None: ``AGENTCRON_SANDBOX=none``)."""

    agent_env: tuple[str, ...] = ()
    sandbox: Sandbox | None = None

    def describe(self) -> str:
        return "none" if self.sandbox is None else self.sandbox.describe()


def _sqlite_files(database_url: str) -> list[Path]:
    main = sqlite_file(database_url)
    if main is None:
        return []
    return [main, *(main.with_name(main.name + suffix) for suffix in SQLITE_SIBLINGS)]


def containment_from_settings(settings: Settings) -> Containment:
    """The containment ``settings`` ask for. The sandbox's binary is looked up on PATH when
    it is not a path; whether it works is ``check_sandbox``'s business."""
    names = settings.agent_env_names
    if settings.sandbox == "none":
        return Containment(agent_env=names)
    data_dir = settings.data_dir.expanduser().resolve()
    hidden = [
        path
        for path in _sqlite_files(settings.database_url)
        # The data directory's tmpfs already hides what lives inside it.
        if not path.is_relative_to(data_dir)
    ]
    hidden.extend(settings.sandbox_hide_paths)
    binary = settings.sandbox_binary
    if os.sep not in binary:
        binary = shutil.which(binary) or binary
    sandbox = Sandbox(
        binary=binary,
        data_dir=data_dir,
        network=settings.sandbox_network,
        hidden=tuple(hidden),
    )
    return Containment(agent_env=names, sandbox=sandbox)


def check_sandbox(containment: Containment) -> None:
    """Refuse to start (``StartupError``) when the configured sandbox cannot run a command.

    The probe is the real thing, every option of an attempt's bwrap, running ``true``: a
    bwrap that exists but cannot make a PID namespace here (no unprivileged user namespaces,
    a container without the rights) fails now rather than at every run.
    """
    sandbox = containment.sandbox
    if sandbox is None:
        return
    remedy = (
        "install it (Debian: apt-get install bubblewrap) or set AGENTCRON_SANDBOX=none "
        "(agents then run unconfined, as the service's user)"
    )
    if not os.path.isfile(sandbox.binary) or not os.access(sandbox.binary, os.X_OK):
        raise StartupError(
            f"AGENTCRON_SANDBOX=bwrap but bubblewrap ({sandbox.binary}) is not installed: {remedy}"
        )
    with tempfile.TemporaryDirectory(prefix="agentcron-sandbox-probe-") as probe:
        info_read, info_write = os.pipe()
        env_fd = os.memfd_create("agentcron-env")
        try:
            os.write(env_fd, environment_args({"PATH": DEFAULT_PATH}))
            os.lseek(env_fd, 0, os.SEEK_SET)
            argv = sandbox.argv(["true"], Path(probe), info_fd=info_write, env_fd=env_fd)
            try:
                done = subprocess.run(
                    argv,
                    env={},
                    pass_fds=(info_write, env_fd),
                    capture_output=True,
                    text=True,
                    timeout=SANDBOX_PROBE_SECONDS,
                    check=False,
                )
            except (OSError, subprocess.TimeoutExpired) as exc:
                raise StartupError(
                    f"AGENTCRON_SANDBOX=bwrap but {sandbox.binary} does not run ({exc}): {remedy}"
                ) from None
        finally:
            for fd in (info_read, info_write, env_fd):
                with contextlib.suppress(OSError):
                    os.close(fd)
    if done.returncode != 0:
        reason = " ".join(done.stderr.split()) or f"exit code {done.returncode}"
        raise StartupError(
            f"AGENTCRON_SANDBOX=bwrap but {sandbox.binary} cannot make a sandbox here "
            f"({reason}): {remedy}"
        )


__all__ = [
    "DEFAULT_PATH",
    "Containment",
    "Sandbox",
    "agent_environment",
    "check_sandbox",
    "containment_from_settings",
    "environment_args",
]
