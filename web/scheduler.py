"""The scheduling loop and the execution of one run.

The loop waits on whichever comes first: the earliest due time, a wake-up (a schedule changed
here, or a PostgreSQL NOTIFY from another replica), the stop event, or the tick. It then claims
due work (``Ledger.claim_due_jobs``) and starts one task per claimed run; a full batch loops
again at once. Each run executes under the concurrency semaphore: admit the attempt
(lease, overlap policy, task, run lock), run the agent under its timeout with a cooperative
cancel token, record the outcome, then deliver it. A heartbeat renews the leases this process
holds (on runs, and on the deliveries it is making) and relays cancel requests. Deliveries
whose lease ran out (their process died before it was done) are taken over when the loop
wakes for them. The loop survives every exception and keeps ticking; the loop, heartbeat,
listener and retention tasks run under a ``web.supervisor.Supervisor``, which restarts any of
them that dies and reports it unready meanwhile.

A run is never executing in two places at once. An attempt whose lease could not be
confirmed until shortly before it runs out (``fence_margin`` ahead of it: the database is
unreachable, or the renewal is stuck) is frozen before any other replica may take it over: a
``command`` agent's process group gets SIGSTOP (``CancelToken.suspend``), and SIGCONT once a
renewal confirms the lease is still ours, so a database outage costs no work; a runner that
cannot freeze is stopped instead. An attempt whose lease was taken over (a renewal no longer
finds it ours) is stopped at once, frozen or not: ``CancelToken.cancel(..., at_once=True)``,
SIGKILL of the process group, no grace period.

A run whose runner refers to its owner's stored secrets (``core.secrets``) gets their values
in ``RunRequest.secrets``, read with one query when the attempt starts; a secret deleted since
fails the run naming it (and pauses the schedule, as any runner that can no longer work). Every
resolved value is replaced by ``[secret:NAME]`` in the attempt's output, error and turns before
anything is recorded or logged.

Every "now" of the loop comes from its ``clock``: on PostgreSQL the database's time
(``core.clock.DatabaseClock``, kept in step by ``web.clockwatch``), so replicas on hosts whose
clocks disagree still agree on what is due and which lease ran out.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
import uuid
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any, TypeVar

import asyncpg
from sqlalchemy.engine import make_url

from core.batching import GroupCommit
from core.clock import Clock, utcnow
from core.errors import (
    AgentcronError,
    InvalidSchedule,
    RunPermanentError,
    SchedulerUnavailable,
    TargetUnavailable,
)
from core.logging import get_logger
from core.notify.delivery import DEFAULT_POLICY, TRIPPED, deliver_run
from core.retention import PruneReport, RetentionPolicy, prune_runs
from core.retry import RetryPolicy
from core.runners import CancelToken, RunOutcome, RunRequest, build_runner
from core.runners.containment import Containment
from core.scheduler import (
    Ledger,
    Outcome,
    PreparedTask,
    StartDecision,
    error_excerpt,
    output_excerpt,
    run_view,
)
from core.schedules import WAKE_CHANNEL
from core.secrets import Keyring, load, redact, referenced_secrets
from core.storage import Run
from web.metrics import EngineMetrics
from web.supervisor import Supervisor

log = get_logger("agentcron.engine")
Item = TypeVar("Item")

CLAIM_BATCH = 500  # the most due schedules one claim takes
# The first claim after a quiet spell takes few, so the first runs of a burst start after
# planning tens of schedules, not hundreds; each full claim after it takes four times more.
FIRST_CLAIM = 32
RECHECK_SECONDS = 0.05  # due work another replica holds locked: look again after this
WAIT_POLL_SECONDS = 0.5  # how often a run waiting on overlap or a run lock looks again
HARD_STOP_GRACE = 15.0  # beyond the timeout, for runners that ignore their cancel token
RESULT_LINGER = 0.01  # seconds an outcome waits for others to share its transaction
WRITE_TRIES = 3  # a batched write that fails (a deadlock, a blip) is tried this many times
DELIVERY_BATCH = 100  # the most runs whose deliveries one look takes over
SERVICES = ("loop", "heartbeat", "listen", "retention")  # the loop's supervised tasks
# Cancel reasons of an attempt stopped because its lease is, or is about to be, another's.
LEASE_LOST = "lease_lost"  # the renewal no longer found the run ours: taken over
LEASE_UNCONFIRMED = "lease_unconfirmed"  # no renewal confirmed before the lease runs out


@dataclass(frozen=True)
class EngineProperties:
    """What this engine promises, logged at start (contract point 14)."""

    instance_id: str
    dialect: str
    recovery_scope: str
    max_active_schedules: int
    pause_visibility: str
    lease_seconds: float
    tick_seconds: float
    concurrency: int
    clock: str  # "database": due times and leases by the database's clock; "local": SQLite
    sandbox: str  # "none", or "bwrap (network host|none)": where command agents run
    agent_env: list[str]  # service variables every agent process inherits (AGENTCRON_AGENT_ENV)


@dataclass
class Verdict:
    """What one attempt came to, waiting to be recorded."""

    run: Run
    workdir: str
    timeout: float
    bound: Any  # the run's bound logger
    batch: bool  # a prepared run: plain outcomes are recorded in a batch
    outcome: RunOutcome | None = None
    error: str | None = None
    transient: bool = False
    unavailable: bool = False  # the runner can no longer work at all: pause the schedule
    cancelled: str | None = None  # the cancel token's reason, if it was cancelled


def _prepared_decision(
    run: Run, workdir: str, started: datetime, lease_seconds: float
) -> StartDecision:
    """The in-memory twin of a prepared run that ``admit_batch`` marked running."""
    run.status, run.reason, run.started_at = "running", None, run.started_at or started
    run.attempt += 1
    run.lease_expires_at = started + timedelta(seconds=lease_seconds)
    assert run.task_id is not None
    return StartDecision("run", run, PreparedTask(run.task_id, workdir), True)


def _redact_verdict(verdict: Verdict, secrets: Mapping[str, str]) -> None:
    """Replace every resolved secret value in what the attempt will record (its output, its
    turns, its error) before it is recorded or logged: an agent that prints its key must not
    leak it through the API, a delivery or a log line."""
    verdict.error = redact(verdict.error, secrets)
    outcome = verdict.outcome
    if outcome is not None:
        verdict.outcome = RunOutcome(
            output=redact(outcome.output, secrets),
            turns=[
                {**turn, "content": redact(turn["content"], secrets)}
                if isinstance(turn.get("content"), str)
                else turn
                for turn in outcome.turns
            ],
        )


class SchedulerLoop:
    """One process's engine: claim, dispatch, heartbeat, listen; ``stop()`` drains."""

    def __init__(
        self,
        ledger: Ledger,
        *,
        concurrency: int = 4,
        tick_seconds: float = 10.0,
        drain_timeout: float = 30.0,
        clock: Clock = utcnow,
        retry_base: float = 1.0,
        allow_private: bool = False,
        delivery_policy: RetryPolicy = DEFAULT_POLICY,
        metrics: EngineMetrics | None = None,
        retention: RetentionPolicy | None = None,
        retention_interval: float = 3600.0,
        supervisor: Supervisor | None = None,
        keyring: Keyring | None = None,
        containment: Containment | None = None,
    ) -> None:
        self.ledger = ledger
        # AGENTCRON_SECRETS_KEY: decrypts the stored secrets runs and deliveries refer to.
        self.keyring = keyring
        # Handed to every attempt: the agent processes' environment and sandbox.
        self.containment = containment or Containment()
        self.retention = retention
        self.retention_interval = retention_interval
        self.allow_private = allow_private
        self.delivery_policy = delivery_policy
        self.tick = tick_seconds
        self.drain_timeout = drain_timeout
        self.clock = clock
        self.retry_base = retry_base
        self.semaphore = asyncio.Semaphore(concurrency)
        self._wake = asyncio.Event()
        self._stop = asyncio.Event()
        self._held: set[uuid.UUID] = set()  # runs leased by this process
        self._tokens: dict[uuid.UUID, CancelToken] = {}  # attempts executing now
        self._delivering: set[uuid.UUID] = set()  # runs whose deliveries are being made here
        self._runs: set[asyncio.Task[None]] = set()
        self._loop_task: asyncio.Task[None] | None = None
        # Each executing attempt's stop, armed ``fence_margin`` before its confirmed lease runs
        # out and moved on by every renewal (see the module docstring).
        self._fences: dict[uuid.UUID, asyncio.TimerHandle] = {}
        self._suspendable: set[uuid.UUID] = set()  # attempts whose runner can freeze
        lease = ledger.lease_seconds
        self.fence_margin = min(max(1.0, lease / 6), lease / 4)
        self._healthy: bool | None = None
        self.iterations = 0
        self.running = False
        self.metrics = metrics or EngineMetrics()
        self.supervisor = supervisor or Supervisor(self.metrics)
        self.metrics.in_flight.set_function(lambda: len(self._tokens))
        self._admissions = GroupCommit(
            self._retrying(ledger.admit_batch), name="agentcron-admissions"
        )
        # Outcomes wait a little to share a transaction: no run waits on its record (its slot is
        # already free), and in a burst this cuts the transactions several times over.
        self._results = GroupCommit(
            self._retrying(ledger.record_batch), linger=RESULT_LINGER, name="agentcron-results"
        )

    # -- lifecycle ------------------------------------------------------------------------

    def wake(self) -> None:
        """Re-plan now (a schedule changed, a run was queued or cancelled)."""
        self._wake.set()

    def start(self) -> None:
        self.running = True
        self._loop_task = self.supervisor.spawn("loop", self._run_loop)
        self.supervisor.spawn("heartbeat", self._heartbeat)
        if self.ledger.db.capabilities.listen_notify:
            self.supervisor.spawn("listen", self._listen)
        if self.retention is not None:
            retention = self.retention
            self.supervisor.spawn("retention", lambda: self._prune(retention))

    async def stop(self) -> None:
        """Stop claiming, let in-flight runs finish up to the drain timeout, then cancel the
        rest and release their leases so another replica continues them at once."""
        self._stop.set()
        self.wake()
        if self._loop_task is not None:
            await asyncio.wait({self._loop_task}, timeout=10)
        queued = [run_id for run_id in self._held if run_id not in self._tokens]
        with contextlib.suppress(AgentcronError):
            await self.ledger.release(queued)
        if self._runs:
            _, pending = await asyncio.wait(set(self._runs), timeout=self.drain_timeout)
            if pending:
                log.warning("drain_timeout", cancelling=len(self._tokens))
                for token in list(self._tokens.values()):
                    token.cancel("shutdown")
                await asyncio.wait(pending, timeout=HARD_STOP_GRACE)
                for task in pending:
                    task.cancel()
        await self.supervisor.stop(*SERVICES)
        for fence in self._fences.values():
            fence.cancel()
        self._fences.clear()
        self.running = False

    @property
    def flushes(self) -> dict[str, int]:
        """Batched transactions written so far: admissions and results (diagnostics)."""
        return {"admissions": self._admissions.flushes, "results": self._results.flushes}

    @property
    def healthy(self) -> bool:
        """Running, the last look at the database worked, and none of its tasks is down."""
        down = set(self.supervisor.down).intersection(SERVICES)
        return self.running and self._healthy is not False and not down

    def _set_health(self, healthy: bool, error: BaseException | None = None) -> None:
        # Log once per state change, not once per tick, so an outage is one line.
        if healthy != self._healthy:
            if healthy:
                log.info("engine_healthy")
            elif isinstance(error, SchedulerUnavailable):
                log.error("SchedulerUnavailable", error=error.message)
            else:
                log.error("engine_error", exc_info=error)
        self._healthy = healthy

    # -- the loop -------------------------------------------------------------------------

    async def _run_loop(self) -> None:
        # One cheap look per wake-up (the earliest instant anything could be due) decides
        # whether to claim at all, so an idle replica sends one statement per tick.
        batch = FIRST_CLAIM
        while not self._stop.is_set():
            self._wake.clear()
            self.iterations += 1
            self.metrics.iterations.inc()
            timeout = self.tick
            try:
                now = self.clock()
                wake = await self.ledger.next_wakeup()
                deliveries_due = wake.deliveries is not None and wake.deliveries <= now
                if deliveries_due and await self._recover_deliveries(now):
                    self._set_health(True)
                    continue  # look again: more may have run out, and the next instant moved
                wake_at = wake.work
                if wake_at is not None and wake_at <= now:
                    began = time.perf_counter()
                    claim = await self.ledger.claim_due_jobs(now, batch)
                    self.metrics.claim_duration.observe(time.perf_counter() - began)
                    if claim.runs:
                        self.metrics.claim_size.observe(len(claim.runs))
                    for run in claim.runs:
                        self._dispatch(run, claim.prepared.get(run.id))
                    if claim.recovered:
                        self.metrics.lease_recoveries.inc(claim.recovered)
                        log.info("leases_recovered", runs=claim.recovered)
                    batch = min(batch * 4, CLAIM_BATCH) if claim.full else FIRST_CLAIM
                    self._set_health(True)
                    if claim.runs or claim.full:
                        continue  # claim again, or look when the next work is due
                    # Due, yet nothing claimable: another replica holds those rows this
                    # instant. Look again shortly rather than spin.
                    timeout = RECHECK_SECONDS
                elif deliveries_due:
                    # Run out, yet none taken: another replica is taking them this instant.
                    timeout = RECHECK_SECONDS
                elif wake.at is not None:
                    # +1 ms: asyncio may fire a timer a hair early, and a claim an instant
                    # before the due time finds nothing.
                    delay = (wake.at - self.clock()).total_seconds() + 0.001
                    timeout = max(0.0, min(self.tick, delay))
                self._set_health(True)
            except Exception as exc:  # the loop survives everything and keeps ticking
                self.metrics.errors.inc()
                self._set_health(False, exc)
                timeout = min(self.tick, 1.0)
            await self._sleep(timeout)

    async def _sleep(self, seconds: float) -> None:
        if seconds <= 0 or self._stop.is_set():
            return
        waiters = {
            asyncio.ensure_future(self._wake.wait()),
            asyncio.ensure_future(self._stop.wait()),
        }
        try:
            await asyncio.wait(waiters, timeout=seconds, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for waiter in waiters:
                waiter.cancel()

    async def _recover_deliveries(self, now: datetime) -> bool:
        """Take over deliveries whose lease ran out and make them here; True if any."""
        taken = await self.ledger.take_over_deliveries(now, DELIVERY_BATCH)
        for run, workdir in taken:
            if run.id not in self._delivering:  # ours already: its renewal just lapsed
                bound = self._run_log(run)
                self._start_delivery(run, workdir, bound)
        if taken:
            self.metrics.delivery_recoveries.inc(len(taken))
            log.info("deliveries_recovered", runs=len(taken))
        return bool(taken)

    def _run_log(self, run: Run) -> Any:
        # Every line about a run names it, its schedule and this process, so one grep over
        # the logs of all replicas follows a run through claims, attempts and takeovers.
        return log.bind(
            run_id=str(run.id), schedule_id=str(run.schedule_id), instance_id=self.ledger.owner
        )

    def _dispatch(self, run: Run, workdir: str | None = None) -> None:
        if run.id in self._held:
            return
        self._held.add(run.id)
        task = asyncio.create_task(self._execute(run, workdir), name=f"agentcron-run-{run.id}")
        self._runs.add(task)
        task.add_done_callback(self._runs.discard)

    # -- one run --------------------------------------------------------------------------

    async def _execute(self, run: Run, prepared: str | None) -> None:
        """Admit, run and record one run. ``prepared`` is the working directory of a run whose
        task came with the claim (``Claim.prepared``): it is admitted in a batch with the runs
        starting at the same moment; if that fails, or for any other run, ``start_attempt``
        admits it alone or says why it does not run."""
        bound = self._run_log(run)
        verdict: Verdict | None = None
        try:
            # A jittered run (``jitter_seconds``) was claimed at its due time but starts at its
            # ``available_at``; the lease is renewed meanwhile like any claimed backlog.
            delay = (run.available_at - self.clock()).total_seconds()
            if delay > 0:
                await self._sleep_or_stop(delay)
            while not self._stop.is_set():
                async with self.semaphore:
                    if self._stop.is_set():
                        break
                    decision: StartDecision | None = None
                    if prepared is not None:
                        started = await self._admissions.submit((run.id, run.schedule_id))
                        if started is not None:
                            decision = _prepared_decision(
                                run, prepared, started, self.ledger.lease_seconds
                            )
                    if decision is None:
                        prepared = None
                        decision = await self.ledger.start_attempt(run.id)
                    if decision.action == "run":
                        # The slot is freed once the agent is done; recording happens outside
                        # it, in a batch with the runs finishing at the same moment.
                        verdict = await self._attempt(decision, bound, batch=prepared is not None)
                        break
                if decision.action in ("done", "lost"):
                    if decision.action == "done" and decision.run is not None:
                        self.metrics.runs.labels(decision.run.status, decision.run.trigger).inc()
                        bound.info(
                            "run_not_started",
                            status=decision.run.status,
                            reason=decision.run.reason,
                        )
                    return
                await self._sleep_or_stop(WAIT_POLL_SECONDS)
            if verdict is not None:
                await self._record(verdict)
        except Exception as exc:
            # A database outage mid-run: the lease lapses and a replica (or this one, once the
            # database is back) takes the run over; nothing is lost.
            bound.error(
                "run_interrupted", error=str(exc), exc_info=not isinstance(exc, AgentcronError)
            )
        finally:
            # Once stopping, a run that never started stays listed so ``stop()`` releases it
            # even if this task gave up before ``stop()`` looked (a slot freed meanwhile).
            if not self._stop.is_set():
                self._held.discard(run.id)

    async def _sleep_or_stop(self, seconds: float) -> None:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._stop.wait(), seconds)

    async def _attempt(self, decision: StartDecision, bound: Any, *, batch: bool) -> Verdict:
        """Run the agent for an admitted attempt; return what to record."""
        run, task = decision.run, decision.task
        assert run is not None and task is not None
        payload = run.payload
        bound = bound.bind(attempt=run.attempt, task_id=str(task.id))
        token = CancelToken()
        self._tokens[run.id] = token
        assert run.lease_expires_at is not None  # set by the admission
        self._fence(run.id, run.lease_expires_at)
        timeout = float(payload["timeout_seconds"])
        timer = asyncio.get_running_loop().call_later(timeout, token.cancel, "timeout")
        verdict = Verdict(run, task.workdir, timeout, bound, batch)
        if run.due_at is not None and run.attempt == 1:
            delay = (self.clock() - run.due_at).total_seconds()
            self.metrics.start_delay.observe(max(0.0, delay))
        bound.info(
            "run_started",
            trigger=run.trigger,
            due_at=run.due_at.isoformat() if run.due_at else None,
        )
        secrets: dict[str, str] = {}
        try:
            try:
                runner = build_runner(payload["runner"])
            except InvalidSchedule as exc:  # its type was valid once: the plug-in is gone
                raise TargetUnavailable(exc.message) from exc
            names = referenced_secrets(payload["runner"], None)
            if names:
                found = await load(
                    self.ledger.db, None, names, keyring=self.keyring, schedule_id=run.schedule_id
                )
                secrets = found.check()
            if getattr(runner, "suspendable", False):
                self._suspendable.add(run.id)
            request = RunRequest(
                run_id=run.id,
                schedule_id=run.schedule_id,
                task_id=task.id,
                attempt=run.attempt,
                trigger=run.trigger,
                due_at=run.due_at,
                prompt=str(payload["prompt"]),
                workdir=Path(task.workdir),
                timeout_seconds=timeout,
                history=list(task.conversation) if payload.get("mode") == "persistent" else [],
                secrets=secrets,
                instance_id=self.ledger.owner,
                containment=self.containment,
            )
            job = asyncio.ensure_future(runner.run(request, token))
            done, _ = await asyncio.wait({job}, timeout=timeout + HARD_STOP_GRACE)
            if not done:  # the runner ignored its cancel token: stop it the hard way
                token.cancel("timeout")
                job.cancel()
                await asyncio.wait({job}, timeout=5)
            verdict.outcome = job.result()
        except TargetUnavailable as exc:
            verdict.error, verdict.unavailable = exc.message, True
        except (RunPermanentError, InvalidSchedule) as exc:
            verdict.error = exc.message
        except asyncio.CancelledError:
            if not token.cancelled:
                raise
            verdict.error = f"stopped ({token.reason})"
        except Exception as exc:
            verdict.error = f"{type(exc).__name__}: {exc}"
            verdict.transient = True
        finally:
            timer.cancel()
            self._tokens.pop(run.id, None)
            self._suspendable.discard(run.id)
            fence = self._fences.pop(run.id, None)
            if fence is not None:
                fence.cancel()
        verdict.cancelled = token.reason if token.cancelled else None
        if secrets:
            _redact_verdict(verdict, secrets)
        return verdict

    async def _record(self, verdict: Verdict) -> None:
        """Write the outcome of an attempt, then hand the finished run to delivery."""
        run, bound = verdict.run, verdict.bound
        if verdict.cancelled is not None:
            await self._record_cancelled(verdict)
            return
        payload = run.payload
        if verdict.outcome is not None and verdict.error is None:
            if verdict.batch and not verdict.outcome.turns:
                recorded = await self._record_plain(run, "succeeded", output=verdict.outcome.output)
                await self._finished(recorded, verdict)
                return
            finished = await self.ledger.finish_attempt(
                run.id, "succeeded", output=verdict.outcome.output, turns=verdict.outcome.turns
            )
        elif verdict.transient and run.attempt < int(payload["max_attempts"]):
            policy = RetryPolicy(max_attempts=int(payload["max_attempts"]), base=self.retry_base)
            retry_at = self.clock() + timedelta(seconds=policy.delay(run.attempt))
            await self.ledger.finish_attempt(
                run.id, "pending", error=verdict.error, retry_at=retry_at
            )
            bound.warning("run_retry_scheduled", error=verdict.error, retry_at=retry_at.isoformat())
            self.wake()
            return
        elif verdict.batch and not verdict.unavailable and "pause_after_failures" not in payload:
            recorded = await self._record_plain(run, "failed", error=verdict.error)
            await self._finished(recorded, verdict)
            return
        else:
            finished = await self.ledger.finish_attempt(
                run.id, "failed", error=verdict.error, pause_schedule=verdict.unavailable
            )
            if verdict.unavailable:
                bound.error("schedule_paused", reason=verdict.error)
        await self._finished(finished, verdict)

    async def _record_plain(
        self, run: Run, status: str, *, output: str | None = None, error: str | None = None
    ) -> Run | None:
        """Record a plain outcome in a batch; returns the run as recorded (None: lease lost)."""
        notify = run.payload.get("notify") or ()
        outcome = Outcome(run.id, run.schedule_id, status, output, error, notify)
        finished_at = await self._results.submit(outcome)
        if finished_at is None:
            return None
        # The in-memory run becomes what the batch wrote, for the delivery's run view.
        run.status, run.reason, run.finished_at = status, None, finished_at
        run.output, run.error = output_excerpt(output), error_excerpt(error)
        run.lease_owner = run.lease_expires_at = None
        run.deliver_until = self.ledger.delivery_deadline(notify, status, finished_at)
        return run

    async def _record_cancelled(self, verdict: Verdict) -> None:
        run, reason, bound = verdict.run, verdict.cancelled, verdict.bound
        if reason == "shutdown":
            await self.ledger.release_for_takeover(run.id)
            bound.info("run_released", reason="shutdown")
            return
        if reason in (LEASE_LOST, LEASE_UNCONFIRMED):
            # The one line that says this replica stopped an attempt it could no longer vouch
            # for; the run goes on elsewhere (or here) as a new attempt.
            self.metrics.leases_lost.inc()
            bound.warning(
                "run_lease_lost",
                cause="taken over" if reason == LEASE_LOST else "renewal not confirmed in time",
                action="attempt stopped",
            )
            if reason == LEASE_UNCONFIRMED:
                # Still ours if the database only answered late: give it back at once rather
                # than let it wait out the lease. Unreachable, the lease simply runs out.
                with contextlib.suppress(Exception):
                    await self.ledger.release_for_takeover(run.id)
            return
        if reason == "timeout":
            # The attempt's half-finished output is not saved, so channels that ask for
            # timed_out runs get the record without it (contract point 8).
            error = f"timed out after {verdict.timeout:g} s"
            if verdict.batch and "pause_after_failures" not in run.payload:
                finished = await self._record_plain(run, "timed_out", error=error)
            else:
                finished = await self.ledger.finish_attempt(run.id, "timed_out", error=error)
            await self._finished(finished, verdict)
            return
        finished = await self.ledger.finish_attempt(
            run.id, "cancelled", error="cancelled on request"
        )
        if finished is not None:
            self.metrics.runs.labels(finished.status, finished.trigger).inc()
            bound.info("run_finished", status=finished.status)

    async def _finished(self, run: Run | None, verdict: Verdict) -> None:
        bound = verdict.bound
        if run is None:
            bound.warning("run_lease_lost")
            return
        bound.info("run_finished", status=run.status, error=run.error)
        if run.reason == TRIPPED:
            bound.warning("circuit_breaker_tripped", paused="schedule", error=run.error)
        self.metrics.runs.labels(run.status, run.trigger).inc()
        if run.started_at is not None and run.finished_at is not None:
            self.metrics.duration.observe((run.finished_at - run.started_at).total_seconds())
        # The outcome was recorded with a delivery lease only if a channel applies.
        if run.deliver_until is not None:
            self._start_delivery(run, verdict.workdir, bound)

    def _start_delivery(self, run: Run, workdir: str, bound: Any) -> None:
        # Deliver outside the concurrency slot: a slow receiver must not hold up other runs.
        # The task is tracked with the runs, so shutdown drains deliveries too. Listed at once,
        # so the heartbeat renews its lease from now on.
        self._delivering.add(run.id)
        delivery = asyncio.create_task(self._deliver(run, workdir, bound))
        self._runs.add(delivery)
        delivery.add_done_callback(self._runs.discard)

    async def _deliver(self, run: Run, workdir: str, bound: Any) -> None:
        """Make a finished run's deliveries, then clear its delivery lease. Cancelled (the
        drain timed out) or cut off from the database, the lease stays and runs out, and
        another replica, or this one after a restart, makes what is left."""
        try:
            try:
                made = await deliver_run(
                    self.ledger.db,
                    run,
                    run_view(run),
                    Path(workdir),
                    clock=self.clock,
                    allow_private=self.allow_private,
                    policy=self.delivery_policy,
                    keyring=self.keyring,
                )
                for channel, status in made:
                    self.metrics.deliveries.labels(channel, status).inc()
            except SchedulerUnavailable as exc:
                bound.error("delivery_interrupted", error=exc.message)
                return
            except Exception as exc:  # a failed delivery never fails the run
                # Not worth retrying on every lease: a bug does not go away by itself.
                bound.error("delivery_error", error=str(exc))
            await self.ledger.end_deliveries([run.id])
        except Exception as exc:  # the lease then runs out: the next look finds nothing left
            bound.error("delivery_lease_not_cleared", error=str(exc))
        finally:
            self._delivering.discard(run.id)

    def cancel_local(self, run_id: uuid.UUID) -> None:
        """Stop an attempt running in this process at once (the API's cancel)."""
        token = self._tokens.get(run_id)
        if token is not None:
            token.cancel("cancel")

    @staticmethod
    def _retrying(
        write: Callable[[Sequence[Item]], Awaitable[list[datetime | None]]],
    ) -> Callable[[Sequence[Item]], Awaitable[list[datetime | None]]]:
        """A batched write tried up to ``WRITE_TRIES`` times: one failure would otherwise
        cost every run of the batch its outcome (their leases lapse and they run again)."""

        async def tried(items: Sequence[Item]) -> list[datetime | None]:
            for attempt in range(1, WRITE_TRIES + 1):
                try:
                    return await write(items)
                except Exception as exc:
                    if attempt == WRITE_TRIES:
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

    # -- retention ----------------------------------------------------------------------------

    async def _prune(self, policy: RetentionPolicy) -> None:
        # The first pass waits a little (at most a minute) so a restart's catch-up claims go
        # first; then one pass per interval. A failed pass is logged and tried next interval.
        await self._sleep_or_stop(min(self.retention_interval, 60.0))
        while not self._stop.is_set():
            try:
                report = await prune_runs(self.ledger.db, self.clock(), policy)
                self._pruned(report)
            except Exception:
                log.exception("retention_failed")
            await self._sleep_or_stop(self.retention_interval)

    def _pruned(self, report: PruneReport) -> None:
        if report.deleted:
            self.metrics.pruned.inc(report.deleted)
            log.info(
                "runs_pruned",
                runs=report.deleted,
                tasks=report.tasks_deleted,
                examined=report.examined,
                batches=report.batches,
            )

    # -- heartbeat and wake-ups -----------------------------------------------------------

    async def _heartbeat(self) -> None:
        # Executing attempts are renewed often, since that is also how a cancel requested on
        # another replica arrives. The claimed backlog waiting for a slot (thousands of rows
        # after a burst) is renewed only every third of a lease: rewriting every row of it
        # every couple of seconds would load the database and lock rows the starts need.
        interval = max(0.2, min(self.ledger.lease_seconds / 3, 2.0))
        backlog_every = max(interval, self.ledger.lease_seconds / 3)
        clock = asyncio.get_running_loop().time
        backlog_renewed = clock()
        # Not bound to the stop event: runs draining at shutdown keep their leases renewed
        # until ``stop()`` cancels this task, or a replica would take them over mid-run.
        while True:
            await asyncio.sleep(interval)
            if clock() - backlog_renewed >= backlog_every - 0.05:
                ids, backlog_renewed = list(self._held), clock()
                # Delivery leases go with the backlog: a third of a lease is plenty of margin,
                # and a slow receiver after a burst can hold thousands of deliveries open.
                if self._delivering:
                    try:
                        await self.ledger.renew_deliveries(self.clock(), list(self._delivering))
                    except Exception as exc:
                        self._set_health(False, exc)
            else:
                ids = list(self._tokens)
            if not ids:
                continue
            renewed_at = self.clock()
            try:
                leases = await self.ledger.renew_leases(renewed_at, ids)
            except Exception as exc:
                self._set_health(False, exc)
                continue
            until = renewed_at + timedelta(seconds=self.ledger.lease_seconds)
            # Only the runs asked about: an attempt that started while the renewal was awaited
            # is not in the answer, and not lost (its admission wrote its lease).
            for run_id in ids:
                token = self._tokens.get(run_id)
                if token is None:  # not executing (backlog), or its attempt ended meanwhile
                    continue
                if run_id not in leases:
                    token.cancel(LEASE_LOST, at_once=True)
                    continue
                self._fence(run_id, until)
                if token.suspended and not token.cancelled:
                    token.resume()
                    log.info("run_resumed", run_id=str(run_id), instance_id=self.ledger.owner)
                if leases[run_id]:
                    token.cancel("cancel")

    def _fence(self, run_id: uuid.UUID, until: datetime) -> None:
        """Arm (again) the stop of the attempt of ``run_id``, ``fence_margin`` before ``until``,
        the end of the lease last confirmed for it."""
        previous = self._fences.pop(run_id, None)
        if previous is not None:
            previous.cancel()
        if run_id not in self._tokens:
            return
        delay = (until - self.clock()).total_seconds() - self.fence_margin
        self._fences[run_id] = asyncio.get_running_loop().call_later(
            max(0.0, delay), self._lease_running_out, run_id
        )

    def _lease_running_out(self, run_id: uuid.UUID) -> None:
        self._fences.pop(run_id, None)
        token = self._tokens.get(run_id)
        if token is None:
            return
        if run_id in self._suspendable and not token.cancelled:
            token.suspend()
            log.warning(
                "run_suspended",
                run_id=str(run_id),
                instance_id=self.ledger.owner,
                cause="renewal not confirmed in time",
            )
        else:
            # A graceful stop already under way (a timeout's SIGTERM) is hurried too.
            token.cancel(LEASE_UNCONFIRMED, at_once=True)

    async def _listen(self) -> None:
        """LISTEN for schedule changes made by other replicas; reconnect after failures."""
        dsn = (
            make_url(self.ledger.db.url)
            .set(drivername="postgresql")
            .render_as_string(hide_password=False)
        )
        backoff = 1.0
        while not self._stop.is_set():
            conn: asyncpg.Connection | None = None
            try:
                conn = await asyncpg.connect(dsn, timeout=10)
                lost = asyncio.Event()
                conn.add_termination_listener(lambda _c, lost=lost: lost.set())
                await conn.add_listener(WAKE_CHANNEL, lambda *_args: self.wake())
                backoff = 1.0
                self.wake()  # changes made while we were not listening
                stop = asyncio.ensure_future(self._stop.wait())
                gone = asyncio.ensure_future(lost.wait())
                await asyncio.wait({stop, gone}, return_when=asyncio.FIRST_COMPLETED)
                stop.cancel()
                gone.cancel()
            except (OSError, asyncpg.PostgresError, TimeoutError) as exc:
                log.warning("listen_unavailable", error=type(exc).__name__)
                await self._sleep_or_stop(backoff)
                backoff = min(backoff * 2, 30.0)
            finally:
                if conn is not None and not conn.is_closed():
                    with contextlib.suppress(Exception):
                        await conn.close(timeout=2)
