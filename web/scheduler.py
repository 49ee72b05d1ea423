"""The scheduling loop and the execution of one run.

The loop waits on whichever comes first: the earliest due time, a wake-up (a schedule changed
here, or a PostgreSQL NOTIFY from another replica), the stop event, or the tick. It then claims
due work (``Ledger.claim_due_jobs``) and starts one task per claimed run; a full batch loops
again at once. Each run executes under the concurrency semaphore: admit the attempt
(lease, overlap policy, task, run lock), run the agent under its timeout with a cooperative
cancel token, record the outcome, then deliver it. A heartbeat renews the leases this process
holds and relays cancel requests. The loop survives every exception and keeps ticking.
"""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections.abc import Coroutine
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

import asyncpg
from sqlalchemy.engine import make_url

from core.clock import Clock, utcnow
from core.errors import (
    AgentcronError,
    InvalidSchedule,
    RunPermanentError,
    SchedulerUnavailable,
    TargetUnavailable,
)
from core.logging import get_logger
from core.notify.delivery import DEFAULT_POLICY, deliver_run
from core.retry import RetryPolicy
from core.runners import CancelToken, RunOutcome, RunRequest, build_runner
from core.scheduler import Ledger, StartDecision, run_view
from core.schedules import WAKE_CHANNEL
from core.storage import Run

log = get_logger("agentcron.engine")

