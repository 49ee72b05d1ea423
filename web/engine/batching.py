"""Group commit: many callers, one transaction.

Runs start and finish in bursts (10,000 schedules due at 09:00), and a transaction per run
would make the database round trip, not the agent, the limit. ``GroupCommit`` lets every
caller ``await submit(item)`` as if it had the transaction to itself; items submitted while a
flush is in flight wait and go together in the next one. Unless asked to linger, an idle
caller is never delayed to wait for company: the first item of a quiet moment is flushed on
the next turn of the loop.

Without it each run was admitted and recorded in transactions of its own, 2.01 commits per
run: a 10,000-run burst on PostgreSQL took 88.5 s, and 16.2 s (0.44 commits per run) once
admissions and records went in batches and claims got cheaper (docs/benchmarks.md, "What
changed in the engine for these figures").
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from typing import Generic, TypeVar

from agentcron.core.logging import get_logger

Item = TypeVar("Item")
Result = TypeVar("Result")

log = get_logger(__name__)


class GroupCommit(Generic[Item, Result]):
    """Merge concurrent ``submit`` calls into calls of ``flush`` (one per batch, in order).

    ``flush`` gets up to ``max_batch`` items and returns one result per item, in order. If it
    raises, every caller of that batch gets the exception: the caller decides what a failed
    write means for its item. ``linger`` (seconds) holds each flush back that long to gather
    more items, for writes nobody is waiting on to go on (it trades latency for fewer
    transactions).
    """

    def __init__(
        self,
        flush: Callable[[Sequence[Item]], Awaitable[Sequence[Result]]],
        *,
        max_batch: int = 500,
        linger: float = 0.0,
        name: str = "group-commit",
    ) -> None:
        self._flush = flush
        self._max_batch = max_batch
        self._linger = linger
        self._name = name
        self._queue: list[tuple[Item, asyncio.Future[Result]]] = []
        self._worker: asyncio.Task[None] | None = None
        self.flushes = 0  # batches written (diagnostics: items per flush)

    async def submit(self, item: Item) -> Result:
        future: asyncio.Future[Result] = asyncio.get_running_loop().create_future()
        self._queue.append((item, future))
        if self._worker is None or self._worker.done():
            self._worker = asyncio.create_task(self._drain(), name=self._name)
        return await future

    async def _drain(self) -> None:
        while self._queue:
            if self._linger and len(self._queue) < self._max_batch:
                await asyncio.sleep(self._linger)
            batch = self._queue[: self._max_batch]
            del self._queue[: self._max_batch]
            live = [(item, future) for item, future in batch if not future.cancelled()]
            if not live:
                continue
            self.flushes += 1
            try:
                results = await self._flush([item for item, _ in live])
            except Exception as exc:
                for _, future in live:
                    if not future.done():
                        future.set_exception(exc)
                continue
            for (_, future), result in zip(live, results, strict=True):
                if not future.done():
                    future.set_result(result)


def retrying(
    write: Callable[[Sequence[Item]], Awaitable[list[Result]]], tries: int = 3
) -> Callable[[Sequence[Item]], Awaitable[list[Result]]]:
    """A batched write tried up to ``tries`` times: one failure would otherwise
    cost every run of the batch its outcome (their leases lapse and they run again)."""

    async def tried(items: Sequence[Item]) -> list[Result]:
        for attempt in range(1, tries + 1):
            try:
                return await write(items)
            except Exception as exc:
                if attempt == tries:
                    raise
                log.warning(
                    "batch_write_retry",
                    error=type(exc).__name__,
                    detail=str(exc.__cause__ or exc)[:200],
                    items=len(items),
                )
                await asyncio.sleep(0.05 * 2**attempt)
        raise AssertionError("unreachable")

    return tried
