"""The run ledger's statements on runs: a claim's writes, an admission, a record, the writes
made while holding a schedule's row, a promotion. A run's lease (claimed, taken, renewed,
given back) is ``core.storage.sql.leases``; the schedules and tasks these write with the runs
are ``sql.schedules`` and ``sql.tasks``.

Each batched statement reads its rows from one derived table (``core.storage.sql.rows``) and
writes what ``core.transitions`` says, so a run alone and a run in a batch of 500 go through the
same statement, on SQLite and PostgreSQL alike. A builder takes the dialect (the derived table
is the one thing that differs) and is cached, so a statement is built once per dialect.

Lock order, as every write that locks several rows takes it: runs in id order, then their
schedules in id order, then tasks. Claims aside, which skip what another holds. A row lock
renders on PostgreSQL only (``skip_locked``: ``FOR UPDATE SKIP LOCKED``); SQLite relies on its
IMMEDIATE write transaction, which already serialises writers.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from datetime import datetime
from functools import cache
from typing import Any

from sqlalchemy import (
    JSON,
    ColumnElement,
    Select,
    String,
    Text,
    Update,
    Uuid,
    and_,
    bindparam,
    exists,
    func,
    or_,
    select,
    true,
    update,
)
from sqlalchemy.dialects import postgresql, sqlite

from agentcron.core.states import ACTIVE, QUEUED_ORIGINS, RunReason, RunStatus
from agentcron.core.storage.models import RUNS, Run, Schedule
from agentcron.core.storage.sql.rows import Columns, among, columns_of, rows_table, split
from agentcron.core.storage.types import UTCDateTime
from agentcron.core.transitions import admitted, cancelled, delivering, promoted


def _insert(dialect: str) -> Any:
    return postgresql.insert if dialect == "postgresql" else sqlite.insert


# -- a claim's writes ---------------------------------------------------------------------------

# Every column a claim gives a run it inserts: the runs of due times, and the skipped rows that
# account for due times that do not run (core.timeline).
CLAIMED_RUN = columns_of(
    RUNS,
    "id",
    "schedule_id",
    "trigger",
    "due_at",
    "origin",
    "status",
    "reason",
    "attempt",
    "started_at",
    "task_id",
    "payload",
    "created_at",
    "available_at",
    "finished_at",
    "lease_owner",
    "lease_expires_at",
    "claimed_at",
    "cancel_requested",
    "dst_rule",
    "covers",
    "covers_until",
)
# The columns every run of due times of one claim shares (its instant, its lease, and what
# only a skipped row has), and those every skipped row shares: each sent once, not per row.
DUE_SHARED = frozenset(
    {"trigger", "created_at", "cancel_requested", "lease_owner", "lease_expires_at", "claimed_at"}
    | {"reason", "finished_at", "covers", "covers_until"}
)
SKIPPED_SHARED = frozenset(
    {"trigger", "created_at", "cancel_requested", "lease_owner", "lease_expires_at", "claimed_at"}
    | {"status", "attempt", "started_at", "task_id", "origin", "dst_rule", "finished_at"}
)


@cache
def insert_claimed(dialect: str, shared: frozenset[str]) -> Any:
    """Insert the rows ``CLAIMED_RUN`` (parameter ``r``), the ``shared`` columns the same for
    every row (``DUE_SHARED``, ``SKIPPED_SHARED``); a (schedule_id, due_at) already present
    is skipped by the UNIQUE constraint, never by reading first. Returns the ids inserted."""
    each, once = split(CLAIMED_RUN, shared)
    rows = rows_table(each, "r", dialect, once)
    names = [*each, *once]
    # WHERE true: SQLite would read ON CONFLICT as the join constraint of the SELECT's FROM.
    chosen = select(*(rows.c[name] for name in names)).where(true())
    return (
        _insert(dialect)(RUNS)
        .from_select(names, chosen)
        .on_conflict_do_nothing(index_elements=["schedule_id", "due_at"])
        .returning(RUNS.c.id)
    )


# -- an admission -------------------------------------------------------------------------------


@cache
def lock_admittable(dialect: str) -> Select[*tuple[Any, ...]]:
    """Of the ids ``i``, the active runs ``b_owner`` leases, row-locked in id order, with
    what may have changed since they were ours (the rest the engine's copy has: only its own
    verbs write a run it leases)."""
    return (
        select(Run.id, Run.status, Run.reason, Run.cancel_requested)
        .where(
            among(Run.id, "i", dialect),
            Run.lease_owner == bindparam("b_owner"),
            Run.status.in_(ACTIVE),
        )
        .order_by(Run.id)
        .with_for_update()
    )


@cache
def going(dialect: str) -> Select[*tuple[Any, ...]]:
    """The runs of the schedules ``j`` an admission judges overlap by: those executing, and
    those waiting under ``buffer_one``."""
    waiting = and_(Run.status == RunStatus.PENDING.value, Run.reason == RunReason.BUFFERED.value)
    return select(Run.schedule_id, Run.id, Run.status).where(
        among(Run.schedule_id, "j", dialect),
        or_(Run.status == RunStatus.RUNNING.value, waiting),
    )


@cache
def statuses(dialect: str) -> Select[*tuple[Any, ...]]:
    """(id, status) of the runs ``h``."""
    return select(Run.id, Run.status).where(among(Run.id, "h", dialect))


ADMISSION: Columns = {"id": Uuid(), "task_id": Uuid()}


@cache
def admit(dialect: str) -> Any:
    """Each run of ``ADMISSION`` (parameter ``s``, locked by ``lock_admittable``) starts an
    attempt (``admitted``) on its task, under a lease to ``b_until``."""
    rows = rows_table(ADMISSION, "s", dialect)
    now, until = bindparam("b_now", type_=UTCDateTime()), bindparam("b_until", type_=UTCDateTime())
    return (
        update(RUNS)
        .where(RUNS.c.id == rows.c["id"], among(RUNS.c.id, "s", dialect, ADMISSION))
        .values(
            **admitted(now, until, RUNS.c.attempt, RUNS.c.started_at),
            task_id=rows.c["task_id"],
        )
    )


ENDING: Columns = {
    "id": Uuid(),
    "status": String(),
    "reason": String(),
    "finished_at": UTCDateTime(),
    "error": Text(),
}


@cache
def end_unstarted(dialect: str) -> Any:
    """Each run of ``ENDING`` (parameter ``e``) ends without an attempt (``finished``,
    ``cancelled``, ``skipped``); an error it does not give keeps the one it had."""
    rows = rows_table(ENDING, "e", dialect)
    return (
        update(RUNS)
        .where(RUNS.c.id == rows.c["id"], among(RUNS.c.id, "e", dialect, ENDING))
        .values(
            status=rows.c["status"],
            reason=rows.c["reason"],
            finished_at=rows.c["finished_at"],
            error=func.coalesce(rows.c["error"], RUNS.c.error),
            lease_owner=None,
            lease_expires_at=None,
        )
    )


SET_REASON = update(RUNS).where(RUNS.c.id == bindparam("b_id")).values(reason=bindparam("b_reason"))

# -- a record -----------------------------------------------------------------------------------

OUTCOME: Columns = {
    "id": Uuid(),
    "status": String(),
    "reason": String(),
    "finished_at": UTCDateTime(),
    "available_at": UTCDateTime(),
    "output_at": UTCDateTime(),
    "output": Text(),
    "error": Text(),
    "result": JSON(),
    "deliver_until": UTCDateTime(),
    "deliverer": String(),
}


def _ours(*where: ColumnElement[bool]) -> ColumnElement[bool]:
    """``RUNS.c.id IN`` the runs matching ``where`` that ``b_owner`` runs, row-locked in id
    order before any is written (a plain UPDATE locks in the order it happens to scan)."""
    held = (
        select(RUNS.c.id)
        .where(
            *where,
            RUNS.c.lease_owner == bindparam("b_owner"),
            RUNS.c.status == RunStatus.RUNNING.value,
        )
        .order_by(RUNS.c.id)
        .with_for_update()
    )
    return RUNS.c.id.in_(held.scalar_subquery())


@cache
def record_runs(dialect: str) -> Any:
    """Each run of ``OUTCOME`` (parameter ``o``) that ``b_owner`` still runs ends, or goes
    back to pending for a retry, with what the outcome says; an output or result it does not
    give keeps the one the run had. Returns the id of each run written."""
    rows = rows_table(OUTCOME, "o", dialect)
    ours = _ours(among(RUNS.c.id, "o", dialect, OUTCOME))
    return (
        update(RUNS)
        .where(RUNS.c.id == rows.c["id"], ours)
        .values(
            status=rows.c["status"],
            reason=rows.c["reason"],
            finished_at=rows.c["finished_at"],
            available_at=func.coalesce(rows.c["available_at"], RUNS.c.available_at),
            output=func.coalesce(rows.c["output"], RUNS.c.output),
            output_at=func.coalesce(rows.c["output_at"], RUNS.c.output_at),
            error=rows.c["error"],
            result=func.coalesce(rows.c["result"], RUNS.c.result),
            lease_owner=None,
            lease_expires_at=None,
            **delivering(rows.c["deliver_until"], rows.c["deliverer"]),
        )
        .returning(RUNS.c.id)
    )


@cache
def cancel_context(dialect: str) -> Select[*tuple[Any, ...]]:
    """For the runs ``h`` whose attempt was cancelled: whether a cancel was asked for, and
    whether their schedule was deleted (``transitions.attempt_ended`` names the reason from
    both)."""
    deleted = Schedule.deleted_at.is_not(None)
    return (
        select(Run.id, Run.cancel_requested, deleted)
        .join(Schedule, Schedule.id == Run.schedule_id)
        .where(among(Run.id, "h", dialect))
    )


def update_run(run_id: uuid.UUID, values: dict[str, Any]) -> Update:
    """Write ``values`` (a transition's columns) onto run ``run_id``, locking its row."""
    return update(Run).where(Run.id == run_id).values(**values)


def locked_runs(*where: ColumnElement[bool], skip_locked: bool = False) -> ColumnElement[bool]:
    """``Run.id IN`` the runs matching ``where``, row-locked in id order: the order every
    write that locks several runs takes, so no two of them can deadlock over the same runs (a
    plain UPDATE locks in the order it happens to scan). ``skip_locked``: leave out the runs
    another transaction holds instead of waiting for them."""
    held = select(Run.id).where(*where).order_by(Run.id).with_for_update(skip_locked=skip_locked)
    return Run.id.in_(held.scalar_subquery())


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
    return locked_runs(Run.schedule_id == schedule_id, pending, skip_locked=True)


def end_deleted_pending(schedule_id: uuid.UUID, now: datetime) -> Update:
    """End the pending runs of schedule ``schedule_id``, being deleted, that no other
    transaction holds (``unheld_pending``: locked in id order, the held ones skipped):
    ``cancelled`` with reason ``schedule_deleted``."""
    return (
        update(Run)
        .where(unheld_pending(schedule_id))
        .values(**cancelled(now, RunReason.SCHEDULE_DELETED))
    )


def ask_to_stop(run_ids: Sequence[uuid.UUID]) -> Update:
    """Ask these runs to stop (overlap ``cancel_other``), those no other transaction holds;
    a run skipped is asked at the next look of the run waiting for it."""
    unheld = locked_runs(Run.id.in_(run_ids), skip_locked=True)
    return update(Run).where(unheld).values(cancel_requested=True)


# -- a promotion ---------------------------------------------------------------------------------


def queue_under_way(schedule_id: uuid.UUID) -> Select[*tuple[Any, ...]]:
    """Whether a queued run of the schedule is running, or claimable, or waiting: a new queue
    then waits behind it instead of starting a second head."""
    return select(
        exists().where(
            Run.schedule_id == schedule_id,
            Run.origin.in_(QUEUED_ORIGINS),
            Run.status.in_(ACTIVE),
        )
    )


def queue_busy(schedule_id: uuid.UUID) -> Select[*tuple[Any, ...]]:
    """Whether a queued run of the schedule is under way (running, retrying, claimable): the
    next one then waits for it."""
    return select(
        exists().where(
            Run.schedule_id == schedule_id,
            Run.origin.in_(QUEUED_ORIGINS),
            Run.status.in_(ACTIVE),
            or_(Run.reason.is_(None), Run.reason != RunReason.QUEUED.value),
        )
    )


def queue_head(schedule_id: uuid.UUID) -> Select[*tuple[Any, ...]]:
    """The oldest queued run of the schedule still waiting its turn."""
    return (
        select(Run.id)
        .where(
            Run.schedule_id == schedule_id,
            Run.status == RunStatus.PENDING.value,
            Run.reason == RunReason.QUEUED.value,
        )
        .order_by(Run.due_at)
        .limit(1)
    )


def promote(run_id: uuid.UUID, now: Any) -> Update:
    """Run ``run_id``, a queued run whose turn came, becomes claimable (``promoted``); the
    caller holds its schedule's row."""
    return update(Run).where(Run.id == run_id).values(**promoted(now))
