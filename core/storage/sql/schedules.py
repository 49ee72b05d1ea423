"""Statements on schedules: the rows the service layer reads, locks, counts and unbinds, and
those the run ledger finds due, advances, locks and follows.

Each function returns a SQLAlchemy statement; the services (``core.schedules``, ``core.tasks``,
``core.secrets``) and the run ledger (``core.ledger``) only run them. The ledger's batched
statements read their rows from one derived table (``core.storage.sql.rows``) and are built
once per dialect, as ``core.storage.sql.runs`` says; they lock schedules after runs. A row
lock (``FOR UPDATE``) renders on PostgreSQL only: SQLite relies on its IMMEDIATE write
transaction, which already serialises writers.
"""

from __future__ import annotations

import uuid
from collections.abc import Collection
from datetime import datetime
from functools import cache
from typing import Any

from sqlalchemy import (
    Boolean,
    Integer,
    ScalarSelect,
    Select,
    String,
    Text,
    Update,
    Uuid,
    bindparam,
    func,
    or_,
    select,
    update,
)

from agentcron.core.storage.models import SCHEDULES, Schedule
from agentcron.core.storage.sql.rows import Columns, among, columns_of, rows_table
from agentcron.core.storage.types import UTCDateTime
from agentcron.core.transitions import followed, streak

# The key of the transaction-level advisory lock that is the turn at the active-schedule limit
# ("agnc"; retention's pass holds another key). ``core.schedules.context`` says who takes it.
CAPACITY_LOCK = 0x61676E63


def capacity_turn() -> Select[Any]:
    """Wait for the turn at the active-schedule limit, then hold it until the transaction
    ends (PostgreSQL only: ``pg_advisory_xact_lock``)."""
    return select(func.pg_advisory_xact_lock(CAPACITY_LOCK))


def active_count() -> Select[int]:
    """How many schedules are active: enabled and not deleted."""
    return (
        select(func.count())
        .select_from(Schedule)
        .where(Schedule.enabled.is_(True), Schedule.deleted_at.is_(None))
    )


def visible_schedule(
    schedule_id: uuid.UUID, owner: str | None, *, lock: bool = False
) -> Select[Schedule]:
    """The undeleted schedule ``schedule_id`` if ``owner`` may see it (None: any owner),
    row-locked when ``lock``."""
    query = select(Schedule).where(Schedule.id == schedule_id, Schedule.deleted_at.is_(None))
    if owner is not None:
        query = query.where(Schedule.owner == owner)
    return query.with_for_update() if lock else query


def schedules_page(
    owner: str | None, after: tuple[datetime, uuid.UUID] | None, limit: int
) -> Select[Schedule]:
    """Up to ``limit`` undeleted schedules of ``owner`` (None: every owner), newest created
    first (ties by id), strictly after the position ``after`` (created_at, id) of a page's
    last row."""
    query = select(Schedule).where(Schedule.deleted_at.is_(None))
    if owner is not None:
        query = query.where(Schedule.owner == owner)
    if after is not None:
        created, id = after
        query = query.where(
            or_(
                Schedule.created_at < created,
                (Schedule.created_at == created) & (Schedule.id < id),
            )
        )
    return query.order_by(Schedule.created_at.desc(), Schedule.id.desc()).limit(limit)


def schedule_by_key(owner: str, key: str, *, lock: bool = False) -> Select[Schedule]:
    """The live schedule ``owner`` keeps under ``key``, row-locked when ``lock``."""
    query = select(Schedule).where(
        Schedule.owner == owner, Schedule.key == key, Schedule.deleted_at.is_(None)
    )
    return query.with_for_update() if lock else query


def keyed_schedules(owner: str, scope: str) -> Select[Schedule]:
    """``owner``'s live schedules whose key starts with ``scope``, row-locked in id order."""
    return (
        select(Schedule)
        .where(
            Schedule.owner == owner,
            Schedule.key.is_not(None),
            Schedule.deleted_at.is_(None),
            func.substr(Schedule.key, 1, len(scope)) == scope,
        )
        .order_by(Schedule.id)
        .with_for_update()
    )


def shortest_retention() -> Select[int | None]:
    """The shortest ``retention_days`` any schedule sets (NULL: none sets one); unlocked."""
    return select(func.min(Schedule.retention_days))


def retention_of(schedule_id: uuid.UUID) -> Select[int | None, uuid.UUID | None]:
    """(retention_days, last_run_id) of schedule ``schedule_id``: what a prune keeps of its
    runs; unlocked."""
    return select(Schedule.retention_days, Schedule.last_run_id).where(Schedule.id == schedule_id)


def lock_task_schedules(task_id: uuid.UUID) -> Select[uuid.UUID]:
    """Row-lock the schedules bound to task ``task_id``, in id order."""
    return (
        select(Schedule.id)
        .where(Schedule.task_id == task_id)
        .order_by(Schedule.id)
        .with_for_update()
    )


