"""What the benchmark watches inside an ``agentcron serve`` process (the agentcron-serve
contender), where no code of the adapter runs.

The adapter creates one schedule through the API whose ``python`` target is
``bench.inside:run`` (due long after the burst, so it never runs in it). The service validates
a python target by importing its module on its event loop (``core.runners.python``), so
importing this module is the one moment bench code runs on the served loop. With
``BENCH_INSIDE_FILE`` set, it then starts the 10 ms heartbeat the other adapters use
(``LagMonitor``, keeping every beat: the adapter takes the maximum over the burst's window,
not over the shutdown after it), and a task that waits for the loop's end: the service's
``asyncio.run`` cancels the tasks left when uvicorn has shut down (after the lifespan drained
every run), and that task then writes, as JSON, the beats, how many times the no-op was called
and its spans (``bench.noop``: the burst's runs call it in this same process) and the
service's peak RSS. The adapter stops the service with SIGINT for this: uvicorn raises the
signal it handled again once it is done, still on the loop, and SIGTERM's default action
would end the process there, before ``asyncio.run`` cancels anything (and before any exit
hook). Imported anywhere else (the variable unset, or no loop running) it does nothing.
"""

from __future__ import annotations

import asyncio
import json
import os
from typing import Any

from bench import noop
from bench.adapters.common import LagMonitor, peak_rss_mb

FILE_VARIABLE = "BENCH_INSIDE_FILE"


def run(ctx: Any) -> str:
    """The target of the adapter's probe schedule; its due time is after the burst."""
    return "ok"


def _dump(path: str, monitor: LagMonitor) -> None:
    with open(path, "w") as out:
        json.dump(
            {
                "beats": monitor.beats,
                "calls": len(noop.CALLS),
                "spans": noop.SPANS,
                "peak_rss_mb": peak_rss_mb(),
            },
            out,
        )


async def _watch(path: str) -> None:
    monitor = LagMonitor(keep_beats=True)
    monitor.start()
    try:
        await asyncio.get_running_loop().create_future()  # never set: ends when cancelled
    finally:
        _dump(path, monitor)


# The loop keeps only weak references to tasks.
_WATCHING: list[asyncio.Task[None]] = []


def _start() -> None:
    path = os.environ.get(FILE_VARIABLE)
    if not path:
        return
    try:
        loop = asyncio.get_running_loop()
    except RuntimeError:
        return
    _WATCHING.append(loop.create_task(_watch(path)))


_start()
