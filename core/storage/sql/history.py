"""Statements on the run history: its order, a page of it, the counts by status, one run as an
owner may see it; and its pruning (``core.retention``): the turn of a pass, the candidates, the
floor a schedule keeps, the runs deleted.

Reads take no row lock unless said; a prune takes its turn under a transaction-level advisory
lock (PostgreSQL only) and deletes without reading under a lock first (the DELETE repeats the
test that makes a run prunable).
"""

from __future__ import annotations

import uuid
from collections.abc import Collection, Sequence
from datetime import datetime
from typing import Any

from sqlalchemy import (
    ColumnElement,
    Select,
    and_,
    delete,
    func,
    or_,
    select,
    tuple_,
)
from sqlalchemy.sql.dml import ReturningDelete

from agentcron.core.states import TERMINAL, RunStatus
from agentcron.core.storage.models import Run, Schedule
from agentcron.core.storage.scope import scoped

# The run history's order, newest first: by when a run was written; runs written at once (the
# due times a claim writes after a restart, a backfill, a resume's catch-up share one created_at)
# by due time, a run without one (manual, replay) counting as due when it was queued; then by
# id, so the order is total and a cursor holding the three keys resumes exactly after its row.
# ix_runs_schedule_created gives the first key; the rows of one created_at are sorted after.
due_or_queued = func.coalesce(Run.due_at, Run.created_at)
HISTORY_ORDER = (Run.created_at, due_or_queued, Run.id)

# Replicas on one PostgreSQL database take turns: a batch runs only under this transaction-level
# advisory lock, and a replica that cannot get it leaves the pass to the one that has it.
ADVISORY_KEY = 0x61676E74  # "agnt"


def after_in_history(
    created: datetime, due: datetime, id: uuid.UUID
) -> tuple[ColumnElement[bool], ...]:
    """The runs listed after the position (``created``, ``due``, ``id``), newest first. The
    bound on created_at alone is implied by the rest; it is there for the index."""
    return (
        Run.created_at <= created,
        or_(
            Run.created_at < created,
            and_(Run.created_at == created, due_or_queued < due),
            and_(Run.created_at == created, due_or_queued == due, Run.id < id),
        ),
    )


def history_page(
    schedule_id: uuid.UUID,
    limit: int,
    *,
    status: Collection[str] | None = None,
    trigger: Collection[str] | None = None,
    origin: Collection[str] | None = None,
    skipped: bool = True,
    after: tuple[datetime, datetime, uuid.UUID] | None = None,
) -> Select[Run]:
    """Up to ``limit`` runs of schedule ``schedule_id`` newest first (``HISTORY_ORDER``), only
    those in one of ``status``, of one of ``trigger`` / ``origin`` when given, without the
    skipped rows unless ``skipped``, after the position ``after`` (``after_in_history``).
    Unlocked."""
    query = select(Run).where(Run.schedule_id == schedule_id)
    if status is not None:
        query = query.where(Run.status.in_([str(value) for value in status]))
    if trigger is not None:
        query = query.where(Run.trigger.in_(list(trigger)))
    if origin is not None:
        query = query.where(Run.origin.in_(list(origin)))
    if not skipped:
        query = query.where(Run.status != RunStatus.SKIPPED)
    if after is not None:
        query = query.where(*after_in_history(*after))
    return query.order_by(*(key.desc() for key in HISTORY_ORDER)).limit(limit)


def status_counts(schedule_id: uuid.UUID) -> Select[str, int]:
    """(status, how many) of the runs of schedule ``schedule_id``, unlocked."""
    return (
        select(Run.status, func.count()).where(Run.schedule_id == schedule_id).group_by(Run.status)
    )


def visible_run(
    run_id: uuid.UUID, owner: str | None, *, lock: bool = False
) -> Select[Run, Schedule]:
    """Run ``run_id`` with its schedule (deleted or not), if ``owner`` may see it (None: any
    owner); with ``lock`` the run's row is locked (``FOR UPDATE OF runs``), not the
    schedule's."""
    query = (
        select(Run, Schedule).join(Schedule, Run.schedule_id == Schedule.id).where(Run.id == run_id)
    )
    if owner is not None:
        query = query.where(Schedule.owner == owner)
    if lock:
        query = query.with_for_update(of=Run)
    return query


# -- pruning --------------------------------------------------------------------------------------


def prune_turn(schema: str | None) -> Select[bool]:
    """Try to take this installation's pruning turn until the transaction ends (True), never
    waiting (PostgreSQL only: ``pg_try_advisory_xact_lock``). Installations in two schemas of
    one database prune their own tables, so their turns are apart too (``core.storage.scope``):
    with ``schema`` the key is the database's hash of the scoped name."""
    key: Any = ADVISORY_KEY
    if schema is not None:
        key = func.hashtextextended(scoped("agentcron_retention", schema), 0)
    return select(func.pg_try_advisory_xact_lock(key))


def prune_candidates(
    horizon: datetime, cursor: tuple[datetime, uuid.UUID] | None, limit: int
) -> Select[uuid.UUID, uuid.UUID, datetime, datetime | None]:
    """The next ``limit`` runs created before ``horizon``, oldest first, after ``cursor``
    (created_at, id); unlocked.

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


def kept_floor(schedule_id: uuid.UUID, keep_last: int) -> Select[*tuple[Any, ...]]:
    """The ``HISTORY_ORDER`` keys of the ``keep_last``-th newest run of schedule
    ``schedule_id``: one probe of ix_runs_schedule_created (its newest ``keep_last`` entries,
    sorted within a created_at), however long the schedule's history. Unlocked."""
    return (
        select(*HISTORY_ORDER)
        .where(Run.schedule_id == schedule_id)
        .order_by(*(key.desc() for key in HISTORY_ORDER))
        .offset(keep_last - 1)
        .limit(1)
    )


def delete_prunable(ids: Sequence[uuid.UUID]) -> ReturningDelete[uuid.UUID | None]:
    """Delete the runs ``ids`` that are still finished with no delivery owed (the candidates
    were read without a lock: a run re-queued or still delivering since is left alone), their
    deliveries with them (ON DELETE CASCADE); returns the task_id of each run deleted."""
    return (
        delete(Run)
        .where(Run.id.in_(ids), Run.status.in_(TERMINAL), Run.deliver_until.is_(None))
        .returning(Run.task_id)
    )
