"""The ``handler`` runner: a schedule whose work is done by the host's own callable.

A host that embeds agentcron (``agentcron.Engine(handler=...)``) hands over one callable; every
schedule with ``{"type": "handler"}`` runs through it. Nothing is imported by name, so unlike a
``python`` target no module list is needed: the host gave us the callable itself. The optional
``data`` (any JSON object, at most ``DATA_LIMIT`` bytes) is saved with the schedule and with
each run, and handed back as ``ctx.data``: what the host needs to find its own record (a
deployment id, a target), as given and never rewritten by a later edit for runs that exist.

The callable gets a ``HandlerContext``; sync callables run in a worker thread, async ones on
the loop. A string it returns is the run's output; a mapping (a JSON object of at most
``RESULT_LIMIT`` bytes: the session it opened, say) is the run's ``result``, kept on the run and
read back with it; ``None`` is neither; a ``RunOutcome`` may carry both. It raises
``RunPermanentError`` for a failure that retrying cannot help; any other exception is transient
and retried while the schedule's attempts remain. It should watch ``ctx.cancel``
(timeout, cancel, shutdown) and make its effects idempotent by ``ctx.run_id``: after a crash
the same run is continued, with a higher ``attempt``.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from agentcron.core.errors import InvalidSchedule, TargetUnavailable
from agentcron.core.runners.base import CancelToken, Runner, RunOutcome, RunRequest
from agentcron.core.runners.python import call_target

FIELDS = frozenset({"type", "data"})
DATA_LIMIT = 16_384  # bytes of JSON: a key to the host's record, not the record itself

Returned = str | RunOutcome | Mapping[str, Any] | None
Handler = Callable[["HandlerContext"], "Returned | Awaitable[Returned]"]


@dataclass(frozen=True)
class HandlerContext:
    """One attempt of one run, as the host's handler sees it."""

    run_id: uuid.UUID  # the idempotency key: the same across attempts and takeovers
    schedule_id: uuid.UUID
    key: str | None  # the host's key for the schedule (``PUT /schedules/by-key/{key}``)
    trigger: str  # "schedule", "manual", "replay" or "backfill"
    due_at: datetime | None  # the instant a scheduled run is for (UTC); None for manual ones
    attempt: int  # 1 for the first attempt; higher after a retry or a takeover
    replay_of: uuid.UUID | None  # the run a replay re-runs
    prompt: str
    data: Mapping[str, Any]  # the schedule's ``runner.data`` as saved with this run
    payload: Mapping[str, Any]  # everything saved with the run (prompt, runner, limits)
    cancel: CancelToken = field(repr=False)
    workdir: str = ""  # the schedule's task directory, made before the call; files kept there
    # are there for its next runs


def context_for(request: RunRequest, cancel: CancelToken) -> HandlerContext:
    payload = request.payload
    runner = payload.get("runner") or {}
    return HandlerContext(
        run_id=request.run_id,
        schedule_id=request.schedule_id,
        key=payload.get("key"),
        trigger=request.trigger,
        due_at=request.due_at,
        attempt=request.attempt,
        replay_of=request.replay_of,
        prompt=request.prompt,
        data=dict(runner.get("data") or {}),
        payload=payload,
        cancel=cancel,
        workdir=str(request.workdir),
    )


class HandlerRunner:
    """Calls the engine's handler once per attempt."""

    def __init__(self, handler: Handler | None) -> None:
        self.handler = handler

    async def run(self, request: RunRequest, cancel: CancelToken) -> RunOutcome:
        if self.handler is None:
            # A schedule saved through a host's engine, run by an engine without a handler
            # (``agentcron serve`` on the same database, say): say so, and pause it.
            raise TargetUnavailable(
                "this schedule runs through a host's handler, and the engine that claimed it"
                " was started without one (agentcron.Engine(handler=...))"
            )
        return await call_target(
            self.handler, context_for(request, cancel), cancel, request.threads
        )


class HandlerRunnerType:
    """``{"type": "handler", "data": {...}}``: the host's handler does the work."""

    name = "handler"

    def validate(self, config: Mapping[str, Any]) -> dict[str, Any]:
        """Return ``{"type": "handler"}`` plus ``data`` when given; ``InvalidSchedule`` on
        ``runner.<key>`` for an unknown key and on ``runner.data`` when it is not a JSON object
        (NaN and the infinities included) or is over ``DATA_LIMIT`` bytes."""
        unknown = set(config) - FIELDS
        if unknown:
            key = sorted(unknown)[0]
            raise InvalidSchedule(f"unknown field {key!r}", field=f"runner.{key}")
        if "data" not in config:
            return {"type": self.name}
        data = config["data"]
        if not isinstance(data, dict):
            raise InvalidSchedule("data must be a JSON object", field="runner.data")
        try:
            # NaN and the infinities are not JSON: PostgreSQL refuses them, SQLite keeps them.
            size = len(json.dumps(data, separators=(",", ":"), allow_nan=False).encode())
        except (TypeError, ValueError, RecursionError) as exc:
            raise InvalidSchedule(
                f"data must be a JSON object: {exc}", field="runner.data"
            ) from None
        if size > DATA_LIMIT:
            raise InvalidSchedule(
                f"data is {size} bytes of JSON; at most {DATA_LIMIT} (keep a key to your record,"
                " not the record)",
                field="runner.data",
            )
        return {"type": self.name, "data": data}

    def build(self, config: Mapping[str, Any]) -> Runner:
        """A runner with no handler: the engine gives its own (``RunEngine.handler``)."""
        return HandlerRunner(None)


__all__ = ["Handler", "HandlerContext", "HandlerRunner", "HandlerRunnerType"]
