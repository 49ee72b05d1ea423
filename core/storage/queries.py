"""Named statements of the engine, in one place ("where is the claim query?" has one answer).

Each function returns a SQLAlchemy statement; the run ledger (``core.ledger``) only
orchestrates them. The batched statements write the transitions of ``core.transitions``, the
same the one-by-one path applies to ORM rows. Row locks are requested with ``skip_locked``:
PostgreSQL renders ``FOR UPDATE SKIP LOCKED``; SQLite renders nothing and relies on its
IMMEDIATE write transaction, which already serialises writers.
"""

from __future__ import annotations

import uuid
from collections.abc import Collection, Sequence
from datetime import datetime
from typing import Any

from sqlalchemy import (
    ColumnElement,
    Select,
    Table,
    Update,
    and_,
    exists,
    func,
    or_,
    select,
    update,
)
from sqlalchemy.dialects import postgresql, sqlite

from agentcron.core.states import ACTIVE, RunStatus
from agentcron.core.storage.liveness_sql import liveness_held
from agentcron.core.storage.models import Run, Schedule, Task
from agentcron.core.storage.types import UTCDateTime
from agentcron.core.transitions import delivering

RUNS: Table = Run.__table__  # type: ignore[assignment]  # declarative tables are Tables
SCHEDULES: Table = Schedule.__table__  # type: ignore[assignment]
TASKS: Table = Task.__table__  # type: ignore[assignment]


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


def lock_schedule(schedule_id: uuid.UUID) -> Select[uuid.UUID]:
    """The schedule's row, locked as an admission locks it (``FOR NO KEY UPDATE``)."""
    return select(Schedule.id).where(Schedule.id == schedule_id).with_for_update(key_share=True)


def insert_runs(dialect: str) -> Any:
    """Insert scheduled runs, executed with one parameter set per run (SQLAlchemy sends them
    as multi-row INSERTs); a (schedule_id, due_at) already present is skipped by the UNIQUE
    constraint (``ON CONFLICT DO NOTHING``), never by reading first. Returns the ids actually
    inserted."""
    return _INSERT_RUNS[dialect]


_INSERT_RUNS = {
    name: insert(RUNS)
    .on_conflict_do_nothing(index_elements=["schedule_id", "due_at"])
    .returning(RUNS.c.id)
    for name, insert in (("postgresql", postgresql.insert), ("sqlite", sqlite.insert))
}


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


def _locked_runs(*where: ColumnElement[bool], skip_locked: bool = False) -> ColumnElement[bool]:
    """``Run.id IN`` the runs matching ``where``, row-locked in id order: the order every
    write that locks several runs takes, so no two of them can deadlock over the same runs (a
    plain UPDATE locks in the order it happens to scan). ``skip_locked``: leave out the runs
    another transaction holds instead of waiting for them."""
    held = select(Run.id).where(*where).order_by(Run.id).with_for_update(skip_locked=skip_locked)
    return Run.id.in_(held.scalar_subquery())


def renew_leases(owner: str, until: datetime, ids: Sequence[uuid.UUID] | None = None) -> Update:
    """Extend the leases ``owner`` holds (only on ``ids`` when given); returns (id, stop) of
    each: ``stop``, the run was asked to stop or its schedule was deleted."""
    only = [Run.id.in_(ids)] if ids is not None else []
    return (
        update(Run)
        .where(_locked_runs(Run.lease_owner == owner, Run.status.in_(ACTIVE), *only))
        .values(lease_expires_at=until)
        .returning(Run.id, or_(Run.cancel_requested, _schedule_deleted))
    )


# A run's schedule is deleted. The deletion does not wait to mark its running runs (see
# ``unheld_pending``): their attempts learn it here, from their lease renewal.
_schedule_deleted = exists().where(
    SCHEDULES.c.id == RUNS.c.schedule_id, SCHEDULES.c.deleted_at.is_not(None)
)


# -- writes made while holding a schedule's row -----------------------------------------------
#
# Every transaction that locks runs and their schedule locks the runs first (claims aside,
# which skip what is locked): records, admissions, renewals and the one-run verbs. One that
# holds a schedule first (its deletion; an admission asking the schedule's other runs to
# stop) must not then wait for one of its runs, or each waits for the other (PostgreSQL
# aborts one after a second). So those writes skip the runs another transaction holds.


def unheld_pending(schedule_id: uuid.UUID) -> ColumnElement[bool]:
    """The pending runs of a schedule that no other transaction holds, row-locked: its
    deletion ends them at once. One skipped is being admitted or its lease renewed; its
    admission finds the schedule deleted and ends it the same way."""
    pending = Run.status == RunStatus.PENDING.value
    return _locked_runs(Run.schedule_id == schedule_id, pending, skip_locked=True)


def ask_to_stop(run_ids: Sequence[uuid.UUID]) -> Update:
    """Ask these runs to stop (overlap ``cancel_other``), those no other transaction holds;
    a run skipped is asked at the next look of the run waiting for it."""
    unheld = _locked_runs(Run.id.in_(run_ids), skip_locked=True)
    return update(Run).where(unheld).values(cancel_requested=True)


