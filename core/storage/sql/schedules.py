"""Statements on schedules: the rows the service layer reads, locks, counts and unbinds.

Each function returns a SQLAlchemy statement; the services (``core.schedules``, ``core.tasks``,
``core.secrets``) only run them. A row lock (``FOR UPDATE``) renders on PostgreSQL only: SQLite
relies on its IMMEDIATE write transaction, which already serialises writers.
"""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Any

from sqlalchemy import ScalarSelect, Select, Update, func, or_, select, update

from agentcron.core.storage.models import Schedule

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
