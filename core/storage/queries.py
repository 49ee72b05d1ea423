"""Named statements of the engine, in one place ("where is the claim query?" has one answer).

Each function returns a SQLAlchemy statement; service functions in ``core.scheduler`` only
orchestrate them. Row locks are requested with ``skip_locked``: PostgreSQL renders
``FOR UPDATE SKIP LOCKED``; SQLite renders nothing and relies on its IMMEDIATE write
transaction, which already serialises writers.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from sqlalchemy import Select, Update, and_, func, or_, select, update
from sqlalchemy.dialects import postgresql, sqlite

from core.storage.models import Run, Schedule

ACTIVE = ("pending", "running")


def due_schedules(now: datetime, limit: int) -> Select[Schedule]:
    """Enabled, undeleted schedules with ``next_run <= now``, oldest due first, row-locked."""
    return (
        select(Schedule)
        .where(
            Schedule.next_run <= now,
            Schedule.enabled.is_(True),
            Schedule.deleted_at.is_(None),
        )
        .order_by(Schedule.next_run)
        .limit(limit)
        .with_for_update(skip_locked=True)
    )


def insert_runs(dialect: str, rows: Sequence[dict[str, Any]]) -> Any:
    """One multi-row INSERT of scheduled runs; a (schedule_id, due_at) already present is
    skipped by the UNIQUE constraint (``ON CONFLICT DO NOTHING``), never by reading first.
    Returns the ids actually inserted."""
    insert = postgresql.insert if dialect == "postgresql" else sqlite.insert
    return (
        insert(Run)
        .values(list(rows))
        .on_conflict_do_nothing(index_elements=["schedule_id", "due_at"])
        .returning(Run.id)
    )


def claimable_runs(now: datetime, limit: int) -> Select[uuid.UUID, str | None]:
    """Runs this instance may take: queued ones (manual, replay, retry whose backoff is over)
    that nobody leases, and pending or running ones whose lease expired (a dead replica's)."""
    return (
        select(Run.id, Run.lease_owner)
        .where(
            Run.status.in_(ACTIVE),
            or_(
                and_(Run.lease_owner.is_(None), Run.available_at <= now),
                Run.lease_expires_at < now,
            ),
        )
        .order_by(Run.available_at)
        .limit(limit)
        .with_for_update(skip_locked=True)
    )


def lease_runs(ids: Sequence[uuid.UUID], owner: str, until: datetime) -> Update:
    return (
        update(Run)
        .where(Run.id.in_(ids))
        .values(lease_owner=owner, lease_expires_at=until)
        .returning(Run)
    )


def renew_leases(owner: str, until: datetime, ids: Sequence[uuid.UUID] | None = None) -> Update:
    """Extend the leases ``owner`` holds (only on ``ids`` when given); returns
    (id, cancel_requested) of each."""
    query = update(Run).where(Run.lease_owner == owner, Run.status.in_(ACTIVE))
    if ids is not None:
        query = query.where(Run.id.in_(ids))
    return query.values(lease_expires_at=until).returning(Run.id, Run.cancel_requested)


def release_leases(owner: str, ids: Sequence[uuid.UUID], now: datetime) -> Update:
    """Give queued (not yet started) runs back to the pool, available at once to any replica.

    A run that started meanwhile is left alone: its attempt is executing here and is drained
    (or released by ``release_for_takeover``); releasing it would let a replica run it twice.
    """
    return (
        update(Run)
        .where(Run.lease_owner == owner, Run.id.in_(ids), Run.status == "pending")
        .values(status="pending", lease_owner=None, lease_expires_at=None, available_at=now)
    )


def running_siblings(schedule_id: uuid.UUID, run_id: uuid.UUID) -> Select[uuid.UUID]:
    """Other runs of the same schedule that are executing now."""
    return select(Run.id).where(
        Run.schedule_id == schedule_id, Run.id != run_id, Run.status == "running"
    )


def buffered_siblings(schedule_id: uuid.UUID, run_id: uuid.UUID) -> Select[int]:
    """Other runs of the same schedule already waiting under ``buffer_one``."""
    return select(func.count()).where(
        Run.schedule_id == schedule_id,
        Run.id != run_id,
        Run.status == "pending",
        Run.reason == "buffered",
    )


def next_wakeup(now: datetime, owner: str) -> Select[Any, Any, Any]:
    """The earliest instant at which the claim could find work: a schedule's ``next_run``, a
    queued run becoming available, or another owner's lease running out."""
    first_due = (
        select(func.min(Schedule.next_run))
        .where(Schedule.enabled.is_(True), Schedule.deleted_at.is_(None))
        .scalar_subquery()
    )
    first_queued = (
        select(func.min(Run.available_at))
        .where(Run.status == "pending", Run.lease_owner.is_(None))
        .scalar_subquery()
    )
    first_expiry = (
        select(func.min(Run.lease_expires_at))
        .where(Run.status.in_(ACTIVE), Run.lease_owner != owner)
        .scalar_subquery()
    )
    return select(first_due, first_queued, first_expiry)
