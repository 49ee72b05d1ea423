"""One admitted attempt of a run, from its start to its record.

``Attempts.execute`` runs it: the runner of the run's saved config, the secrets that config
refers to (resolved now, redacted from everything recorded), under the timeout with a
cooperative cancel token (``AttemptDeadline``), and returns its ``Verdict``: the outcome or the
error, and what kind of error. ``Attempts.finish`` records that verdict (``RunStore.record``, in
a batch with the outcomes of the same moment), then hands the finished run to delivery. The
lease's fence around the attempt is ``web.engine.leases``; admission is ``web.engine.run``.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
import uuid
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from functools import cached_property
from typing import TYPE_CHECKING, Any

from agentcron.core.clock import Clock
from agentcron.core.errors import InvalidSchedule, RunPermanentError, TargetUnavailable
from agentcron.core.expectations import unmet
from agentcron.core.ledger.store import Outcome, RunStore, StartDecision
from agentcron.core.notify.delivery import TRIPPED
from agentcron.core.retry import RetryPolicy
from agentcron.core.runners import build_runner
from agentcron.core.runners.base import (
    AttemptStopped,
    CancelToken,
    RunOutcome,
    RunRequest,
    checked_outcome,
)
from agentcron.core.runners.containment import Containment
from agentcron.core.runners.handler import Handler
from agentcron.core.runners.threads import AgentThreads
from agentcron.core.secrets.keyring import Keyring
from agentcron.core.secrets.redaction import redact, redact_json
from agentcron.core.secrets.resolution import load, referenced_secrets
from agentcron.core.states import TERMINAL, RunStatus
from agentcron.core.storage.models import Run
from agentcron.web.engine.batching import GroupCommit, retrying
from agentcron.web.engine.delivery import Deliveries, run_log
from agentcron.web.engine.leases import LEASE_LOST, LEASE_UNCONFIRMED
from agentcron.web.engine.metrics import EngineMetrics
from agentcron.web.engine.runlines import RunLines
from agentcron.web.engine.slots import QUICK_SECONDS

if TYPE_CHECKING:
    from agentcron.core.otel import Tracing

HARD_STOP_GRACE = 15.0  # beyond the timeout, for runners that ignore their cancel token
RESULT_LINGER = 0.01  # seconds an outcome waits for others to share its transaction


class AttemptDeadline:
    """The one timer of an attempt. At ``timeout`` seconds it cancels the attempt's token (the
    runner stops on its own); ``grace`` seconds later, if the attempt is still awaited, it
    cancels the task awaiting it: the hard stop for a runner that ignores its token. Made in
    that task, since that is the task it stops."""

    def __init__(self, token: CancelToken, timeout: float, grace: float) -> None:
        self._loop = asyncio.get_running_loop()
        task = asyncio.current_task()
        assert task is not None
        self._task, self._token, self._grace = task, token, grace
        self._hard = False
        self._handle = self._loop.call_later(timeout, self._timed_out)

    def _timed_out(self) -> None:
        self._token.cancel("timeout")
        self._handle = self._loop.call_later(self._grace, self._hard_stop)

    def _hard_stop(self) -> None:
        self._hard = True
        self._task.cancel()

    def disarm(self) -> None:
        self._handle.cancel()

    def stopped_hard(self) -> bool:
        """Whether the ``CancelledError`` being handled is this hard stop; if so it is taken
        back, so the task goes on to record the attempt."""
        if self._hard:
            self._hard = False
            self._task.uncancel()
            return True
        return False


@dataclass
class Verdict:
    """What one attempt came to, waiting to be recorded."""

    run: Run
    workdir: str
    timeout: float
    owner: str  # this engine's instance id, named in every line about the run
    task_id: uuid.UUID
    outcome: RunOutcome | None = None
    error: str | None = None
    transient: bool = False
    unavailable: bool = False  # the runner can no longer work at all: pause the schedule
    cancelled: str | None = None  # the cancel token's reason, if it was cancelled
    partial: str | None = None  # what a stopped attempt's agent had written (``AttemptStopped``)
    kept: str | None = None  # the output of an attempt that missed its expectations
    returned_at: datetime | None = None  # when the agent returned (the run's ``output_at``)
    span: Any = None  # the attempt's span when the engine traces (``core.otel``)
    ended: str = "unrecorded"  # for the span: the status recorded, or why none was

    def missed(self, why: str) -> None:
        """The agent ended well but its output misses the schedule's expectations
        (``core.expectations``): a failure like any other, tried again while attempts remain,
        its output kept on the run to show what missed."""
        assert self.outcome is not None
        self.kept, self.outcome = self.outcome.output, None
        self.error, self.transient = f"expectation not met: {why}", True

    @cached_property
    def bound(self) -> Any:
        """The logger of every line about this attempt, bound at the first line: a run that goes
        well binds none when its lines are summarised (``AGENTCRON_LOG_RUNS=summary``) or the
        engine's info lines are off (binding it and building its two info lines were about a
        sixth of the engine's own work per run)."""
        return run_log(self.run, self.owner, attempt=self.run.attempt, task_id=str(self.task_id))

    def redact(self, secrets: Mapping[str, str]) -> None:
        """Replace every resolved secret value in what the attempt will record (its output, its
        turns, its result, its error) before it is recorded or logged: an agent that prints its
        key must not leak it through the API, a delivery or a log line."""
        self.error = redact(self.error, secrets)
        self.partial = redact(self.partial, secrets)
        self.kept = redact(self.kept, secrets)
        outcome = self.outcome
        if outcome is not None:
            self.outcome = RunOutcome(
                output=redact(outcome.output, secrets),
                turns=[
                    {**turn, "content": redact(turn["content"], secrets)}
                    if isinstance(turn.get("content"), str)
                    else turn
                    for turn in outcome.turns
                ],
                result=redact_json(outcome.result, secrets),
                usage=outcome.usage,
            )

    def to_record(self, retry: RetryPolicy | None, now: datetime) -> Outcome | None:
        """What the store records of the attempt (``RunStore.record``); None when nothing is
        recorded: an attempt stopped without an outcome (shutdown, a lease lost or
        unconfirmed) is given back or was taken, and goes on as a new attempt. A transient
        failure with an attempt left is tried again after ``retry``'s delay from ``now``
        (``retry`` is None for an attempt that did not fail transiently)."""
        run, cancelled = self.run, self.cancelled
        if cancelled == "timeout":
            # The half-finished output is not kept: channels that ask for timed_out runs get
            # the record without it (docs/design.md, promise 8).
            return Outcome(run, RunStatus.TIMED_OUT, error=f"timed out after {self.timeout:g} s")
        if cancelled == "cancel":
            # A cancelled run keeps what its agent had printed: nothing is delivered for it.
            return Outcome(run, RunStatus.CANCELLED, output=self.partial)
        if cancelled is not None:
            return None
        if self.outcome is not None and self.error is None:
            done = self.outcome
            result = None if done.result is None else dict(done.result)
            return Outcome(
                run,
                RunStatus.SUCCEEDED,
                output=done.output,
                output_at=self.returned_at,
                result=result,
                turns=done.turns,
            )
        if self.transient and retry is not None and run.attempt < retry.max_attempts:
            retry_at = now + timedelta(seconds=retry.delay(run.attempt))
            return Outcome(
                run,
                RunStatus.PENDING,
                output=self.kept,
                output_at=self.returned_at if self.kept is not None else None,
                error=self.error,
                retry_at=retry_at,
            )
        return Outcome(
            run,
            RunStatus.FAILED,
            output=self.kept,
            output_at=self.returned_at if self.kept is not None else None,
            error=self.error,
            pause_schedule=self.unavailable,
        )


