"""Waits that a stopping engine cuts short.

It owns ``sleep_or_stop``, the pause of every background wait of the engine (a run waiting for
its ``available_at`` or for another look at overlap, the listener's reconnect backoff, the
retention passes, the clock watch): it ends at once when the stop event is set, so a shutdown
never waits out a sleep.
"""

from __future__ import annotations

import asyncio
import contextlib


async def sleep_or_stop(stop: asyncio.Event, seconds: float) -> None:
    """Wait ``seconds``, or until ``stop`` is set if that comes first."""
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(stop.wait(), seconds)
