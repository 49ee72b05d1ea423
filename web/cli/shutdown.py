"""How ``agentcron serve`` stops: a first Ctrl-C drains, a second one stops at once.

The first SIGINT (or a SIGTERM) stops the service as ``Engine.stop`` does: no more claims,
the runs in progress get up to ``AGENTCRON_DRAIN_TIMEOUT_SECONDS`` to finish, the rest are
handed over. A first Ctrl-C also says at once, on stderr, how many runs that waits for and for
how long. A second Ctrl-C ends the process at once with status 130, giving nothing back: the
runs keep their leases, their agents die with the process (``core.runners.command.reaper``),
and another replica or the next start takes them over, as after a crash.
"""

from __future__ import annotations

import os
import signal
from types import FrameType

import uvicorn
from fastapi import FastAPI

# The status of a process stopped by Ctrl-C, as a shell reports it (128 + SIGINT).
INTERRUPTED = 128 + signal.SIGINT


class Server(uvicorn.Server):
    """uvicorn's server for ``app``, with the second Ctrl-C above. A SIGTERM is uvicorn's
    graceful stop however often it comes: a supervisor that wants it quicker sends SIGKILL."""

    def __init__(self, config: uvicorn.Config, app: FastAPI) -> None:
        super().__init__(config)
        self.app = app

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        if sig == signal.SIGINT and self.should_exit:
            _say("stopped at once; runs still in progress are taken over as after a crash")
            os._exit(INTERRUPTED)
        if sig == signal.SIGINT:
            _say(stopping(self.app))
        super().handle_exit(sig, frame)


def stopping(app: FastAPI) -> str:
    """What the first Ctrl-C says: what the stop waits for, and how to stop at once."""
    loop = getattr(app.state, "loop", None)  # None before the start, or without a scheduler
    runs = 0 if loop is None else loop.in_progress
    if loop is None or runs == 0:
        return "stopping; Ctrl-C again to stop at once"
    noun, taken = ("run", "it is") if runs == 1 else ("runs", "they are")
    return (
        f"stopping: waiting up to {loop.drain_timeout:g} s for {runs} {noun} in progress to"
        f" finish; Ctrl-C again to stop at once ({taken} then taken over as after a crash)"
    )


def _say(message: str) -> None:
    # os.write, not print: this runs inside a signal handler, which may have interrupted a
    # write to sys.stderr (a log line), and a buffered stream refuses a re-entrant write.
    os.write(2, f"agentcron: {message}\n".encode())