class Attempts:
    """The attempts of one engine: each admitted run's agent, then its record. It shares the
    engine's ``suspendable`` (attempts whose runner can freeze, for the lease keeper) and
    ``recent`` (whether each recent attempt was quick, for the slots)."""

    def __init__(
        self,
        ledger: RunStore,
        *,
        clock: Clock,
        metrics: EngineMetrics,
        deliveries: Deliveries,
        suspendable: set[uuid.UUID],
        recent: deque[bool],
        wake: Callable[[], None],
        threads: AgentThreads,
        retry_base: float = 1.0,
        keyring: Keyring | None = None,
        containment: Containment | None = None,
        handler: Handler | None = None,
        lines: RunLines | None = None,
        tracing: Tracing | None = None,
    ) -> None:
        self.ledger = ledger
        self.tracing = tracing  # None unless the OpenTelemetry environment asks (core.tracing)
        self.clock = clock
        # Which of a run's lines are its own and which are summarised (AGENTCRON_LOG_RUNS).
        self.lines = lines or RunLines(each=False, instance_id=ledger.owner)
        self.metrics = metrics
        self.deliveries = deliveries
        self.suspendable = suspendable
        self.recent = recent
        self.wake = wake  # a retry is due later: the loop looks at its next wake-up again
        self.threads = threads
        self.retry_base = retry_base
        # AGENTCRON_SECRETS_KEY: decrypts the stored secrets runs refer to.
        self.keyring = keyring
        # Handed to every attempt: the agent processes' environment and sandbox.
        self.containment = containment or Containment()
        # The host's callable for ``handler`` schedules (``agentcron.Engine(handler=...)``).
        self.handler = handler
        # Outcomes wait a little to share a record's transaction: no run waits on its record
        # (its slot is already free), and in a burst this cuts the transactions several times.
        self.results: GroupCommit[Outcome, Run | None] = GroupCommit(
            retrying(self._store), linger=RESULT_LINGER, name="agentcron-results"
        )

    # The store's verb, looked up at each batch (so a test may stand in for it).
    async def _store(self, outcomes: Sequence[Outcome]) -> list[Run | None]:
        return await self.ledger.record(outcomes)

    async def execute(self, decision: StartDecision, token: CancelToken) -> Verdict:
        """Run the agent of an admitted attempt under its timeout; return what to record.
        ``token`` is the attempt's, held by the lease keeper for as long as it executes."""
        run, task = decision.run, decision.task
        assert run is not None and task is not None
        payload = run.payload
        timeout = float(payload["timeout_seconds"])
        deadline = AttemptDeadline(token, timeout, HARD_STOP_GRACE)
        verdict = Verdict(run, task.workdir, timeout, self.ledger.owner, task.id)
        if run.due_at is not None and run.attempt == 1:
            delay = (self.clock() - run.due_at).total_seconds()
            self.metrics.start_delay.observe(max(0.0, delay))
        if not self.lines.each:
            self.lines.count_start()
        elif self.lines.kept():
            due_at = run.due_at.isoformat() if run.due_at else None
            verdict.bound.info("run_started", trigger=run.trigger, due_at=due_at)
        began = time.monotonic()
        secrets: dict[str, str] = {}
        trace: dict[str, str] = {}
        if self.tracing is not None:
            verdict.span = span = self.tracing.attempt(run, payload["runner"]["type"], self.clock())
            trace = self.tracing.headers(span)
        try:
            try:
                runner = build_runner(payload["runner"], self.handler)
            except InvalidSchedule as exc:  # valid when the run was made: its plug-in is gone
                raise TargetUnavailable(exc.message) from exc
            names = referenced_secrets(payload["runner"], None)
            if names:
                found = await load(
                    self.ledger.db, None, names, keyring=self.keyring, schedule_id=run.schedule_id
                )
                secrets = found.check()
            if getattr(runner, "suspendable", False):
                self.suspendable.add(run.id)
            request = RunRequest.of(
                run,
                task,
                timeout=timeout,
                secrets=secrets,
                instance_id=self.ledger.owner,
                containment=self.containment,
                threads=self.threads,
                trace=trace,
            )
            # Awaited in place, not as a task of its own: a thread's return reaches this line a
            # loop turn later.
            verdict.outcome = checked_outcome(await runner.run(request, token))
            verdict.returned_at = self.clock()
            why = unmet(payload.get("expect"), verdict.outcome.output)
            if why is not None:
                verdict.missed(why)
        except TargetUnavailable as exc:
            verdict.error, verdict.unavailable = exc.message, True
        except (RunPermanentError, InvalidSchedule) as exc:
            verdict.error = exc.message
            verdict.partial = exc.output if isinstance(exc, AttemptStopped) else None
        except asyncio.CancelledError:
            # The deadline's hard stop (a runner that ignored its token), or a cancel the token
            # had already announced (a drain that ran out); any other is not ours to absorb.
            if not deadline.stopped_hard() and not token.cancelled:
                raise
            verdict.error = f"stopped ({token.reason})"
        except Exception as exc:
            verdict.error = f"{type(exc).__name__}: {exc}"
            verdict.transient = True
        finally:
            deadline.disarm()
            self.recent.append(time.monotonic() - began < QUICK_SECONDS)
            self.suspendable.discard(run.id)
        verdict.cancelled = token.reason if token.cancelled else None
        if verdict.cancelled == LEASE_UNCONFIRMED and verdict.outcome is not None:
            # The agent had returned when its fence fired (a stalled process sees both in one
            # turn): stopped and run again, its work would be done twice. It is recorded
            # instead, if the run is still this engine's, which the record checks.
            verdict.bound.warning(
                "run_lease_unconfirmed", action="outcome recorded: the agent had returned"
            )
            verdict.cancelled = None
        if secrets:
            verdict.redact(secrets)
        return verdict

    async def finish(self, verdict: Verdict) -> None:
        """Write the outcome of an attempt, then hand the finished run to delivery."""
        try:
            await self._finish(verdict)
        finally:
            if verdict.span is not None and self.tracing is not None:
                self.tracing.attempt_ended(
                    verdict.span, verdict.ended, verdict.error, verdict.outcome
                )

    async def _finish(self, verdict: Verdict) -> None:
        run, reason = verdict.run, verdict.cancelled
        if reason in (LEASE_LOST, LEASE_UNCONFIRMED):
            # The one line that says this replica stopped an attempt it could no longer vouch
            # for; the run goes on elsewhere (or here) as a new attempt.
            self.metrics.leases_lost.inc()
            cause = "taken over" if reason == LEASE_LOST else "renewal not confirmed in time"
            verdict.bound.warning("run_lease_lost", cause=cause, action="attempt stopped")
        if reason in ("shutdown", LEASE_UNCONFIRMED):
            # Still ours if the database only answered late: given back at once rather than
            # left to wait out the lease. Unreachable, the lease simply runs out.
            with contextlib.suppress(Exception):
                await self.ledger.release([run.id], started=True)
            if reason == "shutdown":
                verdict.bound.info("run_released", reason="shutdown")
            verdict.ended = "released"
            return
        retry = None
        if verdict.transient:  # most attempts need no policy: none is made for them
            retry = RetryPolicy(max_attempts=int(run.payload["max_attempts"]), base=self.retry_base)
        outcome = verdict.to_record(retry, self.clock())
        if outcome is None:
            verdict.ended = "lease_lost"
            return
        recorded = await self.results.submit(outcome)
        verdict.ended = recorded.status if recorded is not None else "lease_lost"
        if outcome.retry_at is not None:
            verdict.bound.warning(
                "run_retry_scheduled", error=verdict.error, retry_at=outcome.retry_at.isoformat()
            )
            self.wake()
            return
        if verdict.unavailable:
            verdict.bound.error("schedule_paused", reason=verdict.error)
        if recorded is None:
            verdict.bound.warning("run_lease_lost")
            return
        status = recorded.status
        if self.tracing is not None and status in TERMINAL:
            self.tracing.run_ended(recorded)
        if not self.lines.each:
            self.lines.count_end(status)
        # Under ``summary`` a success is only counted; any other end keeps its own line.
        if (self.lines.each or status != RunStatus.SUCCEEDED) and self.lines.kept():
            verdict.bound.info("run_finished", status=status, error=recorded.error)
        if recorded.reason == TRIPPED:
            verdict.bound.warning(
                "circuit_breaker_tripped", paused="schedule", error=recorded.error
            )
        self.metrics.ended(recorded.status, recorded.trigger)
        if recorded.started_at is not None and recorded.finished_at is not None:
            self.metrics.duration.observe(
                (recorded.finished_at - recorded.started_at).total_seconds()
            )
        # The outcome was recorded with a delivery lease only if a channel applies.
        if recorded.deliver_until is not None:
            self.deliveries.start(recorded, verdict.workdir, verdict.bound, verdict.span)
