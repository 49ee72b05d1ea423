"""The runner contract shared by every agent runner."""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from agentcron.core.errors import RunPermanentError
from agentcron.core.runners.containment import Containment
from agentcron.core.runners.threads import AgentThreads
from agentcron.core.workdirs import make_workdir

if TYPE_CHECKING:
    from agentcron.core.ledger.store import TaskRef
    from agentcron.core.storage.models import Run

RESULT_LIMIT = 16_384  # bytes of JSON: what the host needs to find its own work (a session id)


class TransientRunError(Exception):
    """An attempt failed in a way another attempt may not (retried while attempts remain)."""


class AttemptStopped(RunPermanentError):
    """Raised by a runner that stopped because its cancel token was set, with ``output``:
    what its agent had written by then (None when nothing), which the run keeps as its output
    when it ends ``cancelled`` (a ``timed_out`` run keeps none: its channels get no half-done
    work)."""

    def __init__(self, message: str, output: str | None = None) -> None:
        super().__init__(message)
        self.output = output


class CancelToken:
    """A cooperative cancel signal handed to a runner for one attempt.

    The engine sets it on timeout, on a user's cancel and on shutdown; a runner must stop its
    work promptly once ``cancelled`` is true (or ``wait()`` returns) and then raise or return.
    ``at_once`` says no grace period is allowed: the engine is about to lose (or has lost) the
    run's lease and another replica may start the run, so a runner that can stop its work by
    force (the ``command`` runner's SIGKILL of the process group) must do so immediately.

    A runner that can freeze its work and thaw it later (``Runner.suspendable``) is also told
    to ``suspend`` while the engine cannot vouch for the run's lease (the database did not
    confirm it in time) and to ``resume`` once it can again: frozen, the attempt executes
    nothing, so no other replica's attempt can overlap it, yet a short database outage does
    not cost the work done so far. A cancel that arrives while suspended is always at once:
    a frozen attempt is never thawed to wind down without a confirmed lease.
    """

    def __init__(self) -> None:
        self.reason: str | None = None
        self._cancelled = False
        self._at_once = False
        self._suspended = False
        self._callbacks: list[Callable[[], object]] = []
        # The events a wait needs, made by the first wait on each state: most attempts are
        # never waited on (a runner that awaits one future uses ``on_cancel``), and four events
        # made per attempt were a few microseconds of every run's time on the event loop.
        self._events: dict[str, asyncio.Event] = {}

    def cancel(self, reason: str, *, at_once: bool = False) -> None:
        if not self._cancelled:
            self.reason = reason
            self._cancelled = True
            self._changed("cancelled", True)
            for callback in self._callbacks:
                callback()
            self._callbacks.clear()
        if at_once or self._suspended:
            # A later, more urgent cancel still hurries a graceful stop already under way.
            self._at_once = True
            self._changed("at_once", True)

    @property
    def at_once(self) -> bool:
        return self._at_once

    @property
    def cancelled(self) -> bool:
        return self._cancelled

    async def wait(self) -> None:
        await self._event("cancelled", self._cancelled).wait()

    def on_cancel(self, callback: Callable[[], object]) -> Callable[[], None]:
        """Call ``callback`` when the token is first cancelled (at once if it already is);
        returns the function that forgets it. For a runner that awaits one future in place
        (``core.runners.python``): no task of its own just to ``wait()``."""
        if self.cancelled:
            callback()
            return lambda: None
        self._callbacks.append(callback)

        def forget() -> None:
            if callback in self._callbacks:
                self._callbacks.remove(callback)

        return forget

    async def wait_at_once(self) -> None:
        """Return once a cancel without grace (``at_once``) was asked for."""
        await self._event("at_once", self._at_once).wait()

    def suspend(self) -> None:
        """Freeze the attempt until ``resume`` (see the class docstring)."""
        if not self.cancelled:
            self._suspended = True
            self._changed("suspended", True)
            self._changed("resumed", False)

    def resume(self) -> None:
        self._suspended = False
        self._changed("suspended", False)
        self._changed("resumed", True)

    @property
    def suspended(self) -> bool:
        return self._suspended

    async def wait_suspended(self) -> None:
        await self._event("suspended", self._suspended).wait()

    async def wait_resumed(self) -> None:
        await self._event("resumed", not self._suspended).wait()

    def _event(self, state: str, now: bool) -> asyncio.Event:
        """The event of ``state`` (made set if ``now``), for a wait on it."""
        event = self._events.get(state)
        if event is None:
            event = self._events[state] = asyncio.Event()
            if now:
                event.set()
        return event

    def _changed(self, state: str, now: bool) -> None:
        event = self._events.get(state)
        if event is None:
            return  # nobody waits on it: the first wait makes it from the flag
        if now:
            event.set()
        else:
            event.clear()


