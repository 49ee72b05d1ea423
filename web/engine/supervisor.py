"""Supervision of the engine's long-lived tasks (the loop, heartbeat, listener, retention and
clock watch, and any added later).

A background task started with ``create_task`` and never watched dies in silence: its
exception waits on a task object nobody awaits, and the work it did (renewing leases, relaying
cancels, claiming) simply stops while the service still looks healthy. Every long-lived task
of the engine therefore runs under a ``Supervisor``, which promises:

- an unexpected exception is logged once, with its traceback (``task_crashed``), and counted
  in ``agentcron_task_restarts_total{task=...}``;
- the task is started again (a fresh coroutine from its factory) after a backoff that doubles
  from ``first_delay`` up to ``max_delay``, and starts over once the task has run for
  ``stable_after`` seconds without failing, so a rare fault restarts at once and a task that
  fails at every start does not spin;
- while a task is down (between its crash and its restart) ``healthy`` is false and ``down``
  names it, so ``/readyz`` answers 503;
- a body that returns has finished its work (the loop returns once stopping): it is not
  restarted; cancellation (``stop``) is never treated as a crash.

Without it, a heartbeat that died of one ``KeyError`` renewed none of its replica's leases
again while the service still looked healthy, and the other replicas took over runs that
were still executing: 53 of 200 runs executed twice in the replica test. docs/reliability.md
states the promise; ``tests/integration/test_supervision.py`` kills each task and watches it
come back.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Coroutine
from typing import Any

from agentcron.core.logging import get_logger
from agentcron.web.engine.metrics import EngineMetrics

log = get_logger("agentcron.supervisor")

Body = Callable[[], Coroutine[Any, Any, None]]


async def wait_set(event: asyncio.Event, seconds: float) -> None:
    """Wait until ``event`` is set, at most ``seconds``.

    Not ``asyncio.wait_for``: on Python 3.11 it swallows a cancel that arrives in the loop turn
    the event is set in, and a task cancelled by ``Supervisor.stop`` just as it was prompted
    went on waking every interval: the stop waited for it forever (the heartbeat, prompted by
    the liveness lock being taken, in a library engine stopped right after its start).
    ``asyncio.timeout`` tells its own expiry from a cancel and never absorbs the latter."""
    with contextlib.suppress(TimeoutError):
        async with asyncio.timeout(seconds):
            await event.wait()


async def sleep_or_stop(stop: asyncio.Event, seconds: float) -> None:
    """Wait ``seconds``, or until ``stop`` is set if that comes first: the pause of every wait
    of the engine's tasks (the listener's reconnect backoff, the retention passes, the clock
    watch, a run waiting for its ``available_at`` or another look at overlap), so a shutdown
    never waits out a sleep."""
    await wait_set(stop, seconds)


class Supervisor:
    """Runs named long-lived tasks and restarts them after a crash (see the module)."""

    def __init__(
        self,
        metrics: EngineMetrics,
        *,
        first_delay: float = 0.5,
        max_delay: float = 30.0,
        stable_after: float = 60.0,
    ) -> None:
        self.metrics = metrics
        self.first_delay = first_delay
        self.max_delay = max_delay
        self.stable_after = stable_after
        self.restarts: dict[str, int] = {}
        self._tasks: dict[str, asyncio.Task[None]] = {}
        self._down: set[str] = set()

    def spawn(self, name: str, body: Body) -> asyncio.Task[None]:
        """Start ``body()`` as the task ``name`` under supervision; returns the task, which
        ends when the body returns or ``stop`` cancels it."""
        if name in self._tasks and not self._tasks[name].done():
            raise RuntimeError(f"task {name!r} is already running")
        self.restarts.setdefault(name, 0)
        task = asyncio.create_task(self._supervise(name, body), name=f"agentcron-{name}")
        self._tasks[name] = task
        return task

    @property
    def down(self) -> list[str]:
        """The tasks that crashed and wait for their restart, by name."""
        return sorted(self._down)

    @property
    def healthy(self) -> bool:
        return not self._down

    async def stop(self, *names: str) -> None:
        """Cancel the named tasks (all when none is named) and wait until they are gone."""
        chosen = [task for name, task in self._tasks.items() if not names or name in names]
        for task in chosen:
            task.cancel()
        await asyncio.gather(*chosen, return_exceptions=True)

    async def _supervise(self, name: str, body: Body) -> None:
        clock = asyncio.get_running_loop().time
        failures = 0  # in a row: the backoff doubles with each
        while True:
            started = clock()
            try:
                await body()
                return
            except Exception:
                if clock() - started >= self.stable_after:
                    failures = 0
                delay = min(self.first_delay * 2**failures, self.max_delay)
                failures += 1
                self.restarts[name] += 1
                self.metrics.task_restarts.labels(name).inc()
                log.exception("task_crashed", task=name, restart_in_seconds=delay)
            self._down.add(name)
            try:
                await asyncio.sleep(delay)
            finally:
                self._down.discard(name)
            log.info("task_restarted", task=name, restarts=self.restarts[name])
