"""Delivering finished runs: outside the concurrency slot, under a delivery lease.

A run recorded with a delivery lease (``deliver_until``: a notify channel applies) is delivered
by the process that ran it (``Run.deliverer``), which renews the lease (``web.engine.leases``) until
every channel is delivered or failed for good, then clears it. If that process dies, another
takes the run over as soon as the dead one's liveness lock is seen gone (PostgreSQL), or a
restarted engine at its first look (SQLite); if it is cut off or stopped, once the lease runs
out. The taker makes what is left: each channel's delivery row says what was already made.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Collection
from datetime import datetime
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

from agentcron.core.clock import Clock
from agentcron.core.errors import SchedulerUnavailable
from agentcron.core.ledger.store import RunStore
from agentcron.core.logging import get_logger
from agentcron.core.notify.delivery import DEFAULT_POLICY, deliver_run
from agentcron.core.retry import RetryPolicy
from agentcron.core.runs import run_view
from agentcron.core.secrets.keyring import Keyring
from agentcron.core.storage.models import Run
from agentcron.core.tracing import untraced
from agentcron.web.engine.metrics import EngineMetrics

if TYPE_CHECKING:
    from agentcron.core.otel import Tracing

log = get_logger("agentcron.engine")

DELIVERY_BATCH = 100  # the most runs whose deliveries one look takes over


def run_log(run: Run, instance_id: str, **fields: Any) -> Any:
    """The logger every line about ``run`` goes through: it names the run, its schedule and
    this process (and ``fields``, an attempt's say), so one grep over the logs of all replicas
    follows a run through claims, attempts, takeovers and deliveries."""
    return log.bind(
        run_id=str(run.id), schedule_id=str(run.schedule_id), instance_id=instance_id, **fields
    )


class Deliveries:
    """The deliveries this process is making. ``delivering`` (the run ids) is shared with the
    lease keeper, which renews their leases; ``tasks`` with the engine, whose drain waits for
    them at shutdown."""

    def __init__(
        self,
        ledger: RunStore,
        *,
        clock: Clock,
        metrics: EngineMetrics,
        delivering: set[uuid.UUID],
        tasks: set[asyncio.Task[None]],
        allow_private: bool = False,
        policy: RetryPolicy = DEFAULT_POLICY,
        keyring: Keyring | None = None,
        tracing: Tracing | None = None,
    ) -> None:
        self.ledger = ledger
        self.tracing = tracing
        self.clock = clock
        self.metrics = metrics
        self.delivering = delivering
        self.tasks = tasks
        self.allow_private = allow_private
        self.delivery_policy = policy
        self.keyring = keyring

    def start(self, run: Run, workdir: str, bound: Any, span: Any = None) -> None:
        """Deliver ``run`` from now; ``span``: the attempt that ended it, whose children its
        deliveries' spans are when the engine traces."""
        # Deliver outside the concurrency slot: a slow receiver must not hold up other runs.
        # The task is tracked with the runs, so shutdown drains deliveries too. Listed at once,
        # so the heartbeat renews its lease from now on.
        self.delivering.add(run.id)
        delivery = asyncio.create_task(self._deliver(run, workdir, bound, span))
        self.tasks.add(delivery)
        delivery.add_done_callback(self.tasks.discard)

    async def _deliver(self, run: Run, workdir: str, bound: Any, span: Any) -> None:
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
                    spans=(
                        partial(self.tracing.delivery, run.id, span)
                        if self.tracing is not None
                        else untraced
                    ),
                )
                for channel, status in made:
                    self.metrics.deliveries.labels(channel, status).inc()
            except SchedulerUnavailable as exc:
                bound.error("delivery_interrupted", error=exc.message)
                return
            except Exception as exc:  # a failed delivery never fails the run
                # Not worth retrying on every lease: a bug does not go away by itself.
                bound.error("delivery_error", error=str(exc))
            await self.ledger.deliveries.end([run.id])
        except Exception as exc:  # the lease then runs out: the next look finds nothing left
            bound.error("delivery_lease_not_cleared", error=str(exc))
        finally:
            self.delivering.discard(run.id)

    async def recover(
        self, now: datetime, dead: Collection[str] = (), predecessors: bool = False
    ) -> bool:
        """Take over deliveries nobody makes (their lease ran out, their deliverer is one of
        the ``dead``, or, with ``predecessors``, the engine this one replaces left them) and
        make them here; True if any."""
        taken = await self.ledger.deliveries.take_over(now, DELIVERY_BATCH, dead, predecessors)
        for run, workdir in taken:
            if run.id not in self.delivering:  # ours already: its renewal just lapsed
                bound = run_log(run, self.ledger.owner)
                self.start(run, workdir, bound)
        if taken:
            self.metrics.delivery_recoveries.inc(len(taken))
            log.info("deliveries_recovered", runs=len(taken))
        return bool(taken)
