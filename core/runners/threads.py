"""The engine's worker threads for sync agents (a sync ``python`` or ``handler`` target).

A sync target blocks its thread for as long as it works, and every slot of an engine may hold
one, so the engine must be able to run ``concurrency`` of them at once. A thread pool with a
thread per slot does that, but hands each call over with a future of its own, a lock, and a
wake-up of the event loop through its self-pipe per result: about 45 µs of CPU per call, more
than the rest of a quick run's engine work, and a burst at concurrency 256 started 256
threads to run no-ops that one thread ran as fast.

``AgentThreads`` hands calls over through one queue, and results back in batches: a worker
that finishes a call adds its result to a list and wakes the loop only if no wake-up is
already on its way; the loop sets every result of the list at once. It starts a second thread
only when calls wait and none was taken for ``GROW_AFTER`` seconds (every thread is held by a
target that blocks), and then one thread per call waiting, up to ``most``: quick targets
share a few threads, blocking ones each get their own within milliseconds. The threads are
daemons: a target still running when its process exits does not keep the process alive (its
run's lease lapses and another attempt takes it over, as after a crash).
"""

from __future__ import annotations

import asyncio
import queue
import threading
from collections.abc import Callable
from typing import Any

GROW_AFTER = 0.005  # seconds calls may wait with no thread taking one before more start

_Job = tuple["asyncio.Future[Any]", Callable[[], Any]]


class AgentThreads:
    """At most ``most`` worker threads for blocking calls made from one event loop."""

    def __init__(self, most: int, name: str = "agentcron-agent") -> None:
        self.most = most
        self.name = name
        self.threads: list[threading.Thread] = []
        self._jobs: queue.SimpleQueue[_Job | None] = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._idle = 0  # threads waiting for a call
        self._taken = 0  # calls taken so far: whether the queue moves
        self._results: list[tuple[asyncio.Future[Any], Any, BaseException | None]] = []
        self._posted = False  # a delivery of results is on its way to the loop
        self._loop: asyncio.AbstractEventLoop | None = None
        self._grow: asyncio.TimerHandle | None = None
        self._closed = False

    def call(self, fn: Callable[[], Any]) -> asyncio.Future[Any]:
        """``fn()`` in a worker thread; its result (or exception) on the future returned.
        Cancelling the future drops the result; the call itself runs to its end."""
        loop = self._loop = asyncio.get_running_loop()
        if self._closed:
            raise RuntimeError("the agent threads are shut down")
        future: asyncio.Future[Any] = loop.create_future()
        self._jobs.put((future, fn))
        if not self.threads:
            self._start(1)
        elif self._grow is None and len(self.threads) < self.most:
            with self._lock:
                short = self._jobs.qsize() > self._idle
            if short:
                self._grow = loop.call_later(GROW_AFTER, self._check, self._taken)
        return future

    def shutdown(self) -> None:
        """Cancel the calls not started and let every thread end once its call returns."""
        self._closed = True
        if self._grow is not None:
            self._grow.cancel()
            self._grow = None
        while True:
            try:
                job = self._jobs.get_nowait()
            except queue.Empty:
                break
            if job is not None:
                job[0].cancel()
        for _ in self.threads:
            self._jobs.put(None)

    def _check(self, taken: int) -> None:
        """Calls waited ``GROW_AFTER``: more threads if none was taken meanwhile."""
        self._grow = None
        waiting = self._jobs.qsize()
        if not waiting or self._closed:
            return
        if self._taken == taken:
            self._start(min(waiting, self.most - len(self.threads)))
        elif len(self.threads) < self.most and self._loop is not None:
            self._grow = self._loop.call_later(GROW_AFTER, self._check, self._taken)

    def _start(self, count: int) -> None:
        for _ in range(count):
            thread = threading.Thread(
                target=self._work, name=f"{self.name}_{len(self.threads)}", daemon=True
            )
            self.threads.append(thread)
            thread.start()

    def _work(self) -> None:
        while True:
            with self._lock:
                self._idle += 1
            job = self._jobs.get()
            with self._lock:
                self._idle -= 1
                self._taken += 1
            if job is None:
                return
            future, fn = job
            result: Any = None
            error: BaseException | None = None
            try:
                result = fn()
            except BaseException as exc:  # handed to the caller, as a pool's future would
                error = exc
            with self._lock:
                self._results.append((future, result, error))
                post, self._posted = not self._posted, True
            if post and self._loop is not None:
                try:
                    self._loop.call_soon_threadsafe(self._deliver)
                except RuntimeError:  # the loop is closed: nobody waits for the result
                    return

    def _deliver(self) -> None:
        with self._lock:
            results, self._results, self._posted = self._results, [], False
        for future, result, error in results:
            if future.cancelled():
                continue
            if error is None:
                future.set_result(result)
            else:
                future.set_exception(error)

    def idle(self) -> bool:
        """Every thread waits for a call, its last result handed to the loop (for tests that
        must act right after a target returned)."""
        with self._lock:
            return self._idle == len(self.threads)
