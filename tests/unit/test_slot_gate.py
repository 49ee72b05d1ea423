"""The engine's slot gate: at most N holders, first come first served, and a cancelled waiter
never keeps or loses a slot."""

from __future__ import annotations

import asyncio

import pytest

from agentcron.web.engine.slots import SlotGate

SOON = 1.0  # a wait that should end at once gets this long before the test fails


async def test_at_most_n_hold_a_slot_and_waiters_go_in_arrival_order() -> None:
    gate = SlotGate(2)
    holding = 0
    most = 0
    order: list[int] = []
    release = asyncio.Event()

    async def run(index: int) -> None:
        nonlocal holding, most
        async with gate:
            order.append(index)
            holding += 1
            most = max(most, holding)
            await release.wait()
            holding -= 1

    tasks = [asyncio.create_task(run(index)) for index in range(6)]
    await asyncio.sleep(0)
    assert order == [0, 1] and gate.locked()
    release.set()
    await asyncio.wait_for(asyncio.gather(*tasks), SOON)
    assert order == list(range(6))
    assert most == 2
    assert not gate.locked()


async def test_a_waiter_cancelled_while_waiting_is_passed_over() -> None:
    gate = SlotGate(1)
    await gate.acquire()
    cancelled = asyncio.create_task(gate.acquire())
    after = asyncio.create_task(gate.acquire())
    await asyncio.sleep(0)
    cancelled.cancel()
    with pytest.raises(asyncio.CancelledError):
        await cancelled
    gate.release()
    await asyncio.wait_for(after, SOON)  # the slot went to the next waiter still waiting
    gate.release()  # with nobody waiting: the slot is free again
    assert not gate.locked()  # and no slot was lost on the way
    await asyncio.wait_for(gate.acquire(), SOON)


async def test_a_waiter_cancelled_after_it_was_handed_the_slot_passes_it_on() -> None:
    gate = SlotGate(1)
    await gate.acquire()
    first = asyncio.create_task(gate.acquire())
    second = asyncio.create_task(gate.acquire())
    await asyncio.sleep(0)
    gate.release()  # hands the slot to ``first``, which has not run yet
    first.cancel()
    with pytest.raises(asyncio.CancelledError):
        await first
    await asyncio.wait_for(second, SOON)
    gate.release()
    assert not gate.locked()
