"""Retention: the run ledger cannot grow forever.

A thousand minutely schedules write 1.4 million runs a day. The pruner deletes finished runs
older than their schedule's retention (``retention_days``, else ``AGENTCRON_RETENTION_DAYS``),
walking the ledger oldest first in small batches. Each batch is its own short transaction with
a pause after it, so the engine's claims and results never queue long behind a prune.

Never pruned: a run that has not finished (pending, running); a finished run whose deliveries
are still owed (``deliver_until`` set); the latest run of each schedule (``last_run_id``); and
the newest ``keep_last`` runs of each schedule, however old. A pruned run takes its deliveries
with it (ON DELETE CASCADE) and its task when no other run uses that task.
"""

from __future__ import annotations

import asyncio
import uuid
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy.ext.asyncio import AsyncSession

from agentcron.core.storage.database import Database
from agentcron.core.storage.sql.history import (
    delete_prunable,
    kept_floor,
    prune_candidates,
    prune_turn,
)
from agentcron.core.storage.sql.schedules import retention_of, shortest_retention
from agentcron.core.storage.sql.tasks import delete_orphan_tasks


@dataclass(frozen=True)
class RetentionPolicy:
    days: int = 30
    keep_last: int = 100
    batch: int = 500
    pause_seconds: float = 0.05  # between batches: room for the engine's own statements


@dataclass
class PruneReport:
    deleted: int = 0
    tasks_deleted: int = 0
    examined: int = 0
    batches: int = 0
    yielded: bool = False  # another replica was pruning; this pass stopped early


@dataclass(frozen=True)
class _Keep:
    """What one schedule protects: runs newer than ``horizon``, at or after the ``keep_last``-th
    newest in the history's order (``floor``, ``core.storage.sql.history.HISTORY_ORDER``: the
    runs the history lists first), and its latest run."""

    horizon: datetime
    # None: fewer than keep_last runs, keep them all.
    floor: tuple[datetime, datetime, uuid.UUID] | None
    latest: uuid.UUID | None

    def allows(self, row: Any) -> bool:
        """``row`` (a candidate: id, created_at, due_at) may go."""
        return (
            row.created_at < self.horizon
            and self.floor is not None
            and (row.created_at, row.due_at or row.created_at, row.id) < self.floor
            and row.id != self.latest
        )


async def prune_runs(
    db: Database, now: datetime, policy: RetentionPolicy, *, max_batches: int | None = None
) -> PruneReport:
    """One pass over the runs old enough for some schedule's retention; see the module doc."""
    report = PruneReport()
    async with db.session(write=False) as session:
        shortest = await session.scalar(shortest_retention())
    days = policy.days if shortest is None else min(policy.days, shortest)
    horizon = now - timedelta(days=days)  # no run at or after this is old enough anywhere
    cursor: tuple[datetime, uuid.UUID] | None = None
    keeps: dict[uuid.UUID, _Keep] = {}
    while max_batches is None or report.batches < max_batches:
        async with db.session() as session:
            if not await take_turn(db, session):
                report.yielded = True
                return report
            rows = (await session.execute(prune_candidates(horizon, cursor, policy.batch))).all()
            for schedule_id in {row.schedule_id for row in rows} - keeps.keys():
                keeps[schedule_id] = await _keep(session, schedule_id, now, policy)
            doomed = [row for row in rows if keeps[row.schedule_id].allows(row)]
            if doomed:
                await _delete(session, doomed, report)
        report.batches += 1
        report.examined += len(rows)
        if len(rows) < policy.batch:
            break
        cursor = (rows[-1].created_at, rows[-1].id)
        await asyncio.sleep(policy.pause_seconds)
    return report


async def take_turn(db: Database, session: AsyncSession) -> bool:
    """Take this installation's pruning turn for the transaction of ``session`` (True), or
    say another replica's pass has it (False). SQLite has one engine, whose turn it always is."""
    if db.capabilities.dialect != "postgresql":
        return True
    return bool(await session.scalar(prune_turn(db.schema)))


async def _keep(
    session: AsyncSession, schedule_id: uuid.UUID, now: datetime, policy: RetentionPolicy
) -> _Keep:
    found = (await session.execute(retention_of(schedule_id))).first()
    days = policy.days if found is None or found.retention_days is None else found.retention_days
    floor = (await session.execute(kept_floor(schedule_id, policy.keep_last))).first()
    return _Keep(
        horizon=now - timedelta(days=days),
        floor=None if floor is None else (floor[0], floor[1], floor[2]),
        latest=None if found is None else found.last_run_id,
    )


async def _delete(session: AsyncSession, doomed: list[Any], report: PruneReport) -> None:
    ids = [row.id for row in doomed]
    task_ids = list((await session.execute(delete_prunable(ids))).scalars())
    report.deleted += len(task_ids)
    orphans = {task_id for task_id in task_ids if task_id is not None}
    if orphans:
        result = await session.execute(delete_orphan_tasks(orphans))
        report.tasks_deleted += int(getattr(result, "rowcount", 0) or 0)