@dataclass(frozen=True)
class RunRequest:
    """Everything a runner gets for one attempt of one run."""

    run_id: uuid.UUID
    schedule_id: uuid.UUID
    task_id: uuid.UUID
    attempt: int
    trigger: str
    due_at: datetime | None
    prompt: str
    workdir: Path  # the task's directory; the engine makes it before the runner is called
    timeout_seconds: float
    # The task's conversation, oldest first (persistent schedules; empty for isolated ones):
    # {"role": "user" | "assistant", "content": str, "run_id": str}.
    history: Sequence[Mapping[str, Any]] = ()
    extra: Mapping[str, Any] = field(default_factory=dict)
    # The owner's stored secrets this run's config refers to (name -> value), resolved by the
    # engine for this attempt only (core.secrets). Out of repr: a request may be logged.
    secrets: Mapping[str, str] = field(default_factory=dict, repr=False)
    # The engine instance running this attempt (the settings' instance id; "" outside one).
    instance_id: str = ""
    # The operator's rules for agent processes: the variables passed through, the sandbox.
    containment: Containment = field(default_factory=Containment)
    # What the run saved when it was created (prompt, runner, limits), and the run a replay
    # re-runs: a host's handler gets both (core.runners.handler).
    payload: Mapping[str, Any] = field(default_factory=dict)
    replay_of: uuid.UUID | None = None
    # The engine's threads for blocking work (a sync ``python`` or ``handler`` target runs in
    # one): up to the engine's concurrency, so every slot can block at once
    # (``core.runners.threads``). None outside an engine: the event loop's default executor,
    # which has a handful of threads.
    threads: AgentThreads | None = field(default=None, repr=False, compare=False)
    # The attempt's W3C trace context (``traceparent``, ``tracestate``) when the engine traces
    # (``core.otel``), else empty: a command gets it as TRACEPARENT and TRACESTATE, an openai
    # request as headers, a handler or python target here, so the agent's spans join the run's.
    trace: Mapping[str, str] = field(default_factory=dict)

    @classmethod
    def of(
        cls,
        run: Run,
        task: TaskRef,
        *,
        timeout: float,
        secrets: Mapping[str, str],
        instance_id: str,
        containment: Containment,
        threads: AgentThreads | None = None,
        trace: Mapping[str, str] | None = None,
    ) -> RunRequest:
        """The attempt of ``run`` in ``task`` as its runner sees it, from what the run saved
        (``run.payload``). Its task directory exists once this returns, the data directory
        above it included: every runner is handed it to keep files in between runs (an
        ``OSError`` making it is the attempt's transient failure)."""
        payload = run.payload
        # Here, not in each runner: a handler or python target is handed the path (no process
        # is started in it), so only a directory made for it is one it can write to at once.
        make_workdir(task.workdir)
        workdir = Path(task.workdir)
        return cls(
            run_id=run.id,
            schedule_id=run.schedule_id,
            task_id=task.id,
            attempt=run.attempt,
            trigger=run.trigger,
            due_at=run.due_at,
            prompt=str(payload["prompt"]),
            workdir=workdir,
            timeout_seconds=timeout,
            history=list(task.conversation) if payload.get("mode") == "persistent" else [],
            secrets=secrets,
            instance_id=instance_id,
            containment=containment,
            payload=payload,
            replay_of=run.replay_of,
            threads=threads,
            trace=trace or {},
        )


