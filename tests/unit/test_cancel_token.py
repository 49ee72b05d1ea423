"""The cancel token's states and its waits, whichever comes first: the wait or the change."""

from __future__ import annotations

import asyncio

from agentcron.core.runners.base import CancelToken

SOON = 1.0  # a wait that should return at once gets this long before the test fails


async def test_a_wait_begun_before_the_cancel_returns_at_the_cancel() -> None:
    token = CancelToken()
    waiting = asyncio.ensure_future(token.wait())
    await asyncio.sleep(0)
    assert not waiting.done()
    token.cancel("timeout")
    await asyncio.wait_for(waiting, SOON)
    assert token.cancelled and token.reason == "timeout" and not token.at_once


async def test_a_wait_begun_after_the_cancel_returns_at_once() -> None:
    token = CancelToken()
    token.cancel("cancel", at_once=True)
    await asyncio.wait_for(token.wait(), SOON)
    await asyncio.wait_for(token.wait_at_once(), SOON)


async def test_the_first_reason_stays_and_a_later_cancel_can_only_hurry() -> None:
    token = CancelToken()
    hurried = asyncio.ensure_future(token.wait_at_once())
    token.cancel("timeout")
    await asyncio.sleep(0)
    assert not hurried.done()
    token.cancel("lease unconfirmed", at_once=True)
    await asyncio.wait_for(hurried, SOON)
    assert token.reason == "timeout" and token.at_once


async def test_suspend_and_resume_wake_their_waits_each_time() -> None:
    token = CancelToken()
    await asyncio.wait_for(token.wait_resumed(), SOON)  # never suspended: resumed
    frozen = asyncio.ensure_future(token.wait_suspended())
    await asyncio.sleep(0)
    assert not frozen.done()
    token.suspend()
    await asyncio.wait_for(frozen, SOON)
    thawed = asyncio.ensure_future(token.wait_resumed())
    await asyncio.sleep(0)
    assert not thawed.done() and token.suspended
    token.resume()
    await asyncio.wait_for(thawed, SOON)
    assert not token.suspended
    token.suspend()
    await asyncio.wait_for(token.wait_suspended(), SOON)


async def test_a_cancel_while_suspended_is_at_once_and_a_cancelled_token_never_freezes() -> None:
    token = CancelToken()
    token.suspend()
    token.cancel("cancel")
    assert token.at_once
    other = CancelToken()
    other.cancel("timeout")
    other.suspend()
    assert not other.suspended


async def test_on_cancel_calls_back_once_and_can_be_forgotten() -> None:
    token = CancelToken()
    calls: list[str] = []
    token.on_cancel(lambda: calls.append("kept"))
    forget = token.on_cancel(lambda: calls.append("forgotten"))
    forget()
    token.cancel("cancel")
    token.cancel("again")
    token.on_cancel(lambda: calls.append("late"))  # already cancelled: called at once
    assert calls == ["kept", "late"]