def next_wakeup(owner: str | None, schema: str | None) -> Select[*tuple[Any, ...]]:
    """The earliest instant at which the claim could find work: a schedule's ``next_run``, a
    queued run becoming available, or a lease running out; and, apart, the earliest delivery
    lease (``deliver_until``) to run out. Leases of ``owner`` count too: one that lapses here
    (its attempt died with the database out of reach) is taken back by this very instance,
    even with no other replica and nothing else due. Leases of runs and deliveries in hand are
    renewed long before they run out, so they never wake the loop.

    With ``owner`` (liveness on, PostgreSQL) two more columns: how many other owners hold
    active runs or are making deliveries, and which of them hold no liveness lock (an array,
    NULL for none, looked for among the locks of ``schema``'s installation). The distinct
    owners come first, so pg_locks is read once per owner, not once per run."""
    first_due = (
        select(func.min(Schedule.next_run))
        .where(Schedule.enabled.is_(True), Schedule.deleted_at.is_(None))
        .scalar_subquery()
    )
    first_queued = (
        select(func.min(Run.available_at))
        .where(Run.status == RunStatus.PENDING.value, Run.lease_owner.is_(None))
        .scalar_subquery()
    )
    first_expiry = (
        select(func.min(Run.lease_expires_at))
        .where(Run.status.in_(ACTIVE), Run.lease_owner.is_not(None))
        .scalar_subquery()
    )
    # An index on deliver_until makes this a look at the first index entry (NULLs excluded).
    first_delivery = select(func.min(Run.deliver_until)).scalar_subquery()
    if owner is None:
        return select(first_due, first_queued, first_expiry, first_delivery)
    # Owners of active runs, and engines making deliveries (the deliver_until index finds
    # those rows); UNION, not UNION ALL: one row per owner.
    others = (
        select(Run.lease_owner.label("owner"))
        .where(Run.status.in_(ACTIVE), Run.lease_owner.is_not(None), Run.lease_owner != owner)
        .union(
            select(Run.deliverer).where(
                Run.deliver_until.is_not(None),
                Run.deliverer.is_not(None),
                Run.deliverer != owner,
            )
        )
        .cte("others")
    )
    watched = select(func.count()).select_from(others).scalar_subquery()
    lockless = (
        select(func.array_agg(others.c.owner))
        .where(~liveness_held(others.c.owner, schema))
        .scalar_subquery()
    )
    return select(first_due, first_queued, first_expiry, first_delivery, watched, lockless).add_cte(
        others
    )


def database_now() -> Select[datetime]:
    """The database's clock, the one time of every replica (``core.clock.DatabaseClock``).
    ``clock_timestamp()``, not ``now()``: the instant the statement runs, whatever the
    transaction."""
    return select(func.clock_timestamp(type_=UTCDateTime()))


def renew_deliveries(ids: Sequence[uuid.UUID], until: datetime) -> Update:
    """Extend the delivery leases of runs this process is delivering. One already cleared
    (its deliveries are done) stays cleared."""
    return (
        update(Run)
        .where(Run.id.in_(ids), Run.deliver_until.is_not(None))
        .values(deliver_until=until)
    )


def task_workdirs(ids: Collection[uuid.UUID]) -> Select[uuid.UUID, str]:
    """(id, workdir) of these tasks."""
    return select(Task.id, Task.workdir).where(Task.id.in_(ids))


def schedule_owners(ids: Collection[uuid.UUID]) -> Select[uuid.UUID, str]:
    """(id, owner) of these schedules."""
    return select(Schedule.id, Schedule.owner).where(Schedule.id.in_(ids))


def end_deliveries(ids: Sequence[uuid.UUID]) -> Update:
    """Nothing left to deliver for these runs: every channel is delivered or failed for good."""
    return update(Run).where(Run.id.in_(ids)).values(**delivering(None, None))


def take_over_deliveries(
    now: datetime,
    owner: str,
    until: datetime,
    limit: int,
    dead: Sequence[str] = (),
    predecessors: ColumnElement[bool] | None = None,
    *,
    schema: str | None,
) -> Update:
    """Lease to ``owner`` up to ``limit`` finished runs whose deliveries nobody is making, oldest
    first; returns the runs. Taken: those whose delivery lease ran out (their deliverer died or
    was stopped), those of the ``dead`` deliverers whose liveness lock nobody holds (checked
    again here, as the claim does), and those matched by ``predecessors`` (a restarted
    engine's first look); ``schema`` as for ``claimable_runs``. The rows are locked with
    ``SKIP LOCKED``, so two replicas recovering at once take different runs (on SQLite the
    write transaction serialises them)."""
    taken = [Run.deliver_until < now]
    if dead:
        taken.append(and_(Run.deliverer.in_(list(dead)), ~liveness_held(Run.deliverer, schema)))
    if predecessors is not None:
        taken.append(predecessors)
    orphaned = (
        select(Run.id)
        .where(Run.deliver_until.is_not(None), or_(*taken))
        .order_by(Run.deliver_until)
        .limit(limit)
        .with_for_update(skip_locked=True)
    )
    return (
        update(Run)
        .where(Run.id.in_(orphaned.scalar_subquery()))
        .values(**delivering(until, owner))
        .returning(Run)
        .execution_options(synchronize_session=False)
    )
