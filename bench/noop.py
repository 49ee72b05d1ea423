"""The no-op job every contender runs, and the in-process record of when it ran.

``run`` is the agentcron ``python`` runner target (``bench.noop:run``); ``aps_job`` is the
APScheduler job; the ceiling calls ``run`` directly. ``CALLS`` holds the wall-clock time
(``time.time()``) of each call, so an adapter knows without asking the database when every
run has started. ``SPANS`` holds each call's ``(start, end)`` on the monotonic clock: the
slot gap of a burst (``bench.adapters.common.slot_gaps``) is read from them. Standard library
only: the peers' virtualenvs import it too.
"""

from __future__ import annotations

import time
from typing import Any

CALLS: list[float] = []
SPANS: list[tuple[float, float]] = []
STARTS: dict[str, list[float]] = {}


def run(ctx: Any) -> str:
    """Do nothing but note the call time and the call's span (``list.append`` is atomic
    under the GIL, and the runner calls this in worker threads)."""
    start = time.monotonic()
    CALLS.append(time.time())
    SPANS.append((start, time.monotonic()))
    return "ok"


async def aps_job(key: str) -> None:
    """APScheduler's no-op: note the call time under the job's key (duplicates show up)."""
    now = time.time()
    CALLS.append(now)
    STARTS.setdefault(key, []).append(now)
