"""Statements on tasks: the rows ``core.tasks`` reads and locks."""

from __future__ import annotations

import uuid

from sqlalchemy import Select, select

from agentcron.core.storage.models import Task


def visible_task(task_id: uuid.UUID, owner: str | None, *, lock: bool = False) -> Select[Task]:
    """Task ``task_id`` if ``owner`` may see it (None: any owner), row-locked when ``lock``."""
    query = select(Task).where(Task.id == task_id)
    if owner is not None:
        query = query.where(Task.owner == owner)
    return query.with_for_update() if lock else query
