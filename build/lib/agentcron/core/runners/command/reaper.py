"""No agent outlives its service: one reaper process per service kills the agents' groups.

The service cannot run code when it dies of SIGKILL, and the agents' process groups are
sessions of their own (``start_new_session``), so nothing of the kernel kills them with it.
What the kernel does do at any death is close the dead process's file descriptors. So the
service starts one small reaper process (this file, run by path as a script: stdlib only,
``python -I -S``, no import of the package) holding the read end of a pipe whose only write
end the service holds (non-inheritable: no agent has a copy). The service writes ``+<pgid>``
when an agent's group starts and ``-<pgid>`` when it is gone; at end of file (the service
exited, cleanly or not) the reaper SIGKILLs every group still registered and exits. SIGKILL
also ends a group frozen with SIGSTOP, and never lets it be thawed by the kernel's SIGCONT
to an orphaned group.

Registration comes after the fork, so a service killed between the two would leave an
unregistered agent: ``GATE`` closes that window. The agent's session starts as ``/bin/sh``
waiting for one newline on its stdin, which the runner writes (before the prompt) only once
the group is registered. If the service dies first, the shell reads end of file (the stdin
pipe's write end was the service's) and exits without starting the agent.

The reaper runs in a session of its own and ignores SIGINT, SIGTERM and SIGHUP: a Ctrl-C or
a stop signal to the service's group must not take the reaper down before the service's own
shutdown has stopped its agents. If it is killed anyway, the next write finds the pipe broken
and a new reaper is started with every registered group.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
from pathlib import Path

# $1 (with "$PWD" in the agent's environment): PWD's value, which the shell would otherwise
# set to the working directory; without it the shell's own PWD is removed again, so the agent
# gets exactly the environment it was given. read returns non-zero at end of file.
GATE = 'IFS= read -r go || exit 0; {pwd} exec "$@"'
GATE_NAME = "agentcron-gate"
GO = b"\n"


def gated(argv: list[str], env: dict[str, str]) -> list[str]:
    """``argv`` started through ``GATE``: nothing runs until the runner writes ``GO``."""
    if "PWD" in env:
        script = GATE.format(pwd="PWD=$1; export PWD; shift;")
        return ["/bin/sh", "-c", script, GATE_NAME, env["PWD"], *argv]
    return ["/bin/sh", "-c", GATE.format(pwd="unset PWD;"), GATE_NAME, *argv]


class Reaper:
    """The service's side: its reaper process and the groups registered with it.

    Used from the event loop's thread only (the runner registers right after a spawn). A
    write is one line, well under PIPE_BUF, so it is atomic and the reaper never sees half
    of one; the reaper reads as it comes, so the pipe never fills.
    """

    def __init__(self) -> None:
        self.groups: set[int] = set()
        self.process: subprocess.Popen[bytes] | None = None
        self._fd: int | None = None

    def start(self) -> None:
        """Start the reaper now (else at the first registration) and tell it every group."""
        if self._fd is not None:
            return
        read_end, write_end = os.pipe()  # both non-inheritable: agents never get a copy
        try:
            self.process = subprocess.Popen(
                [sys.executable, "-I", "-S", str(Path(__file__))],
                stdin=read_end,
                stdout=subprocess.DEVNULL,
                start_new_session=True,
            )
        except BaseException:
            os.close(write_end)
            raise
        finally:
            os.close(read_end)
        self._fd = write_end
        if self.groups:
            os.write(self._fd, "".join(f"+{pgid}\n" for pgid in self.groups).encode())

    def register(self, pgid: int) -> None:
        self.groups.add(pgid)
        self._send(f"+{pgid}\n")

    def unregister(self, pgid: int) -> None:
        self.groups.discard(pgid)
        if self._fd is not None:  # no reaper (it could not start): nothing to tell
            self._send(f"-{pgid}\n")

    def close(self, timeout: float = 5.0) -> None:
        """End the reaper (it kills any group still registered) and wait for it."""
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
        if self.process is not None:
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.process.wait(timeout)
            self.process = None

    def _send(self, line: str) -> None:
        if self._fd is not None:
            try:
                os.write(self._fd, line.encode())
                return
            except BrokenPipeError:  # the reaper was killed: a new one takes every group
                self.close()
        self.start()


REAPER = Reaper()


def main() -> None:
    """The reaper process: follow the registrations on stdin, kill what is left at EOF."""
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, signal.SIG_IGN)
    groups: set[int] = set()
    for line in sys.stdin.buffer:
        with contextlib.suppress(ValueError):
            pgid = int(line[1:])
            if line.startswith(b"+"):
                groups.add(pgid)
            else:
                groups.discard(pgid)
    for pgid in groups:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pgid, signal.SIGKILL)


if __name__ == "__main__":
    main()
