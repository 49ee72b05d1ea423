"""The scheduling loop of one engine instance.

The loop waits on whichever comes first: the earliest due time, a wake-up (a schedule changed
here, or a PostgreSQL NOTIFY from another replica), the stop event, or the tick. It then claims
due work (``RunStore.claim_due_jobs``) and hands every claimed run to the run engine
(``web.engine.run``: what happens to one run); a full batch loops again at once. Deliveries whose
process died before it was done are taken over at the look that finds it dead (its liveness
lock gone, or, restarted, at the first look), or when their lease runs out. The loop
survives every exception and keeps ticking; the loop, the lease heartbeat
(``web.engine.leases``), the listener and retention run under a
``web.engine.supervisor.Supervisor``, which restarts any of them that dies and reports it
unready meanwhile.

Every "now" of the loop comes from its ``clock``: on PostgreSQL the database's time
(``core.clock.DatabaseClock``, kept in step by ``web.engine.clockwatch``), so replicas on
hosts whose clocks disagree still agree on what is due and which lease ran out.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from dataclasses import dataclass
from datetime import datetime, timedelta
from functools import partial
from typing import TYPE_CHECKING

from agentcron.core.clock import Clock, utcnow
from agentcron.core.errors import AgentcronError, SchedulerUnavailable
from agentcron.core.ledger.store import RunStore
from agentcron.core.logging import get_logger
from agentcron.core.notify.delivery import DEFAULT_POLICY
from agentcron.core.retention import PruneReport, RetentionPolicy, prune_runs
from agentcron.core.retry import RetryPolicy
from agentcron.core.runners.containment import Containment
from agentcron.core.runners.handler import Handler
from agentcron.core.secrets.keyring import Keyring
from agentcron.core.storage.liveness import CONFIRM_SECONDS, WATCH_SECONDS, Liveness, Suspects
from agentcron.core.storage.wakeups import listen
from agentcron.web.engine.attempt import HARD_STOP_GRACE
from agentcron.web.engine.metrics import EngineMetrics
from agentcron.web.engine.run import RunEngine
from agentcron.web.engine.supervisor import Supervisor, sleep_or_stop

if TYPE_CHECKING:
    from agentcron.core.otel import Tracing

log = get_logger("agentcron.engine")

CLAIM_BATCH = 500  # the most due schedules one claim takes
# The first claim after a quiet spell takes few, so the first runs of a burst start after
# planning tens of schedules, not hundreds; each full claim after it takes four times more.
FIRST_CLAIM = 32
LOOK_EVERY_SECONDS = 1.0  # while claims come back full, the longest the loop goes without a look
RECHECK_SECONDS = 0.05  # due work another replica holds locked: look again after this
# The loop's supervised tasks. "liveness" last: it stays held while the runs drain.
SERVICES = ("loop", "heartbeat", "listen", "retention", "liveness")


@dataclass(frozen=True)
class EngineProperties:
    """What this engine promises, logged at start (docs/design.md, promise 14)."""

    instance_id: str
    dialect: str
    recovery_scope: str
    max_active_schedules: int
    pause_visibility: str
    lease_seconds: float
    recovery_seconds: float  # the longest a dead engine's run waits before it is continued
    liveness: str  # "session lock" (PostgreSQL, AGENTCRON_LIVENESS), "lease", "file lock"
    tick_seconds: float
    concurrency: int
    clock: str  # "database": due times and leases by the database's clock; "local": SQLite
    sandbox: str  # "none", or "bwrap (network host|none)": where command agents run
    agent_env: list[str]  # service variables every agent process inherits (AGENTCRON_AGENT_ENV)


class SchedulerLoop:
    """One process's engine: claim, dispatch, heartbeat, listen; ``stop()`` drains."""

    def __init__(
        self,
        ledger: RunStore,
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
        handler: Handler | None = None,
        liveness: bool = False,
        predecessors: bool = False,
        log_runs: str = "summary",
        tracing: Tracing | None = None,
    ) -> None:
        """``tracing``: the spans of this engine's runs (``core.tracing``; None: untraced).
        ``liveness``: hold this engine's liveness lock and take over the runs of engines
        whose lock is gone (PostgreSQL only; ``core.storage.liveness``). ``predecessors``: this
        is the one engine of its id (PostgreSQL, under its liveness lock) or of its file
        (SQLite, under ``EngineLock``), so its first claim takes the runs of the engine it
        replaces at once."""
        self.ledger = ledger
        self.retention = retention
        self.retention_interval = retention_interval
        self.tick = tick_seconds
        self.drain_timeout = drain_timeout
        self.clock = clock
        self._wake = asyncio.Event()
        self._stop = asyncio.Event()
        self._loop_task: asyncio.Task[None] | None = None
        self._healthy: bool | None = None
        self.iterations = 0
        self.running = False
        self.metrics = metrics or EngineMetrics()
        self.supervisor = supervisor or Supervisor(self.metrics)
        self.engine = RunEngine(
            ledger,
            concurrency=concurrency,
            clock=clock,
            stopping=self._stop,
            wake=self.wake,
            on_error=lambda exc: self._set_health(False, exc),
            metrics=self.metrics,
            retry_base=retry_base,
            allow_private=allow_private,
            delivery_policy=delivery_policy,
            keyring=keyring,
            containment=containment,
            handler=handler,
            log_runs=log_runs,
            tracing=tracing,
        )
        self.liveness: Liveness | None = None
        if liveness and ledger.db.capabilities.multi_process:
            self.liveness = Liveness(ledger.db, ledger.owner, self._liveness_changed)
            held = self.liveness
            self.engine.leases.vouched = lambda: held.held
        self.suspects = Suspects()
        # The first claim also takes the runs of the engine this one replaces (SQLite: any
        # active run; PostgreSQL: those under this id), at once rather than after their lease.
        self.predecessors = predecessors
        # Likewise the first look takes the deliveries that engine left unmade.
        self.adopt_deliveries = predecessors

    # -- lifecycle ------------------------------------------------------------------------

    def wake(self) -> None:
        """Re-plan now (a schedule changed, a run was queued or cancelled)."""
        self._wake.set()

    def start(self) -> None:
        self.running = True
        if self.liveness is not None:
            self.supervisor.spawn("liveness", self.liveness.keep)
        self._loop_task = self.supervisor.spawn("loop", self._run_loop)
        self.supervisor.spawn("heartbeat", self.engine.leases.heartbeat)
        if self.ledger.db.capabilities.listen_notify:
            self.supervisor.spawn("listen", self._listen)
        if self.retention is not None:
            retention = self.retention
            self.supervisor.spawn("retention", lambda: self._prune(retention))

    @property
    def in_progress(self) -> int:
        """Runs whose agent is executing or whose outcome is being recorded: what ``stop()``
        waits for, up to the drain timeout (runs still waiting for a slot are given back)."""
        return len(self.engine.tokens.keys() | self.engine.recording)

    async def stop(self) -> None:
        """Stop claiming, let in-flight runs finish up to the drain timeout, then cancel the
        rest and release their leases so another replica continues them at once."""
        log.info("engine_stopping", runs=self.in_progress, drain_timeout_seconds=self.drain_timeout)
        self._stop.set()
        self.wake()
        if self._loop_task is not None:
            await asyncio.wait({self._loop_task}, timeout=10)
        await self._drain(self.drain_timeout)
        await self.supervisor.stop(*SERVICES)
        self.engine.leases.disarm_all()
        await self.engine.close()
        self.running = False

    @property
    def flushes(self) -> dict[str, int]:
        """Batched transactions written so far: admissions and results (diagnostics)."""
        return {
            "admissions": self.engine.admissions.flushes,
            "results": self.engine.attempts.results.flushes,
        }

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

    def _liveness_changed(self, held: bool) -> None:
        if held:
            self.engine.leases.vouch()  # thaw what is still ours, stop what was taken
            self.wake()
        else:
            self.engine.leases.unvouched()

    # -- the loop -------------------------------------------------------------------------

    async def _run_loop(self) -> None:
        # One cheap look per wake-up (the earliest instant anything could be due) decides
        # whether to claim at all, so an idle replica sends one statement per tick. While
        # claims come back full, work is known to be due: the loop claims again without that
        # look, though at least once a second it looks, for deliveries whose lease ran out.
        batch = FIRST_CLAIM
        pressing = False  # the last claim was full (or out of room): claim without a look
        looked = 0.0  # time.monotonic() of the last look
        while not self._stop.is_set():
            self._wake.clear()
            self.engine.slot_freed.clear()
            self.iterations += 1
            self.metrics.iterations.inc()
            timeout = self.tick
            if self.liveness is not None and not self.liveness.held:
                # Without its lock this engine claims nothing: others may take its runs now.
                self.liveness.changed.clear()
                await self._sleep(self.tick, self.liveness.changed)
                continue
            try:
                now = self.clock()
                wake_at: datetime | None = now
                wake_next: datetime | None = None
                deliveries_due = False
                dead: frozenset[str] = frozenset()
                if not pressing or time.monotonic() - looked >= LOOK_EVERY_SECONDS:
                    wake = await self.ledger.next_wakeup(self.liveness is not None)
                    looked = time.monotonic()
                    dead = self.suspects.observe(wake.lockless, looked)
                    owed = wake.deliveries is not None
                    deliveries_due = wake.deliveries is not None and wake.deliveries <= now
                    adopt, self.adopt_deliveries = self.adopt_deliveries and owed, False
                    if (deliveries_due or (owed and dead) or adopt) and (
                        await self.engine.deliveries.recover(now, dead, adopt)
                    ):
                        self._set_health(True)
                        continue  # look again: more may have run out, and the next instant moved
                    wake_at, wake_next = wake.work, wake.at
                    self.predecessors = self.predecessors and wake.leased
                    if dead or self.predecessors:
                        wake_at = now
                    elif wake.watching or self.suspects.pending:
                        # Others hold runs: look again soon enough to notice one dying.
                        wait = CONFIRM_SECONDS if self.suspects.pending else WATCH_SECONDS
                        soon = now + timedelta(seconds=wait)
                        wake_next = min(wake_next, soon) if wake_next is not None else soon
                backlog, pressing = pressing, False
                room = self.engine.room()
                # With a backlog, a claim waits until the queue ahead is half gone (runs of a
                # dead replica do not wait).
                defer = backlog and not dead and not self.engine.should_claim()
                if wake_at is not None and wake_at <= now and (room == 0 or defer):
                    # Every slot busy and the short queue full (or, with a backlog, still half
                    # full): the due runs stay in the database for a replica with room, or for
                    # this one when runs end.
                    pressing = True
                    await self._sleep(self.tick, self.engine.slot_freed)
                    continue
                if wake_at is not None and wake_at <= now:
                    began = time.perf_counter()
                    start = self.engine.admittable()
                    claim = await self.ledger.claim_due_jobs(
                        now, min(batch, room), start, dead=dead, predecessors=self.predecessors
                    )
                    self.predecessors = False
                    if dead:
                        log.warning("replicas_dead", owners=sorted(dead), runs=claim.recovered)
                    self.metrics.claim_duration.observe(time.perf_counter() - began)
                    if claim.runs:
                        self.metrics.claim_size.observe(len(claim.runs))
                    for run in claim.runs:
                        if run.id in claim.started:
                            self.engine.dispatch(run, claim.started[run.id], started=True)
                        else:
                            self.engine.dispatch(run, claim.prepared.get(run.id))
                    if claim.recovered:
                        self.metrics.lease_recoveries.inc(claim.recovered)
                        log.info("leases_recovered", runs=claim.recovered)
                    batch = min(batch * 4, CLAIM_BATCH) if claim.full else FIRST_CLAIM
                    self._set_health(True)
                    if claim.full:
                        pressing = True
                        continue  # more is due: claim again
                    if claim.runs:
                        continue  # look when the next work is due
                    # Due, yet nothing claimable: another replica holds those rows this
                    # instant. Look again shortly rather than spin.
                    timeout = RECHECK_SECONDS
                elif deliveries_due:
                    # Run out, yet none taken: another replica is taking them this instant.
                    timeout = RECHECK_SECONDS
                elif wake_next is not None:
                    # +1 ms: asyncio may fire a timer a hair early, and a claim an instant
                    # before the due time finds nothing.
                    delay = (wake_next - self.clock()).total_seconds() + 0.001
                    timeout = max(0.0, min(self.tick, delay))
                self._set_health(True)
            except Exception as exc:  # the loop survives everything and keeps ticking
                self.metrics.errors.inc()
                self._set_health(False, exc)
                pressing = False
                timeout = min(self.tick, 1.0)
            await self._sleep(timeout)

    async def _sleep(self, seconds: float, *also: asyncio.Event) -> None:
        if seconds <= 0 or self._stop.is_set():
            return
        waiters = {asyncio.ensure_future(event.wait()) for event in (self._wake, self._stop, *also)}
        try:
            await asyncio.wait(waiters, timeout=seconds, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for waiter in waiters:
                waiter.cancel()

    def cancel_local(self, run_id: uuid.UUID) -> None:
        """Stop an attempt running in this process at once (the API's cancel)."""
        self.engine.cancel_local(run_id)

    async def _listen(self) -> None:
        await listen(self.ledger.db, self.wake, self._stop, partial(sleep_or_stop, self._stop))

    # -- retention ----------------------------------------------------------------------------

    async def _prune(self, policy: RetentionPolicy) -> None:
        # The first pass waits a little (at most a minute) so a restart's catch-up claims go
        # first; then one pass per interval. A failed pass is logged and tried next interval.
        await sleep_or_stop(self._stop, min(self.retention_interval, 60.0))
        while not self._stop.is_set():
            try:
                report = await prune_runs(self.ledger.db, self.clock(), policy)
                self._pruned(report)
            except Exception:
                log.exception("retention_failed")
            await sleep_or_stop(self._stop, self.retention_interval)

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

    async def _drain(self, within: float) -> None:
        """Give back the runs not started yet, let the others finish within ``within``
        seconds, then cancel the rest (their leases are released for another replica)."""
        engine = self.engine
        # Not those being recorded: their agent is done, and given back they would run again.
        busy = engine.tokens.keys() | engine.recording
        idle = [run_id for run_id in engine.held if run_id not in busy]
        queued = [run_id for run_id in idle if run_id not in engine.admitted]
        try:
            await self.ledger.release(queued)
            # Admitted by the claim, stopped before their attempt began: running rows.
            admitted = [run_id for run_id in idle if run_id in engine.admitted]
            await self.ledger.release(admitted, started=True)
        except AgentcronError as exc:
            # Kept instead: their leases run out and they are taken over, as after a crash.
            log.warning("runs_not_released", runs=len(idle), error=exc.message)
        if self.engine.tasks:
            _, pending = await asyncio.wait(set(self.engine.tasks), timeout=within)
            if pending:
                log.warning("drain_timeout", cancelling=len(self.engine.tokens))
                for token in list(self.engine.tokens.values()):
                    token.cancel("shutdown")
                await asyncio.wait(pending, timeout=HARD_STOP_GRACE)
                for task in pending:
                    task.cancel()
