"""What happens to one run, top to bottom.

1. **Dispatch**: every run a claim leased here gets a task; a jittered run sleeps until its
   ``available_at``.
2. **Admit**, under the concurrency semaphore, in a batch with the runs starting at the same
   moment (``RunStore.admit``: overlap policy, the task's run lock, or why it does not start);
   a run the claim admitted skips this, and one that needs no look at other runs may be
   admitted before its slot frees, while attempts are quick.
3. **Execute** (``web.engine.attempt``): the runner runs the agent under the timeout with a
   cooperative cancel token, while ``web.engine.leases`` renews the lease and stops the attempt
   if the lease may be another's. Referenced secrets are resolved now and redacted from
   everything recorded.
4. **Record** (``web.engine.attempt``), with the slot freed, in a batch with the outcomes of the
   same moment (``RunStore.record``): an end, a retry, a cancel, a chat turn, a runner gone; the
   store applies the circuit breaker and hands back the run as written.
5. **Deliver**, outside the slot, under a delivery lease (``web.engine.delivery``).
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from agentcron.core.clock import Clock
from agentcron.core.errors import AgentcronError
from agentcron.core.ledger.store import PreparedTask, RunStore, StartDecision
from agentcron.core.notify.delivery import DEFAULT_POLICY
from agentcron.core.retry import RetryPolicy
from agentcron.core.runners.containment import Containment
from agentcron.core.runners.handler import Handler
from agentcron.core.runners.threads import AgentThreads
from agentcron.core.secrets.keyring import Keyring
from agentcron.core.storage.models import Run
from agentcron.web.engine.attempt import Attempts, Verdict
from agentcron.web.engine.batching import GroupCommit, retrying
from agentcron.web.engine.delivery import Deliveries, run_log
from agentcron.web.engine.leases import LeaseKeeper
from agentcron.web.engine.metrics import EngineMetrics
from agentcron.web.engine.runlines import RunLines
from agentcron.web.engine.slots import Slots
from agentcron.web.engine.supervisor import sleep_or_stop

if TYPE_CHECKING:
    from agentcron.core.otel import Tracing

WAIT_POLL_SECONDS = 0.5  # how often a run waiting on overlap or a run lock looks again


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
        log_runs: str = "summary",
        tracing: Tracing | None = None,
    ) -> None:
        super().__init__(concurrency)
        self.ledger = ledger
        self.clock = clock
        self.metrics = metrics
        # Threads for sync agents, up to one per slot: every slot can block at once, as a
        # ``command`` agent's process can; quick ones share a few (core.runners.threads).
        self.threads = AgentThreads(concurrency)
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
            tracing=tracing,
        )
        self.attempts = Attempts(
            ledger,
            clock=clock,
            metrics=metrics,
            deliveries=self.deliveries,
            suspendable=self.suspendable,
            recent=self.recent,
            wake=wake,
            threads=self.threads,
            retry_base=retry_base,
            keyring=keyring,
            containment=containment,
            handler=handler,
            lines=RunLines(each=log_runs == "each", instance_id=ledger.owner),
            tracing=tracing,
        )
        self.metrics.in_flight.set_function(lambda: len(self.tokens))
        # Runs that start at the same moment share an admission's transaction: in a burst this
        # cuts the transactions several times over.
        self.admissions: GroupCommit[Run, StartDecision] = GroupCommit(
            retrying(self._admit), name="agentcron-admissions"
        )

    async def close(self) -> None:
        """What the engine's stop ends once its runs are drained or handed over."""
        # The agents' idle threads end now, not when the engine is collected (a host that
        # starts engine after engine would gather them); a sync agent still running past the
        # drain keeps its thread until it returns.
        self.threads.shutdown()
        self.attempts.lines.flush()  # what was counted since the last summary
        tracing = self.attempts.tracing
        if tracing is not None:  # the spans still batched, sent before the process ends
            await asyncio.to_thread(tracing.shutdown)

    # The store's verb, looked up at each batch (so a test may stand in for it).
    async def _admit(self, runs: Sequence[Run]) -> list[StartDecision]:
        return await self.ledger.admit(runs)

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
                    if run.id not in self.admitted:
                        if decision is None or decision.action == "wait":
                            decision = await self.admissions.submit(run)
                    elif not await self.leases.confirm(run):
                        # Admitted before its slot freed, and a long wait is confirmed first:
                        # the lease was taken meanwhile.
                        decision = StartDecision("lost")
                    self.admitted.discard(run.id)
                    assert decision is not None  # the claim's, or admitted ahead, or just now
                    if decision.action == "run":
                        # The slot is freed once the agent is done; recording happens outside
                        # it, in a batch with the runs finishing at the same moment.
                        with self.leases.executing(run) as token:
                            verdict = await self.attempts.execute(decision, token)
                        break
                if decision.action != "wait":
                    break
                await sleep_or_stop(self._stop, WAIT_POLL_SECONDS)
            if verdict is not None:
                self.recording.add(run.id)
                self.slot_freed.set()
                try:
                    await self.attempts.finish(verdict)
                finally:
                    self.recording.discard(run.id)
            elif decision is not None and decision.action == "done" and decision.run is not None:
                # Ended without an attempt (overlap ``skip``, a run lock, a pause): said once.
                self.metrics.ended(decision.run.status, decision.run.trigger)
                run_log(run, self.ledger.owner).info(
                    "run_not_started", status=decision.run.status, reason=decision.run.reason
                )
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

    def cancel_local(self, run_id: uuid.UUID) -> None:
        """Stop an attempt running in this process at once (the API's cancel)."""
        token = self.tokens.get(run_id)
        if token is not None:
            token.cancel("cancel")
