"""The no-op job every contender runs, and the in-process record of when it ran.

``arun`` is the agentcron ``python`` runner target (``bench.noop:arun``), a coroutine run on
the event loop as APScheduler's job (``aps_job``) is and as the ceiling calls ``run``: every
contender runs the same no-op in the same place. ``run`` is the target of agentcron-c256-thread,
whose runner calls it in a worker thread, as it calls any sync target. ``CALLS`` holds the
wall-clock time (``time.time()``) of each call, so an adapter knows without asking the
database when every run has started. ``SPANS`` holds each call's ``(start, end)`` on the
monotonic clock: the slot gap of a burst (``bench.adapters.common.slot_gaps``) is read from
them. Standard library only: the peers' virtualenvs import it too.
"""

from __future__ import annotations

import time
from typing import Any

CALLS: list[float] = []
SPANS: list[tuple[float, float]] = []
STARTS: dict[str, list[float]] = {}


def run(ctx: Any) -> str:
    """Do nothing but note the call time and the call's span (``list.append`` is atomic
    under the GIL, and the runner calls a sync target in worker threads)."""
    start = time.monotonic()
    CALLS.append(time.time())
    SPANS.append((start, time.monotonic()))
    return "ok"


async def arun(ctx: Any) -> str:
    """``run`` as a coroutine: the python runner awaits it on the event loop."""
    return run(ctx)


def aps_sync_job(key: str) -> None:
    """APScheduler's no-op: note the call time under the job's key (duplicates show up).
    Sync, as ``BackgroundScheduler`` runs it in its thread pool (apscheduler3-background);
    ``list.append`` and ``dict.setdefault`` are atomic under the GIL."""
    now = time.time()
    CALLS.append(now)
    STARTS.setdefault(key, []).append(now)


async def aps_job(key: str) -> None:
    """``aps_sync_job`` as a coroutine, run on the event loop of ``AsyncIOScheduler``."""
    aps_sync_job(key)
