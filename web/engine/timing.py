"""The engine's timers: waits that a stop cuts short, and an attempt's deadline.

It owns ``sleep_or_stop``, the pause of every background wait of the engine (a run waiting for
its ``available_at`` or for another look at overlap, the listener's reconnect backoff, the
retention passes, the clock watch): it ends at once when the stop event is set, so a shutdown
never waits out a sleep. And ``AttemptDeadline``, the one timer of each attempt: its timeout,
then the hard stop of a runner that ignored it.
"""

from __future__ import annotations

import asyncio
import contextlib

from agentcron.core.runners.base import CancelToken


async def sleep_or_stop(stop: asyncio.Event, seconds: float) -> None:
    """Wait ``seconds``, or until ``stop`` is set if that comes first."""
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(stop.wait(), seconds)


class AttemptDeadline:
    """The one timer of an attempt. At ``timeout`` seconds it cancels the attempt's token (the
    runner stops on its own); ``grace`` seconds later, if the attempt is still awaited, it
    cancels the task awaiting it: the hard stop for a runner that ignores its token. Made in
    that task, since that is the task it stops."""

    def __init__(self, token: CancelToken, timeout: float, grace: float) -> None:
        self._loop = asyncio.get_running_loop()
        task = asyncio.current_task()
        assert task is not None
        self._task, self._token, self._grace = task, token, grace
        self._hard = False
        self._handle = self._loop.call_later(timeout, self._timed_out)

    def _timed_out(self) -> None:
        self._token.cancel("timeout")
        self._handle = self._loop.call_later(self._grace, self._hard_stop)

    def _hard_stop(self) -> None:
        self._hard = True
        self._task.cancel()

    def disarm(self) -> None:
        self._handle.cancel()

    def stopped_hard(self) -> bool:
        """Whether the ``CancelledError`` being handled is this hard stop; if so it is taken
        back, so the task goes on to record the attempt."""
        if self._hard:
            self._hard = False
            self._task.uncancel()
            return True
        return False