def unbind_task(task_id: uuid.UUID) -> Update:
    """Unbind task ``task_id`` from the schedules bound to it (each gets a new one at its
    next run)."""
    return update(Schedule).where(Schedule.task_id == task_id).values(task_id=None)


def schedule_owner(schedule_id: uuid.UUID) -> ScalarSelect[str]:
    """The owner of schedule ``schedule_id``, as a subquery."""
    return select(Schedule.owner).where(Schedule.id == schedule_id).scalar_subquery()


# -- the run ledger's -------------------------------------------------------------------------


def due_schedules(now: datetime, limit: int) -> Select[Any]:
    """Enabled, undeleted schedules with ``next_run <= now``, oldest due first, row-locked: as
    rows of the table, not ``Schedule`` objects (a claim only reads them, and loading hundreds
    of ORM objects per claim was about a tenth of its CPU); a row has the same attribute names
    as ``Schedule``."""
    return (
        select(SCHEDULES)
        .where(
            SCHEDULES.c.next_run <= now,
            SCHEDULES.c.enabled.is_(True),
            SCHEDULES.c.deleted_at.is_(None),
        )
        .order_by(SCHEDULES.c.next_run)
        .limit(limit)
        .with_for_update(skip_locked=True)
    )


def lock_schedule(schedule_id: uuid.UUID) -> Select[uuid.UUID]:
    """The schedule's row, locked as an admission locks it (``FOR NO KEY UPDATE``)."""
    return select(Schedule.id).where(Schedule.id == schedule_id).with_for_update(key_share=True)


def schedule_owners(ids: Collection[uuid.UUID]) -> Select[uuid.UUID, str]:
    """(id, owner) of these schedules."""
    return select(Schedule.id, Schedule.owner).where(Schedule.id.in_(ids))


ADVANCE = columns_of(SCHEDULES, "id", "next_run", "scheduled_runs")


@cache
def advance_schedules(dialect: str) -> Any:
    """Move each schedule of ``ADVANCE`` (parameter ``a``) to its next due time."""
    rows = rows_table(ADVANCE, "a", dialect)
    return (
        update(SCHEDULES)
        .where(SCHEDULES.c.id == rows.c["id"], among(SCHEDULES.c.id, "a", dialect, ADVANCE))
        .values(next_run=rows.c["next_run"], scheduled_runs=rows.c["scheduled_runs"])
    )


@cache
def lock_schedules(dialect: str) -> Select[*tuple[Any, ...]]:
    """The schedules of the ids ``j``, locked in id order (``FOR NO KEY UPDATE``: a pause
    waits for the admission or is seen by it, and runs of them may still be inserted
    meanwhile)."""
    return (
        select(
            Schedule.id,
            Schedule.owner,
            Schedule.enabled,
            Schedule.deleted_at,
            Schedule.overlap,
            Schedule.mode,
            Schedule.task_id,
        )
        .where(among(Schedule.id, "j", dialect))
        .order_by(Schedule.id)
        .with_for_update(key_share=True)
    )


FOLLOW_UP: Columns = {
    "id": Uuid(),
    "status": String(),
    "error": Text(),
    "run_id": Uuid(),
    "reset": Boolean(),
    "failures": Integer(),
}


@cache
def follow_schedules(dialect: str) -> Any:
    """Each schedule of ``FOLLOW_UP`` (parameter ``f``) follows the last of its runs a record
    ended (``followed``, with the streak ``streak`` computes), locked in id order; returns
    (id, streak, limit, enabled) of each."""
    rows = rows_table(FOLLOW_UP, "f", dialect)
    locked = (
        select(SCHEDULES.c.id)
        .where(among(SCHEDULES.c.id, "f", dialect, FOLLOW_UP))
        .order_by(SCHEDULES.c.id)
        .with_for_update(key_share=True)
    )
    failures = streak(SCHEDULES.c.consecutive_failures, rows.c["reset"], rows.c["failures"])
    return (
        update(SCHEDULES)
        .where(SCHEDULES.c.id == rows.c["id"], SCHEDULES.c.id.in_(locked.scalar_subquery()))
        .values(
            **followed(
                bindparam("b_now", type_=UTCDateTime()),
                rows.c["status"],
                rows.c["error"],
                rows.c["run_id"],
                failures,
            )
        )
        .returning(
            SCHEDULES.c.id,
            SCHEDULES.c.consecutive_failures,
            SCHEDULES.c.pause_after_failures,
            SCHEDULES.c.enabled,
        )
    )


def update_schedule(schedule_id: uuid.UUID, values: dict[str, Any]) -> Update:
    """Write ``values`` (a transition's columns) onto schedule ``schedule_id``, locking its
    row."""
    return update(Schedule).where(Schedule.id == schedule_id).values(**values)


# Executemany: persistent schedule ``b_id`` keeps task ``b_task`` for its runs.
BIND_TASK = (
    update(SCHEDULES)
    .where(SCHEDULES.c.id == bindparam("b_id"))
    .values(task_id=bindparam("b_task", type_=Uuid()))
)
