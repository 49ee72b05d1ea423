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

from sqlalchemy import delete, exists, func, select, tuple_
from sqlalchemy.ext.asyncio import AsyncSession

from agentcron.core.runs import HISTORY_ORDER
from agentcron.core.states import TERMINAL
from agentcron.core.storage.database import Database
from agentcron.core.storage.models import Run, Schedule, Task
from agentcron.core.storage.scope import scoped

# Replicas on one PostgreSQL database take turns: a batch runs only under this transaction-level
# advisory lock, and a replica that cannot get it leaves the pass to the one that has it.
ADVISORY_KEY = 0x61676E74  # "agnt"


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
    newest in the history's order (``floor``, ``core.runs.HISTORY_ORDER``: the runs the
    history lists first), and its latest run."""

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
        shortest = await session.scalar(select(func.min(Schedule.retention_days)))
    days = policy.days if shortest is None else min(policy.days, shortest)
    horizon = now - timedelta(days=days)  # no run at or after this is old enough anywhere
    cursor: tuple[datetime, uuid.UUID] | None = None
    keeps: dict[uuid.UUID, _Keep] = {}
    while max_batches is None or report.batches < max_batches:
        async with db.session() as session:
            if not await take_turn(db, session):
                report.yielded = True
                return report
            rows = (await session.execute(_candidates(horizon, cursor, policy.batch))).all()
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
    key: Any = ADVISORY_KEY
    if db.schema is not None:
        # Installations in two schemas of one database prune their own tables: their turns
        # are apart too (core.storage.scope).
        key = func.hashtextextended(scoped("agentcron_retention", db.schema), 0)
    return bool(await session.scalar(select(func.pg_try_advisory_xact_lock(key))))


def _candidates(horizon: datetime, cursor: tuple[datetime, uuid.UUID] | None, limit: int) -> Any:
    """The next ``limit`` runs created before ``horizon``, oldest first, after ``cursor``.

    The cursor moves past protected runs too, so a pass ends even when the oldest rows are all
    kept (a schedule's last 100 runs, years old)."""
    statement = select(Run.id, Run.schedule_id, Run.created_at, Run.due_at).where(
        Run.created_at < horizon
    )
    if cursor is not None:
        # A row-value comparison, which both databases answer as a range of ix_runs_created_at;
        # the equivalent OR of two conditions made PostgreSQL rescan from the start each batch.
        statement = statement.where(tuple_(Run.created_at, Run.id) > tuple_(*cursor))
    return statement.order_by(Run.created_at, Run.id).limit(limit)


async def _keep(
    session: AsyncSession, schedule_id: uuid.UUID, now: datetime, policy: RetentionPolicy
) -> _Keep:
    found = (
        await session.execute(
            select(Schedule.retention_days, Schedule.last_run_id).where(Schedule.id == schedule_id)
        )
    ).first()
    days = policy.days if found is None or found.retention_days is None else found.retention_days
    # The keep_last-th newest run: one probe of ix_runs_schedule_created (its newest keep_last
    # entries, sorted within a created_at), however long the schedule's history.
    floor = (
        await session.execute(
            select(*HISTORY_ORDER)
            .where(Run.schedule_id == schedule_id)
            .order_by(*(key.desc() for key in HISTORY_ORDER))
            .offset(policy.keep_last - 1)
            .limit(1)
        )
    ).first()
    return _Keep(
        horizon=now - timedelta(days=days),
        floor=None if floor is None else (floor[0], floor[1], floor[2]),
        latest=None if found is None else found.last_run_id,
    )


async def _delete(session: AsyncSession, doomed: list[Any], report: PruneReport) -> None:
    ids = [row.id for row in doomed]
    # The candidates were read without a lock: the status test is repeated in the DELETE, so a
    # run re-queued or still delivering since is left alone.
    task_ids = list(
        (
            await session.execute(
                delete(Run)
                .where(Run.id.in_(ids), Run.status.in_(TERMINAL), Run.deliver_until.is_(None))
                .returning(Run.task_id)
            )
        ).scalars()
    )
    report.deleted += len(task_ids)
    orphans = {task_id for task_id in task_ids if task_id is not None}
    if orphans:
        # A persistent schedule's task is shared by all its runs: it goes only when no run and
        # no schedule refers to it any more.
        result = await session.execute(
            delete(Task).where(
                Task.id.in_(orphans),
                Task.lock_run_id.is_(None),
                ~exists().where(Run.task_id == Task.id),
                ~exists().where(Schedule.id == Task.schedule_id, Schedule.task_id == Task.id),
            )
        )
        report.tasks_deleted += int(getattr(result, "rowcount", 0) or 0)
