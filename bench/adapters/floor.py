"""agentcron's engine over a run store that costs nothing: the floor under every agentcron
contender.

The same ``SchedulerLoop`` and ``RunEngine`` as ``bench.adapters.agentcron`` (concurrency from
``AGENTCRON_SCHEDULER_CONCURRENCY``, the ``python`` runner on ``bench.noop:arun``, the heap
settled as ``agentcron serve`` settles it), but its ``RunStore`` keeps the burst's runs in a
deque and answers every verb at once: a claim hands out the next runs (admitted, as the SQL
claim admits them), a record marks them finished in place. No database is read or written,
so what the burst costs here is the engine's own work per run (dispatch, the slot, timers,
the runner and its thread, the outcome's way back) and nothing else. Beside the PostgreSQL
contenders it splits their time into the engine's share and the store's.

Commands: ``populate`` does nothing (the runs are made in ``fire``); ``fire`` makes ``count``
runs due at T0, starts the engine before T0 and runs until every no-op was called and every
outcome recorded. Starts are the no-op's own call times; finishes, the records' times.
"""

from __future__ import annotations

import asyncio
import collections
import os
import sys
import time
import uuid
from collections.abc import Collection, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

from agentcron.core.config import Settings
from agentcron.core.ledger.memory import MemoryRunStore
from agentcron.core.ledger.store import Claim, Outcome, PreparedTask, StartDecision, Wakeup
from agentcron.core.logging import configure_logging
from agentcron.core.storage.models import Run, built
from agentcron.core.transitions import finished
from agentcron.web.engine.heap import settle_heap
from agentcron.web.engine.loop import SchedulerLoop
from bench import noop
from bench.adapters.common import (
    NOOP_TARGET,
    LagMonitor,
    cpu_seconds,
    emit,
    mark_ready,
    parse_args,
    result,
    sleep_until,
    slot_gap_figures,
)

os.environ["AGENTCRON_PYTHON_MODULES"] = "bench"
POLL_SECONDS = 0.05
WORKDIR = "/nonexistent/agentcron-floor"  # the no-op never looks at its task's directory


class FloorStore(MemoryRunStore):
    """The ``RunStore`` verbs the burst uses, each O(1) per run and without a database."""

    def __init__(self, count: int, due: datetime) -> None:
        super().__init__(owner=f"floor-{os.getpid()}", lease_seconds=30.0)
        payload = {
            "name": "floor",
            "prompt": "noop",
            "runner": {"type": "python", "target": NOOP_TARGET},
            "notify": [],
            "timeout_seconds": 60,
            "max_attempts": 1,
            "mode": "isolated",
        }
        self.due = due
        self.pending: collections.deque[Run] = collections.deque(
            built(Run, _run_row(due, payload)) for _ in range(count)
        )
        self.recorded: list[float] = []  # time.time() of each outcome's record

    async def next_wakeup(self, liveness: bool = False) -> Wakeup:
        return Wakeup(self.due if self.pending else None, None)

    async def claim_due_jobs(
        self,
        now: datetime,
        limit: int = 500,
        start: int = 0,
        dead: Collection[str] = (),
        predecessors: bool = False,
    ) -> Claim:
        await asyncio.sleep(0)  # a verb is a round trip: the loop goes on meanwhile
        claim = Claim(runs=[], full=False)
        if now < self.due:
            return claim
        until = now + timedelta(seconds=self.lease_seconds)
        while self.pending and len(claim.runs) < limit:
            run = self.pending.popleft()
            values: dict[str, Any] = {"lease_owner": self.owner, "lease_expires_at": until}
            if len(claim.started) < start:
                values.update(status="running", attempt=1, started_at=now)
                claim.started[run.id] = WORKDIR
            else:
                claim.prepared[run.id] = WORKDIR
            run.__dict__.update(values)
            claim.runs.append(run)
        claim.full = bool(self.pending)
        return claim

    async def admit(self, runs: Sequence[Run]) -> list[StartDecision]:
        await asyncio.sleep(0)
        now = datetime.now(UTC)
        decisions = []
        for run in runs:
            run.__dict__.update(status="running", attempt=1, started_at=now)
            assert run.task_id is not None
            decisions.append(StartDecision("run", run, PreparedTask(run.task_id, WORKDIR)))
        return decisions

    async def renew_leases(
        self, now: datetime, run_ids: Sequence[uuid.UUID] | None = None
    ) -> dict[uuid.UUID, bool]:
        """Every run asked about is still ours and not cancelled (a slow burst outlives the
        heartbeat's interval)."""
        await asyncio.sleep(0)
        return dict.fromkeys(run_ids or (), False)

    async def record(self, outcomes: Sequence[Outcome]) -> list[Run | None]:
        await asyncio.sleep(0)
        now, at = datetime.now(UTC), time.time()
        for outcome in outcomes:
            outcome.run.__dict__.update(
                finished(outcome.status, now),
                output=outcome.output,
                error=outcome.error,
                deliver_until=None,
                deliverer=None,
            )
            self.recorded.append(at)
        return [outcome.run for outcome in outcomes]


def _run_row(due: datetime, payload: dict[str, Any]) -> dict[str, Any]:
    return {
        "id": uuid.uuid4(),
        "schedule_id": uuid.uuid4(),
        "trigger": "schedule",
        "origin": "schedule",
        "status": "pending",
        "reason": None,
        "attempt": 0,
        "payload": payload,
        "due_at": due,
        "created_at": due,
        "available_at": due,
        "started_at": None,
        "finished_at": None,
        "task_id": uuid.uuid4(),
        "lease_owner": None,
        "lease_expires_at": None,
        "cancel_requested": False,
        "replay_of": None,
        "output": None,
        "error": None,
        "deliver_until": None,
        "deliverer": None,
        "dst_rule": None,
        "covers": None,
        "covers_until": None,
        "started_by": None,
    }


async def fire(count: int, t0: datetime, give_up_after: float) -> dict[str, Any]:
    settings = Settings()
    store = FloorStore(count, t0)
    loop = SchedulerLoop(
        store,
        concurrency=settings.scheduler_concurrency,
        tick_seconds=settings.scheduler_tick_seconds,
    )
    monitor = LagMonitor()
    loop.start()
    settle_heap()
    monitor.start()
    mark_ready()
    cpu = cpu_seconds()
    await sleep_until(t0)
    deadline = t0.timestamp() + give_up_after
    while len(store.recorded) < count and time.time() < deadline:  # noqa: ASYNC110
        await asyncio.sleep(POLL_SECONDS)
    cpu = cpu_seconds() - cpu
    max_lag = await monitor.stop()
    await loop.stop()
    return result(
        contender="agentcron-floor",
        count=count,
        t0=t0,
        starts=noop.CALLS,
        finishes=store.recorded,
        recorded=len(store.recorded),
        distinct=len(store.recorded),
        succeeded=len(store.recorded),
        max_lag_ms=max_lag,
        own_transactions=0,
        extra={
            "executed_here": len(noop.CALLS),
            "cpu_s": round(cpu, 3),
            **slot_gap_figures(noop.SPANS, settings.scheduler_concurrency),
            "concurrency": settings.scheduler_concurrency,
        },
    )


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    configure_logging("json", "WARNING")
    if args.command == "fire":
        emit(asyncio.run(fire(args.count, args.at, args.give_up_after)))


if __name__ == "__main__":
    main(sys.argv[1:])
