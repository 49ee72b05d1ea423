"""The agent's process as the ``command`` runner drives it, once it is started.

It owns the signals (to the agent's process group and, in a sandbox, to the sandbox's group as
``core.runners.command`` describes), following the engine's suspension with SIGSTOP and
SIGCONT, learning the sandbox's init from bwrap's info, noticing the leader's exit without
waiting for its pipes, and keeping the bounded tails of stdout and stderr.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal

from agentcron.core.runners.base import CancelToken

EXIT_POLL_SECONDS = 0.002


class Tail:
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


def signal_group(pid: int, sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, sig)


class Group:
    """Where a signal to the agent goes: the leader's process group and, in a sandbox, the
    sandbox's own group once bwrap has said which it is (see ``core.runners.command``)."""

    def __init__(self, leader: int) -> None:
        self.leader = leader
        self.sandbox: int | None = None

    def signal(self, sig: signal.Signals) -> None:
        if self.sandbox is not None:
            signal_group(self.sandbox, sig)
            if sig == signal.SIGTERM:
                return
        signal_group(self.leader, sig)


async def follow_suspension(group: Group, cancel: CancelToken) -> None:
    """SIGSTOP the group while the engine suspends the attempt, SIGCONT when it resumes it; a
    cancelled attempt is never thawed (it is killed frozen)."""
    while not cancel.cancelled:
        await cancel.wait_suspended()
        group.signal(signal.SIGSTOP)
        await cancel.wait_resumed()
        if cancel.cancelled:
            return
        group.signal(signal.SIGCONT)


async def sandbox_pid(fd: int) -> int | None:
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


async def exit_status(proc: asyncio.subprocess.Process) -> int:
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
