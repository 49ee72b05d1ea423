"""What happens to one run, top to bottom.

1. **Dispatch**: every run a claim leased here gets a task; a jittered run sleeps until its
   ``available_at``.
2. **Admit**, under the concurrency semaphore, in a batch with the runs starting at the same
   moment (``RunStore.admit``: overlap policy, the task's run lock, or why it does not start);
   a run the claim admitted skips this, and one that needs no look at other runs may be
   admitted before its slot frees, while attempts are quick.
3. **Execute**: the runner (chosen by ``web.engine.attempt``) runs the agent under the timeout with
   a cooperative cancel token; ``web.engine.leases`` renews the lease and stops the attempt if the
   lease may be another's. Referenced secrets are resolved now and redacted from everything
   recorded.
4. **Record**, with the slot freed, in a batch with the outcomes of the same moment
   (``RunStore.record``): an end, a retry, a cancel, a chat turn, a runner gone; the store
   applies the circuit breaker and hands back the run as written.
5. **Deliver**, outside the slot, under a delivery lease (``web.engine.delivery``).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
import uuid
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta

from agentcron.core.clock import Clock
from agentcron.core.errors import (
    AgentcronError,
    InvalidSchedule,
    RunPermanentError,
    TargetUnavailable,
)
from agentcron.core.ledger.store import Outcome, PreparedTask, RunStore, StartDecision
from agentcron.core.logging import logs_at
from agentcron.core.notify.delivery import DEFAULT_POLICY, TRIPPED
from agentcron.core.retry import RetryPolicy
from agentcron.core.runners.base import AttemptStopped, CancelToken, checked_outcome
from agentcron.core.runners.containment import Containment
from agentcron.core.runners.handler import Handler
from agentcron.core.secrets.keyring import Keyring
from agentcron.core.secrets.references import referenced_secrets
from agentcron.core.secrets.resolution import load
from agentcron.core.storage.models import Run
from agentcron.web.engine.attempt import request_for, runner_for
from agentcron.web.engine.batching import GroupCommit, retrying
from agentcron.web.engine.delivery import Deliveries, run_log
from agentcron.web.engine.leases import LEASE_LOST, LEASE_UNCONFIRMED, LeaseKeeper
from agentcron.web.engine.metrics import EngineMetrics
from agentcron.web.engine.slots import QUICK_SECONDS, Slots
from agentcron.web.engine.timing import AttemptDeadline, sleep_or_stop
from agentcron.web.engine.verdict import Verdict, redact_verdict

# The logger of every run's lines (``web.engine.delivery.run_log``): whether its info lines
# are kept is asked before a run's two (started, finished) are made, since structlog drops them
# only after they were bound and built.
LINES = logging.getLogger("agentcron.engine")

WAIT_POLL_SECONDS = 0.5  # how often a run waiting on overlap or a run lock looks again
HARD_STOP_GRACE = 15.0  # beyond the timeout, for runners that ignore their cancel token
RESULT_LINGER = 0.01  # seconds an outcome waits for others to share its transaction


class RunEngine(Slots):
    """The runs of one engine instance: from dispatch to delivery."""

    def __init__(
        self,
        ledger: RunStore,
        *,
        concurrency: int,
        clock: Clock,
        stopping: asyncio.Event,
        wake: Callable[[], None],
        on_error: Callable[[BaseException], None],
        metrics: EngineMetrics,
        retry_base: float = 1.0,
        allow_private: bool = False,
        delivery_policy: RetryPolicy = DEFAULT_POLICY,
        keyring: Keyring | None = None,
        containment: Containment | None = None,
        handler: Handler | None = None,
    ) -> None:
        super().__init__(concurrency)
        self.ledger = ledger
        # The host's callable for ``handler`` schedules (``agentcron.Engine(handler=...)``).
        self.handler = handler
        self.clock = clock
        self.metrics = metrics
        self.retry_base = retry_base
        # AGENTCRON_SECRETS_KEY: decrypts the stored secrets runs and deliveries refer to.
        self.keyring = keyring
        # Handed to every attempt: the agent processes' environment and sandbox.
        self.containment = containment or Containment()
        # A thread per slot for sync agents (made as needed, kept while idle): every slot can
        # block at once, as a ``command`` agent's process can.
        self.threads = ThreadPoolExecutor(concurrency, thread_name_prefix="agentcron-agent")
        self._stop = stopping
        self.wake = wake
        self.delivering: set[uuid.UUID] = set()  # runs whose deliveries are being made here
        self.suspendable: set[uuid.UUID] = set()  # attempts whose runner can freeze
        self.tasks: set[asyncio.Task[None]] = set()  # runs and deliveries in hand
        self.leases = LeaseKeeper(
            ledger,
            clock,
            tokens=self.tokens,
            held=self.held,
            delivering=self.delivering,
            suspendable=self.suspendable,
            on_error=on_error,
        )
        self.deliveries = Deliveries(
            ledger,
            clock=clock,
            metrics=metrics,
            delivering=self.delivering,
            tasks=self.tasks,
            allow_private=allow_private,
            policy=delivery_policy,
            keyring=keyring,
        )
        self.metrics.in_flight.set_function(lambda: len(self.tokens))
        # Runs that start at the same moment share an admission's transaction, and outcomes
        # wait a little to share a record's: no run waits on its record (its slot is already
        # free), and in a burst this cuts the transactions several times over.
        self.admissions: GroupCommit[Run, StartDecision] = GroupCommit(
            retrying(self._admit), name="agentcron-admissions"
        )
        self.results: GroupCommit[Outcome, Run | None] = GroupCommit(
            retrying(self._store), linger=RESULT_LINGER, name="agentcron-results"
        )

    # The store's verbs, looked up at each batch (so a test may stand in for one).
    async def _admit(self, runs: Sequence[Run]) -> list[StartDecision]:
        return await self.ledger.admit(runs)

    async def _store(self, outcomes: Sequence[Outcome]) -> list[Run | None]:
        return await self.ledger.record(outcomes)

    def dispatch(self, run: Run, workdir: str | None = None, *, started: bool = False) -> None:
        """Take a claimed run in hand. ``workdir``: the run's task came with the claim (it
        needs no look at other runs); ``started``: the claim admitted it too, and it runs as
        soon as it has its slot."""
        if run.id in self.held:
            return
        self.held.add(run.id)
        decision = None
        if started and workdir is not None and run.task_id is not None:
            self.admitted.add(run.id)
            decision = StartDecision("run", run, PreparedTask(run.task_id, workdir))
        job = self._execute(run, decision, ahead=workdir is not None)
        task = asyncio.create_task(job, name=f"agentcron-run-{run.id}")
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)

    async def _execute(self, run: Run, decision: StartDecision | None, *, ahead: bool) -> None:
        """Admit, run and record one run. ``decision``: the claim admitted it. ``ahead``: it
        needs no look at other runs, so it may be admitted before its slot frees (while
        attempts are quick), and a slot then goes on to it with no round trip."""
        verdict: Verdict | None = None
        try:
            # A jittered run (``jitter_seconds``) was claimed at its due time but starts at its
            # ``available_at``; the lease is renewed meanwhile like any claimed backlog.
            delay = (run.available_at - self.clock()).total_seconds()
            if delay > 0:
                await sleep_or_stop(self._stop, delay)
            if decision is None and ahead and self.admit_ahead():
                decision = await self.admissions.submit(run)
                if decision.action == "run":
                    self.admitted.add(run.id)  # a stop gives it back as a running attempt
            while not self._stop.is_set():
                async with self.semaphore:
                    if self._stop.is_set():
                        break
                    if run.id in self.admitted:
                        # Admitted before its slot freed: a long wait is confirmed first.
                        if not await self.leases.confirm(run):
                            self.admitted.discard(run.id)
                            decision = StartDecision("lost")
                    elif decision is None or decision.action == "wait":
                        decision = await self.admissions.submit(run)
                    assert decision is not None  # the claim's, or admitted ahead, or just now
                    if decision.action == "run":
                        # The slot is freed once the agent is done; recording happens outside
                        # it, in a batch with the runs finishing at the same moment.
                        verdict = await self._attempt(decision)
                        break
                if decision.action != "wait":
                    self._not_started(run, decision)
                    return
                await sleep_or_stop(self._stop, WAIT_POLL_SECONDS)
            if verdict is not None:
                self.recording.add(run.id)
                self.slot_freed.set()
                try:
                    await self._record(verdict)
                finally:
                    self.recording.discard(run.id)
        except Exception as exc:
            # A database outage mid-run: the lease lapses and a replica (or this one, once the
            # database is back) takes the run over; nothing is lost.
            run_log(run, self.ledger.owner).error(
                "run_interrupted", error=str(exc), exc_info=not isinstance(exc, AgentcronError)
            )
        finally:
            # Once stopping, a run that never started stays listed so ``stop()`` releases it
            # even if this task gave up before ``stop()`` looked (a slot freed meanwhile).
            if not self._stop.is_set():
                self.held.discard(run.id)
                self.slot_freed.set()

    def _not_started(self, run: Run, decision: StartDecision) -> None:
        """The run ended without an attempt (``done``), or is not ours (``lost``)."""
        if decision.action == "done" and decision.run is not None:
            self.metrics.ended(decision.run.status, decision.run.trigger)
            run_log(run, self.ledger.owner).info(
                "run_not_started", status=decision.run.status, reason=decision.run.reason
            )

    async def _attempt(self, decision: StartDecision) -> Verdict:
        """Run the agent for an admitted attempt; return what to record."""
        run, task = decision.run, decision.task
        assert run is not None and task is not None
        payload = run.payload
        token = CancelToken()
        self.tokens[run.id] = token
        self.admitted.discard(run.id)
        assert run.lease_expires_at is not None  # set by the admission
        self.leases.fence(run.id, run.lease_expires_at)
        timeout = float(payload["timeout_seconds"])
        deadline = AttemptDeadline(token, timeout, HARD_STOP_GRACE)
        verdict = Verdict(run, task.workdir, timeout, self.ledger.owner, task.id)
        if run.due_at is not None and run.attempt == 1:
            delay = (self.clock() - run.due_at).total_seconds()
            self.metrics.start_delay.observe(max(0.0, delay))
        if logs_at(LINES, logging.INFO):
            verdict.bound.info(
                "run_started",
                trigger=run.trigger,
                due_at=run.due_at.isoformat() if run.due_at else None,
            )
        began = time.monotonic()
        secrets: dict[str, str] = {}
        try:
            runner = runner_for(payload["runner"], self.handler)
            names = referenced_secrets(payload["runner"], None)
            if names:
                found = await load(
                    self.ledger.db, None, names, keyring=self.keyring, schedule_id=run.schedule_id
                )
                secrets = found.check()
            if getattr(runner, "suspendable", False):
                self.suspendable.add(run.id)
            request = request_for(
                run,
                task,
                timeout=timeout,
                secrets=secrets,
                instance_id=self.ledger.owner,
                containment=self.containment,
                threads=self.threads,
            )
            # Awaited in place, not as a task of its own: a thread's return reaches this line a
            # loop turn later.
            verdict.outcome = checked_outcome(await runner.run(request, token))
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
            self.tokens.pop(run.id, None)
            self.suspendable.discard(run.id)
            self.leases.disarm(run.id)
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
            redact_verdict(verdict, secrets)
        return verdict

    async def _record(self, verdict: Verdict) -> None:
        """Write the outcome of an attempt, then hand the finished run to delivery."""
        run, reason, bound = verdict.run, verdict.cancelled, verdict.bound
        if reason in (LEASE_LOST, LEASE_UNCONFIRMED):
            # The one line that says this replica stopped an attempt it could no longer vouch
            # for; the run goes on elsewhere (or here) as a new attempt.
            self.metrics.leases_lost.inc()
            cause = "taken over" if reason == LEASE_LOST else "renewal not confirmed in time"
            bound.warning("run_lease_lost", cause=cause, action="attempt stopped")
        if reason in ("shutdown", LEASE_UNCONFIRMED):
            # Still ours if the database only answered late: given back at once rather than
            # left to wait out the lease. Unreachable, the lease simply runs out.
            with contextlib.suppress(Exception):
                await self.ledger.release([run.id], started=True)
            if reason == "shutdown":
                bound.info("run_released", reason="shutdown")
            return
        attempts = int(run.payload["max_attempts"])
        retry_at = None
        if verdict.transient and run.attempt < attempts:
            policy = RetryPolicy(max_attempts=attempts, base=self.retry_base)
            retry_at = self.clock() + timedelta(seconds=policy.delay(run.attempt))
        outcome = verdict.to_record(retry_at)
        if outcome is None:
            return
        recorded = await self.results.submit(outcome)
        if retry_at is not None:
            bound.warning("run_retry_scheduled", error=verdict.error, retry_at=retry_at.isoformat())
            self.wake()
            return
        if verdict.unavailable:
            bound.error("schedule_paused", reason=verdict.error)
        await self._finished(recorded, verdict)

    async def _finished(self, run: Run | None, verdict: Verdict) -> None:
        if run is None:
            verdict.bound.warning("run_lease_lost")
            return
        if logs_at(LINES, logging.INFO):
            verdict.bound.info("run_finished", status=run.status, error=run.error)
        if run.reason == TRIPPED:
            verdict.bound.warning("circuit_breaker_tripped", paused="schedule", error=run.error)
        self.metrics.ended(run.status, run.trigger)
        if run.started_at is not None and run.finished_at is not None:
            self.metrics.duration.observe((run.finished_at - run.started_at).total_seconds())
        # The outcome was recorded with a delivery lease only if a channel applies.
        if run.deliver_until is not None:
            self.deliveries.start(run, verdict.workdir, verdict.bound)

    def cancel_local(self, run_id: uuid.UUID) -> None:
        """Stop an attempt running in this process at once (the API's cancel)."""
        token = self.tokens.get(run_id)
        if token is not None:
            token.cancel("cancel")