CLAIM_BATCH = 500
WAIT_POLL_SECONDS = 0.5  # how often a run waiting on overlap or a run lock looks again
HARD_STOP_GRACE = 15.0  # beyond the timeout, for runners that ignore their cancel token


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
    ) -> None:
        self.ledger = ledger
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
        self._runs: set[asyncio.Task[None]] = set()
        self._services: list[asyncio.Task[None]] = []
        self._healthy: bool | None = None
        self.iterations = 0
        self.running = False

    # -- lifecycle ------------------------------------------------------------------------

    def wake(self) -> None:
        """Re-plan now (a schedule changed, a run was queued or cancelled)."""
        self._wake.set()

    def start(self) -> None:
        self.running = True
        self._services = [
            self._spawn(self._run_loop(), "loop"),
            self._spawn(self._heartbeat(), "heartbeat"),
        ]
        if self.ledger.db.capabilities.listen_notify:
            self._services.append(self._spawn(self._listen(), "listen"))

    def _spawn(self, coro: Coroutine[Any, Any, None], name: str) -> asyncio.Task[None]:
        return asyncio.create_task(coro, name=f"agentcron-{name}")

    async def stop(self) -> None:
        """Stop claiming, let in-flight runs finish up to the drain timeout, then cancel the
        rest and release their leases so another replica continues them at once."""
        self._stop.set()
        self.wake()
        loop_task = self._services[0] if self._services else None
        if loop_task is not None:
            await asyncio.wait({loop_task}, timeout=10)
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
        for task in self._services:
            task.cancel()
        await asyncio.gather(*self._services, return_exceptions=True)
        self.running = False

    @property
    def healthy(self) -> bool:
        return self.running and self._healthy is not False

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
        while not self._stop.is_set():
            self._wake.clear()
            self.iterations += 1
            timeout = self.tick
            try:
                now = self.clock()
                claim = await self.ledger.claim_due_jobs(now, CLAIM_BATCH)
                for run in claim.runs:
                    self._dispatch(run)
                if claim.recovered:
                    log.info("leases_recovered", runs=claim.recovered)
                self._set_health(True)
                if claim.full:
                    continue
                wake_at = await self.ledger.next_wakeup(now)
                if wake_at is not None:
                    # +1 ms: asyncio may fire a timer a hair early, and a claim an instant
                    # before the due time finds nothing.
                    delay = (wake_at - self.clock()).total_seconds() + 0.001
                    timeout = max(0.0, min(self.tick, delay))
            except Exception as exc:  # the loop survives everything and keeps ticking
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

    def _dispatch(self, run: Run) -> None:
        if run.id in self._held:
            return
        self._held.add(run.id)
        task = asyncio.create_task(self._execute(run), name=f"agentcron-run-{run.id}")
        self._runs.add(task)
        task.add_done_callback(self._runs.discard)

    # -- one run --------------------------------------------------------------------------

    async def _execute(self, run: Run) -> None:
        bound = log.bind(run_id=str(run.id), schedule_id=str(run.schedule_id))
        try:
            while not self._stop.is_set():
                async with self.semaphore:
                    if self._stop.is_set():
                        break
                    decision = await self.ledger.start_attempt(run.id)
                    if decision.action == "run":
                        await self._attempt(decision, bound)
                        return
                if decision.action in ("done", "lost"):
                    if decision.action == "done" and decision.run is not None:
                        bound.info(
                            "run_not_started",
                            status=decision.run.status,
                            reason=decision.run.reason,
                        )
                    return
                await self._sleep_or_stop(WAIT_POLL_SECONDS)
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

    async def _attempt(self, decision: StartDecision, bound: Any) -> None:
        run, task = decision.run, decision.task
        assert run is not None and task is not None
        payload = run.payload
        bound = bound.bind(attempt=run.attempt, task_id=str(task.id))
        token = CancelToken()
        self._tokens[run.id] = token
        timeout = float(payload["timeout_seconds"])
        timer = asyncio.get_running_loop().call_later(timeout, token.cancel, "timeout")
        outcome: RunOutcome | None = None
        error: str | None = None
        transient = False
        unavailable = False  # the runner can no longer work at all: pause the schedule
        bound.info(
            "run_started",
            trigger=run.trigger,
            due_at=run.due_at.isoformat() if run.due_at else None,
        )
        try:
            try:
                runner = build_runner(payload["runner"])
            except InvalidSchedule as exc:  # its type was valid once: the plug-in is gone
                raise TargetUnavailable(exc.message) from exc
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
            )
            job = asyncio.ensure_future(runner.run(request, token))
            done, _ = await asyncio.wait({job}, timeout=timeout + HARD_STOP_GRACE)
            if not done:  # the runner ignored its cancel token: stop it the hard way
                token.cancel("timeout")
                job.cancel()
                await asyncio.wait({job}, timeout=5)
            outcome = job.result()
        except TargetUnavailable as exc:
            error, unavailable = exc.message, True
        except (RunPermanentError, InvalidSchedule) as exc:
            error = exc.message
        except asyncio.CancelledError:
            if not token.cancelled:
                raise
            error = f"stopped ({token.reason})"
        except Exception as exc:
            error = f"{type(exc).__name__}: {exc}"
            transient = True
        finally:
            timer.cancel()
            self._tokens.pop(run.id, None)

        if token.cancelled:
            await self._record_cancelled(
                run, token.reason or "cancel", timeout, task.workdir, bound
            )
            return
        if outcome is not None and error is None:
            finished = await self.ledger.finish_attempt(
                run.id, "succeeded", output=outcome.output, turns=outcome.turns
            )
        elif transient and run.attempt < int(payload["max_attempts"]):
            policy = RetryPolicy(max_attempts=int(payload["max_attempts"]), base=self.retry_base)
            retry_at = self.clock() + timedelta(seconds=policy.delay(run.attempt))
            await self.ledger.finish_attempt(run.id, "pending", error=error, retry_at=retry_at)
            bound.warning("run_retry_scheduled", error=error, retry_at=retry_at.isoformat())
            self.wake()
            return
        else:
            finished = await self.ledger.finish_attempt(
                run.id, "failed", error=error, pause_schedule=unavailable
            )
            if unavailable:
                bound.error("schedule_paused", reason=error)
        await self._finished(finished, task.workdir, bound)

    async def _record_cancelled(
        self, run: Run, reason: str, limit: float, workdir: str, bound: Any
    ) -> None:
        if reason == "shutdown":
            await self.ledger.release_for_takeover(run.id)
            bound.info("run_released", reason="shutdown")
            return
        if reason == "lease_lost":
            bound.warning("run_lease_lost")
            return
        if reason == "timeout":
            # The attempt's half-finished output is not saved, so channels that ask for
            # timed_out runs get the record without it (contract point 8).
            finished = await self.ledger.finish_attempt(
                run.id, "timed_out", error=f"timed out after {limit:g} s"
            )
            await self._finished(finished, workdir, bound)
            return
        finished = await self.ledger.finish_attempt(
            run.id, "cancelled", error="cancelled on request"
        )
        if finished is not None:
            bound.info("run_finished", status=finished.status)

    async def _finished(self, run: Run | None, workdir: str, bound: Any) -> None:
        if run is None:
            bound.warning("run_lease_lost")
            return
        bound.info("run_finished", status=run.status, error=run.error)
        # Deliver outside the concurrency slot: a slow receiver must not hold up other runs.
        # The task is tracked with the runs, so shutdown drains deliveries too.
        delivery = asyncio.create_task(self._deliver(run, workdir, bound))
        self._runs.add(delivery)
        delivery.add_done_callback(self._runs.discard)

    async def _deliver(self, run: Run, workdir: str, bound: Any) -> None:
        try:
            await deliver_run(
                self.ledger.db,
                run,
                run_view(run),
                Path(workdir),
                clock=self.clock,
                allow_private=self.allow_private,
                policy=self.delivery_policy,
            )
        except Exception as exc:  # a failed delivery never fails the run
            bound.error("delivery_error", error=str(exc))

    def cancel_local(self, run_id: uuid.UUID) -> None:
        """Stop an attempt running in this process at once (the API's cancel)."""
        token = self._tokens.get(run_id)
        if token is not None:
            token.cancel("cancel")

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
            else:
                ids = list(self._tokens)
            if not ids:
                continue
            asked = set(ids)
            try:
                leases = await self.ledger.renew_leases(self.clock(), ids)
            except Exception as exc:
                self._set_health(False, exc)
                continue
            for run_id, token in list(self._tokens.items()):
                if run_id in asked and run_id not in leases:
                    token.cancel("lease_lost")
                elif leases[run_id]:
                    token.cancel("cancel")

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
