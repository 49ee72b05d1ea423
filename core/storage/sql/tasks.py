"""Statements on tasks: the rows ``core.tasks`` reads and locks, and those the run ledger
(``core.ledger.tasks``) inserts, locks, hands to a run and frees. Tasks are locked after runs
and schedules (``core.storage.sql.runs``)."""

from __future__ import annotations

import uuid
from collections.abc import Collection
from functools import cache
from typing import Any

from sqlalchemy import (
    Delete,
    Select,
    Update,
    Uuid,
    bindparam,
    delete,
    exists,
    insert,
    select,
    true,
    update,
)

from agentcron.core.storage.models import TASKS, Run, Schedule, Task
from agentcron.core.storage.sql.rows import among, columns_of, rows_table


def visible_task(task_id: uuid.UUID, owner: str | None, *, lock: bool = False) -> Select[Task]:
    """Task ``task_id`` if ``owner`` may see it (None: any owner), row-locked when ``lock``."""
    query = select(Task).where(Task.id == task_id)
    if owner is not None:
        query = query.where(Task.owner == owner)
    return query.with_for_update() if lock else query


# -- the run ledger's -------------------------------------------------------------------------

NEW_TASK = columns_of(TASKS, "id", "schedule_id", "owner", "workdir")
# Every new task of a batch: empty, made at the same instant.
TASK_SHARED = columns_of(TASKS, "conversation", "created_at", "updated_at")


@cache
def insert_tasks(dialect: str) -> Any:
    """Insert the fresh tasks ``NEW_TASK`` (parameter ``t``, with ``TASK_SHARED``),
    unlocked."""
    rows = rows_table(NEW_TASK, "t", dialect, TASK_SHARED)
    names = [*NEW_TASK, *TASK_SHARED]
    return insert(TASKS).from_select(names, select(*(rows.c[name] for name in names)).where(true()))


@cache
def lock_tasks(dialect: str) -> Select[*tuple[Any, ...]]:
    """The tasks ``k`` with their run lock and conversation, row-locked in id order."""
    return (
        select(Task.id, Task.workdir, Task.conversation, Task.lock_run_id)
        .where(among(Task.id, "k", dialect))
        .order_by(Task.id)
        .with_for_update()
    )


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


def conversation(task_id: uuid.UUID) -> Select[*tuple[Any, ...]]:
    """The conversation of task ``task_id``, row-locked."""
    return select(Task.conversation).where(Task.id == task_id).with_for_update()


def update_task(task_id: uuid.UUID, values: dict[str, Any]) -> Update:
    """Write ``values`` onto task ``task_id``, locking its row."""
    return update(Task).where(Task.id == task_id).values(**values)


def task_workdirs(ids: Collection[uuid.UUID]) -> Select[uuid.UUID, str]:
    """(id, workdir) of these tasks."""
    return select(Task.id, Task.workdir).where(Task.id.in_(ids))


def delete_orphan_tasks(ids: Collection[uuid.UUID]) -> Delete:
    """Delete the tasks ``ids`` that no run and no schedule refers to any more and no run holds
    (a persistent schedule's task is shared by all its runs: it goes only then); unlocked, the
    row count says how many went."""
    return delete(Task).where(
        Task.id.in_(ids),
        Task.lock_run_id.is_(None),
        ~exists().where(Run.task_id == Task.id),
        ~exists().where(Schedule.id == Task.schedule_id, Schedule.task_id == Task.id),
    )