@dataclass(frozen=True)
class RunOutcome:
    """A successful attempt.

    ``output`` is the excerpt kept on the run. ``turns`` are appended to the task's
    conversation in the same transaction that records the success, each carrying the
    ``run_id``; turns of a run id already in the conversation are not appended again, so a
    resumed run never adds the same turn twice. ``result`` is a JSON object kept on the run
    as given (what the host needs to find the work it started: a session id, say), at most
    ``RESULT_LIMIT`` bytes; ``checked_outcome`` holds it to that before it is recorded.
    """

    output: str = ""
    turns: Sequence[Mapping[str, Any]] = ()
    result: Mapping[str, Any] | None = None
    # The tokens the agent used where its runner knows them ({"input_tokens": n,
    # "output_tokens": m}; the openai runner's reply says them): for the attempt's span only.
    usage: Mapping[str, int] | None = None


def checked_outcome(outcome: RunOutcome) -> RunOutcome:
    """``outcome`` with its ``result`` in the form the run keeps (a copy decoded from its
    JSON: keys as strings, tuples as lists), or as is without one.

    Raises ``RunPermanentError`` saying why when the result is not a JSON object (a list, a
    value JSON cannot hold, NaN or an infinity) or is over ``RESULT_LIMIT`` bytes of compact
    JSON: the attempt's work is done, so another attempt would only do it again.
    """
    result = outcome.result
    if result is None:
        return outcome
    why = "the run's result is not a JSON object"
    if not isinstance(result, Mapping):
        raise RunPermanentError(f"{why}: it is a {type(result).__name__}")
    try:
        text = json.dumps(dict(result), separators=(",", ":"), allow_nan=False)
    except (TypeError, ValueError, RecursionError) as exc:
        raise RunPermanentError(f"{why}: {exc}") from None
    size = len(text.encode())
    if size > RESULT_LIMIT:
        raise RunPermanentError(
            f"the run's result is {size} bytes of JSON; at most {RESULT_LIMIT} (keep a reference"
            " to your record, not the record)"
        )
    return replace(outcome, result=json.loads(text))


@dataclass(frozen=True)
class RunContext:
    """What a ``python`` runner target receives: the request and its cancel token."""

    request: RunRequest
    cancel: CancelToken


class Runner(Protocol):
    """Runs one agent turn.

    Contract:
    - ``run`` is idempotent by ``request.run_id``: it may be called again for the same run after
      a crash or a lost lease (with a higher ``attempt``) and must not duplicate an effect that
      the first call already made durable.
    - It returns a ``RunOutcome`` on success. It raises ``RunPermanentError`` when retrying
      cannot help (bad configuration, target gone, input rejected); any other exception is
      transient and the engine retries while attempts remain.
    - It watches ``cancel`` and stops promptly once it is set (timeout, user cancel, shutdown);
      the engine records the run as ``timed_out``, or as ``cancelled`` with the output an
      ``AttemptStopped`` it raised carries. With ``cancel.at_once`` it stops by force, without
      a grace period, if it can.
    - ``suspendable`` (optional, default false): it freezes its work while
      ``cancel.suspended`` and thaws it on ``resume``. The engine then suspends rather than
      cancels an attempt whose lease it cannot confirm in time; an unsuspendable one is
      cancelled at once instead.
    """

    async def run(self, request: RunRequest, cancel: CancelToken) -> RunOutcome: ...


class RunnerType(Protocol):
    """A named family of runners: validates configurations and builds runners from them."""

    name: str

    def validate(self, config: Mapping[str, Any]) -> dict[str, Any]:
        """Return the normalised config or raise ``InvalidSchedule`` naming ``runner.<field>``."""
        ...

    def build(self, config: Mapping[str, Any]) -> Runner:
        """A runner for a configuration that ``validate`` accepted."""
        ...
