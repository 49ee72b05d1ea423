"""Targets for the ``python`` runner tests (``tests.agents_fixture:<name>``).

Each function takes the ``RunContext`` the runner passes; ``CALLS`` records what they saw.
"""

from __future__ import annotations

import asyncio
import threading
import time
import uuid
from collections.abc import Callable
from typing import Any

from agentcron.core.errors import RunPermanentError
from agentcron.core.runners.base import RunContext, RunOutcome, TransientRunError
from agentcron.core.runners.threads import AgentThreads

CALLS: list[dict[str, Any]] = []
SYNC_STOPPED = threading.Event()  # set by ``polls_cancel`` once it returns
NOT_CALLABLE = 42
# ``meet``'s meeting point: a test sets it to a barrier of as many parties as it runs targets.
MEETING = threading.Barrier(1)


def _record(ctx: RunContext, **extra: Any) -> None:
    CALLS.append({"run_id": ctx.request.run_id, "thread": threading.get_ident(), **extra})


def meet(ctx: RunContext) -> str:
    """A sync target that blocks until all of ``MEETING``'s parties are in their threads."""
    MEETING.wait()
    return "met"


def _nothing(run_id: uuid.UUID) -> None:
    return None


# ``returns_then``'s hook: called with the run id in the target's thread, just before it returns.
BEFORE_RETURN: Callable[[uuid.UUID], object] = _nothing


def returns_then(ctx: RunContext) -> str:
    """A sync target that calls ``BEFORE_RETURN`` and returns "returned"."""
    _record(ctx, kind="sync")
    BEFORE_RETURN(ctx.request.run_id)
    return "returned"


def then_after_return(
    threads: AgentThreads, then: Callable[[uuid.UUID], object]
) -> Callable[[uuid.UUID], None]:
    """A ``BEFORE_RETURN`` hook: the loop calls ``then(run_id)`` in the same turn as the
    target's return reaches it, as a process stalled past that moment sees both. The hook
    holds the loop (as a stall does) until the worker of ``threads`` has finished the call: a
    worker is idle again only once the call's result is on its way to the loop, so ``then``
    is queued after it."""
    loop = asyncio.get_running_loop()

    def stalled(run_id: uuid.UUID) -> None:
        deadline = time.monotonic() + 5
        while not threads.idle():
            assert time.monotonic() < deadline, "the worker never finished the call"
            time.sleep(0.001)
        loop.call_soon(then, run_id)

    return lambda run_id: loop.call_soon_threadsafe(stalled, run_id)


def greet(ctx: RunContext) -> str:
    """A sync target: runs in a worker thread."""
    _record(ctx, kind="sync")
    return f"hello from python: {ctx.request.prompt}"


async def greet_async(ctx: RunContext) -> str:
    """An async target: runs on the event loop."""
    _record(ctx, kind="async")
    await asyncio.sleep(0)
    return f"async hello: {ctx.request.prompt}"


class AsyncCallable:
    """An object whose ``__call__`` is async (runs on the loop, like an async function)."""

    async def __call__(self, ctx: RunContext) -> str:
        _record(ctx, kind="async-callable")
        return "called"


async_callable = AsyncCallable()


class Agents:
    """A nested attribute path: ``tests.agents_fixture:Agents.summarise``."""

    @staticmethod
    def summarise(ctx: RunContext) -> str:
        return f"summary of {ctx.request.prompt!r}"


def returns_none(ctx: RunContext) -> None:
    return None


def returns_number(ctx: RunContext) -> int:
    return 1234


def returns_mapping(ctx: RunContext) -> dict[str, Any]:
    """A JSON object: the run's result, not its output."""
    return {"session_id": f"s-{ctx.request.run_id}", "turns": 2}


def returns_outcome(ctx: RunContext) -> RunOutcome:
    run_id = str(ctx.request.run_id)
    return RunOutcome(
        output="with turns",
        turns=({"role": "assistant", "content": "with turns", "run_id": run_id},),
    )


def returns_coroutine(ctx: RunContext) -> Any:
    """A sync function handing back an awaitable: the runner awaits it on the loop."""
    return greet_async(ctx)


def fails_with_value_error(ctx: RunContext) -> str:
    raise ValueError("the model said no")


async def fails_async(ctx: RunContext) -> str:
    raise KeyError("missing")


def fails_permanently(ctx: RunContext) -> str:
    raise RunPermanentError("the input was rejected")


def fails_transiently(ctx: RunContext) -> str:
    raise TransientRunError("upstream busy")


def exits(ctx: RunContext) -> str:
    raise SystemExit(3)


async def exits_async(ctx: RunContext) -> str:
    raise SystemExit(4)


async def waits_for_cancel(ctx: RunContext) -> str:
    """Sleeps far longer than any test: only cancellation ends it."""
    try:
        await asyncio.sleep(60)
    except asyncio.CancelledError:
        _record(ctx, kind="async-cancelled")
        raise
    return "never"


def polls_cancel(ctx: RunContext) -> str:
    """A sync target that polls the token, as a long sync target should."""
    deadline = time.monotonic() + 10
    while not ctx.cancel.cancelled and time.monotonic() < deadline:
        time.sleep(0.01)
    _record(ctx, kind="sync-stopped", cancelled=ctx.cancel.cancelled)
    SYNC_STOPPED.set()
    return "stopped"
