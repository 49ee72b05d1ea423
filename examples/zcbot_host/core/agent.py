"""zcbot's agent, a stand-in that answers without a model, and what zcbot keeps of its runs.

``TaskLocks`` is zcbot's run lock per task: one run of a task at a time in this process,
whatever the schedule's overlap, because two turns of one task would write the same session.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections import defaultdict
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any


class TaskLocks:
    def __init__(self) -> None:
        self._locks: dict[str, asyncio.Lock] = defaultdict(asyncio.Lock)

    @asynccontextmanager
    async def hold(self, task: str) -> AsyncIterator[None]:
        async with self._locks[task]:
            yield


class AgentLog:
    """What zcbot records of each task (its ``last_*`` fields), read by its own routes."""

    def __init__(self) -> None:
        self._guard = threading.Lock()
        self.active: dict[str, int] = defaultdict(int)
        self.most_active: dict[str, int] = defaultdict(int)  # the most runs of a task at once
        self.runs: dict[str, list[dict[str, Any]]] = defaultdict(list)

    def begin(self, task: str) -> None:
        with self._guard:
            self.active[task] += 1
            self.most_active[task] = max(self.most_active[task], self.active[task])

    def end(self, task: str, record: dict[str, Any]) -> None:
        with self._guard:
            self.active[task] -= 1
            self.runs[task].append(record)

    def status(self, task: str) -> dict[str, Any]:
        with self._guard:
            runs = list(self.runs[task])
            return {
                "runs": runs,
                "last_output": runs[-1]["output"] if runs else None,
                "most_at_once": self.most_active[task],
            }


LOG = AgentLog()


def run_agent(task: str, prompt: str, run_id: str, seconds: float) -> str:
    """One turn of zcbot's agent (in a worker thread): idempotent by ``run_id``."""
    LOG.begin(task)
    output = f"zcbot answered {prompt!r} for {task}"
    try:
        time.sleep(seconds)  # the model's turn
    finally:
        LOG.end(task, {"run_id": run_id, "prompt": prompt, "output": output})
    return output
