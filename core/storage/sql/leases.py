"""Statements on the leases of runs: the runs a claim may take, taking them, renewing the
leases an engine holds, giving them back.

A lease (``lease_owner``, ``lease_expires_at``) is an engine's hold on an active run; it writes
``transitions.leased`` and ``transitions.released``. Row locks are requested with
``skip_locked`` where a claim takes runs: PostgreSQL renders ``FOR UPDATE SKIP LOCKED``; SQLite
renders nothing and relies on its IMMEDIATE write transaction, which already serialises
writers. The lock order is ``core.storage.sql.runs``'s.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from sqlalchemy import ColumnElement, Select, Update, and_, exists, or_, select, update

from agentcron.core.states import ACTIVE
from agentcron.core.storage.models import RUNS, SCHEDULES, Run
from agentcron.core.storage.sql.liveness import liveness_held
from agentcron.core.storage.sql.runs import locked_runs
from agentcron.core.transitions import leased


def claimable_runs(
    now: datetime,
    limit: int,
    dead: Sequence[str] = (),
    predecessors: ColumnElement[bool] | None = None,
    *,
    schema: str | None,
) -> Select[uuid.UUID, str | None]:
    """Runs this instance may take: queued ones (manual, replay, retry whose backoff is over)
    that nobody leases, pending or running ones whose lease expired (a dead replica's), those
    of the ``dead`` owners whose liveness lock is still held by nobody (checked again here, in
    the claim itself: a replica that came back in between keeps its runs), and those matched
    by ``predecessors`` (a restarted engine's first claim, ``SqlRunStore.claim_due_jobs``).
    ``schema``: the installation's (``Database.schema``), whose liveness locks are looked for."""
    taken = [
        and_(Run.lease_owner.is_(None), Run.available_at <= now),
        Run.lease_expires_at < now,
    ]
    if dead:
        taken.append(and_(Run.lease_owner.in_(list(dead)), ~liveness_held(Run.lease_owner, schema)))
    if predecessors is not None:
        taken.append(predecessors)
    return (
        select(Run.id, Run.lease_owner)
        .where(Run.status.in_(ACTIVE), or_(*taken))
        .order_by(Run.available_at)
        .limit(limit)
        .with_for_update(skip_locked=True)
    )


def predecessor_runs(owner: str, multi_process: bool) -> ColumnElement[bool]:
    """The active runs a restarted engine ``owner`` takes over at its first claim (the
    ``predecessors`` of ``claimable_runs``): with several processes on the database
    (``multi_process``, PostgreSQL) those leased under this very id, else (SQLite, one engine)
    every leased run."""
    return Run.lease_owner == owner if multi_process else Run.lease_owner.is_not(None)


def take_runs(ids: Sequence[uuid.UUID], owner: str, until: Any, now: Any) -> Update:
    """Lease the claimable runs ``ids`` to ``owner`` at ``now`` (``claimable_runs`` locked
    them); returns them."""
    taken = leased(owner, until, now, RUNS.c.claimed_at)
    return update(Run).where(Run.id.in_(ids)).values(**taken).returning(Run)


def renew_leases(owner: str, until: datetime, ids: Sequence[uuid.UUID] | None = None) -> Update:
    """Extend the leases ``owner`` holds (only on ``ids`` when given); returns (id, stop) of
    each: ``stop``, the run was asked to stop or its schedule was deleted."""
    only = [Run.id.in_(ids)] if ids is not None else []
    return (
        update(Run)
        .where(locked_runs(Run.lease_owner == owner, Run.status.in_(ACTIVE), *only))
        .values(lease_expires_at=until)
        .returning(Run.id, or_(Run.cancel_requested, _schedule_deleted))
    )


# A run's schedule is deleted. The deletion does not wait to mark its running runs (see
# ``unheld_pending``): their attempts learn it here, from their lease renewal.
_schedule_deleted = exists().where(
    SCHEDULES.c.id == RUNS.c.schedule_id, SCHEDULES.c.deleted_at.is_not(None)
)


def release(owner: str, ids: Sequence[uuid.UUID], statuses: Sequence[str], values: Any) -> Any:
    """``values`` (``transitions.released``) onto the runs ``ids`` of ``owner`` in one of
    ``statuses``, locked in id order; returns (id, task_id) of each."""
    held = (
        select(Run.id)
        .where(Run.id.in_(ids), Run.lease_owner == owner, Run.status.in_(statuses))
        .order_by(Run.id)
        .with_for_update()
    )
    return (
        update(Run)
        .where(Run.id.in_(held.scalar_subquery()))
        .values(**values)
        .returning(Run.id, Run.task_id)
    )
