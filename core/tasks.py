"""Tasks: where an agent's runs live (a working directory and, for chat runners, a
conversation). A persistent schedule binds one task; an isolated one gets a fresh task per run.
"""

from __future__ import annotations

import uuid
from typing import Any

from sqlalchemy import select, update
from sqlalchemy.ext.asyncio import AsyncSession

from agentcron.core.errors import Conflict, NotFound
from agentcron.core.schedules import parse_id
from agentcron.core.states import RunStatus
from agentcron.core.storage.database import Database
from agentcron.core.storage.models import Run, Schedule, Task


async def _visible_task(
    session: AsyncSession, task_id: str | uuid.UUID, owner: str | None, *, lock: bool = False
) -> Task:
    query = select(Task).where(Task.id == parse_id(task_id, "task"))
    if owner is not None:
        query = query.where(Task.owner == owner)
    if lock:
        query = query.with_for_update()
    task = (await session.execute(query)).scalar_one_or_none()
    if task is None:
        raise NotFound("task", str(task_id))
    return task


async def get_task(db: Database, task_id: str | uuid.UUID, owner: str | None) -> dict[str, Any]:
    """The task with its run-lock state: ``running`` and the run holding it, or ``idle``."""
    async with db.session(write=False) as session:
        task = await _visible_task(session, task_id, owner)
        holder = await session.get(Run, task.lock_run_id) if task.lock_run_id else None
    running = holder.id if holder is not None and holder.status == RunStatus.RUNNING else None
    return {
        "id": task.id,
        "schedule_id": task.schedule_id,
        "workdir": task.workdir,
        "lock": {"state": "idle" if running is None else "running", "run_id": running},
        "conversation": task.conversation,
        "created_at": task.created_at,
        "updated_at": task.updated_at,
    }


async def delete_task(db: Database, task_id: str | uuid.UUID, owner: str | None) -> None:
    """Delete a task (its conversation; files in the working directory are kept).

    A persistent schedule bound to it gets a new task at its next run. Raises ``Conflict``
    while a run is executing on the task.
    """
    async with db.session() as session:
        task = await _visible_task(session, task_id, owner)
        # The schedules bound to it before the task itself, in the order an admission takes
        # them (its run, its schedule, then its task): the other order could deadlock with it.
        await session.execute(
            select(Schedule.id)
            .where(Schedule.task_id == task.id)
            .order_by(Schedule.id)
            .with_for_update()
        )
        task = await _visible_task(session, task.id, owner, lock=True)
        if task.lock_run_id is not None:
            holder = await session.get(Run, task.lock_run_id)
            if holder is not None and holder.status == RunStatus.RUNNING:
                raise Conflict(f"run {holder.id} is executing on task {task.id}; cancel it first")
        await session.execute(
            update(Schedule).where(Schedule.task_id == task.id).values(task_id=None)
        )
        await session.delete(task)
