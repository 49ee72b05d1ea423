"""The run ledger's statements: a claim's writes, an admission, a record, a release.

Each batched statement reads its rows from one derived table (``core.storage.sql.rows``) and
writes what ``core.transitions`` says, so a run alone and a run in a batch of 500 go through the
same statement, on SQLite and PostgreSQL alike. A builder takes the dialect (the derived table
is the one thing that differs) and is cached, so a statement is built once per dialect.

Lock order, as every write that locks several rows takes it: runs in id order, then their
schedules in id order, then tasks. Claims aside, which skip what another holds.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from functools import cache
from typing import Any

from sqlalchemy import (
    JSON,
    Boolean,
    ColumnElement,
    Integer,
    Select,
    String,
    Text,
    Update,
    Uuid,
    and_,
    bindparam,
    exists,
    func,
    insert,
    or_,
    select,
    true,
    update,
)
from sqlalchemy.dialects import postgresql, sqlite

from agentcron.core.states import ACTIVE, QUEUED_ORIGINS, RunReason, RunStatus
from agentcron.core.storage.models import Run, Schedule, Task
from agentcron.core.storage.queries import RUNS, SCHEDULES, TASKS
from agentcron.core.storage.sql.rows import Columns, among, rows_table, split
from agentcron.core.storage.types import UTCDateTime
from agentcron.core.transitions import admitted, delivering, followed, leased, promoted, streak


def _columns(table: Any, *names: str) -> Columns:
    return {name: table.c[name].type for name in names}


def _insert(dialect: str) -> Any:
    return postgresql.insert if dialect == "postgresql" else sqlite.insert


# -- a claim's writes ---------------------------------------------------------------------------

# Every column a claim gives a run it inserts: the runs of due times, and the skipped rows that
# account for due times that do not run (core.timeline).
CLAIMED_RUN = _columns(
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
    "cancel_requested",
    "dst_rule",
    "covers",
    "covers_until",
)
# The columns every run of due times of one claim shares (its instant, its lease, and what
# only a skipped row has), and those every skipped row shares: each sent once, not per row.
DUE_SHARED = frozenset(
    {"trigger", "created_at", "cancel_requested", "lease_owner", "lease_expires_at"}
    | {"reason", "finished_at", "covers", "covers_until"}
)
SKIPPED_SHARED = frozenset(
    {"trigger", "created_at", "cancel_requested", "lease_owner", "lease_expires_at"}
    | {"status", "attempt", "started_at", "task_id", "origin", "dst_rule", "finished_at"}
)
NEW_TASK = _columns(TASKS, "id", "schedule_id", "owner", "workdir")
# Every new task of a batch: empty, made at the same instant.
TASK_SHARED = _columns(TASKS, "conversation", "created_at", "updated_at")
ADVANCE = _columns(SCHEDULES, "id", "next_run", "scheduled_runs")


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


@cache
def insert_tasks(dialect: str) -> Any:
    """Insert the fresh tasks ``NEW_TASK`` (parameter ``t``, with ``TASK_SHARED``),
    unlocked."""
    rows = rows_table(NEW_TASK, "t", dialect, TASK_SHARED)
    names = [*NEW_TASK, *TASK_SHARED]
    return insert(TASKS).from_select(names, select(*(rows.c[name] for name in names)).where(true()))


@cache
def advance_schedules(dialect: str) -> Any:
    """Move each schedule of ``ADVANCE`` (parameter ``a``) to its next due time."""
    rows = rows_table(ADVANCE, "a", dialect)
    return (
        update(SCHEDULES)
        .where(SCHEDULES.c.id == rows.c["id"], among(SCHEDULES.c.id, "a", dialect, ADVANCE))
        .values(next_run=rows.c["next_run"], scheduled_runs=rows.c["scheduled_runs"])
    )


def take_runs(ids: Sequence[uuid.UUID], owner: str, until: Any) -> Update:
    """Lease the claimable runs ``ids`` to ``owner`` (``claimable_runs`` locked them);
    returns them."""
    return update(Run).where(Run.id.in_(ids)).values(**leased(owner, until)).returning(Run)


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
def lock_tasks(dialect: str) -> Select[*tuple[Any, ...]]:
    """The tasks ``k`` with their run lock and conversation, row-locked in id order."""
    return (
        select(Task.id, Task.workdir, Task.conversation, Task.lock_run_id)
        .where(among(Task.id, "k", dialect))
        .order_by(Task.id)
        .with_for_update()
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
            error=rows.c["error"],
            result=func.coalesce(rows.c["result"], RUNS.c.result),
            lease_owner=None,
            lease_expires_at=None,
            **delivering(rows.c["deliver_until"], rows.c["deliverer"]),
        )
        .returning(RUNS.c.id)
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
    return update(Run).where(Run.id == run_id).values(**values)


def update_schedule(schedule_id: uuid.UUID, values: dict[str, Any]) -> Update:
    return update(Schedule).where(Schedule.id == schedule_id).values(**values)


# Executemany: task ``b_id``'s run lock goes to run ``b_run``.
TAKE_TASK_LOCK = (
    update(TASKS)
    .where(TASKS.c.id == bindparam("b_id"))
    .values(lock_run_id=bindparam("b_run", type_=Uuid()), updated_at=bindparam("b_now"))
)
# Executemany: task ``b_id`` gives up its run lock if run ``b_run`` holds it.
FREE_TASK_LOCK = (
    update(TASKS)
    .where(TASKS.c.id == bindparam("b_id"), TASKS.c.lock_run_id == bindparam("b_run", type_=Uuid()))
    .values(lock_run_id=None, updated_at=bindparam("b_now"))
)
# Executemany: persistent schedule ``b_id`` keeps task ``b_task`` for its runs.
BIND_TASK = (
    update(SCHEDULES)
    .where(SCHEDULES.c.id == bindparam("b_id"))
    .values(task_id=bindparam("b_task", type_=Uuid()))
)


def conversation(task_id: uuid.UUID) -> Select[*tuple[Any, ...]]:
    return select(Task.conversation).where(Task.id == task_id).with_for_update()


def update_task(task_id: uuid.UUID, values: dict[str, Any]) -> Update:
    return update(Task).where(Task.id == task_id).values(**values)


# -- a release and a promotion -----------------------------------------------------------------


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
    return update(Run).where(Run.id == run_id).values(**promoted(now))
