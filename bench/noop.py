"""The no-op job every contender runs, and the in-process record of when it ran.

``run`` is the agentcron ``python`` runner target (``bench.noop:run``); ``aps_job`` is the
APScheduler job; the ceiling calls ``run`` directly. ``CALLS`` holds the wall-clock time
(``time.time()``) of each call, so an adapter knows without asking the database when every
run has started. Standard library only: the peers' virtualenvs import it too.
"""

from __future__ import annotations

import time
from typing import Any

CALLS: list[float] = []
STARTS: dict[str, list[float]] = {}


def run(ctx: Any) -> str:
    """Do nothing but note the call time (``list.append`` is atomic under the GIL)."""
    CALLS.append(time.time())
    return "ok"


async def aps_job(key: str) -> None:
    """APScheduler's no-op: note the call time under the job's key (duplicates show up)."""
    now = time.time()
    CALLS.append(now)
    STARTS.setdefault(key, []).append(now)
