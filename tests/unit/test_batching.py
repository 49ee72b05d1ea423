"""``GroupCommit``: concurrent submissions share flushes; failures reach every caller."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

import pytest

from agentcron.web.engine.batching import GroupCommit


class Recorder:
    def __init__(self, fail: bool = False) -> None:
        self.batches: list[list[int]] = []
        self.fail = fail
        self.gate = asyncio.Event()
        self.gate.set()

    async def flush(self, items: Sequence[int]) -> list[int]:
        self.batches.append(list(items))
        await self.gate.wait()
        if self.fail:
            raise RuntimeError("database down")
        return [item * 10 for item in items]


async def test_items_submitted_during_a_flush_share_the_next_one() -> None:
    recorder = Recorder()
    commit = GroupCommit(recorder.flush)
    recorder.gate.clear()
    first = asyncio.create_task(commit.submit(1))
    await asyncio.sleep(0)  # the first flush is now in flight, held at the gate
    await asyncio.sleep(0)
    rest = [asyncio.create_task(commit.submit(item)) for item in (2, 3, 4)]
    await asyncio.sleep(0)
    recorder.gate.set()
    assert await first == 10
    assert [await task for task in rest] == [20, 30, 40]
    assert recorder.batches == [[1], [2, 3, 4]]
    assert commit.flushes == 2


async def test_a_lone_item_is_flushed_without_waiting_for_company() -> None:
    recorder = Recorder()
    commit = GroupCommit(recorder.flush)
    assert await asyncio.wait_for(commit.submit(7), timeout=5) == 70
    assert await asyncio.wait_for(commit.submit(8), timeout=5) == 80
    assert recorder.batches == [[7], [8]]


async def test_batches_are_capped() -> None:
    recorder = Recorder()
    commit = GroupCommit(recorder.flush, max_batch=2)
    results = await asyncio.gather(*(commit.submit(item) for item in range(5)))
    assert results == [0, 10, 20, 30, 40]
    assert [len(batch) for batch in recorder.batches] == [2, 2, 1]


async def test_a_failed_flush_fails_every_caller_of_the_batch_and_the_next_works() -> None:
    recorder = Recorder(fail=True)
    commit = GroupCommit(recorder.flush)
    results = await asyncio.gather(
        *(commit.submit(item) for item in (1, 2)), return_exceptions=True
    )
    assert all(isinstance(result, RuntimeError) for result in results)
    recorder.fail = False
    assert await commit.submit(3) == 30


async def test_a_cancelled_caller_does_not_break_the_others() -> None:
    recorder = Recorder()
    commit = GroupCommit(recorder.flush)
    recorder.gate.clear()
    first = asyncio.create_task(commit.submit(1))
    await asyncio.sleep(0)
    await asyncio.sleep(0)
    doomed = asyncio.create_task(commit.submit(2))
    kept = asyncio.create_task(commit.submit(3))
    await asyncio.sleep(0)
    doomed.cancel()
    recorder.gate.set()
    assert await first == 10
    assert await kept == 30
    with pytest.raises(asyncio.CancelledError):
        await doomed
    assert recorder.batches == [[1], [3]]


async def test_lingering_gathers_items_submitted_meanwhile() -> None:
    recorder = Recorder()
    commit = GroupCommit(recorder.flush, linger=0.5)
    first = asyncio.create_task(commit.submit(1))
    for _ in range(5):  # turns of the loop after which a flush without linger has gone
        await asyncio.sleep(0)
    second = asyncio.create_task(commit.submit(2))
    assert [await first, await second] == [10, 20]
    assert recorder.batches == [[1, 2]]
