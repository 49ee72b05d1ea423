"""Reading schedules as users see them: ids, the owner-visible loader, the public shape."""

from __future__ import annotations

import uuid
from typing import Any

from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncSession

from agentcron.core import triggers
from agentcron.core.errors import NotFound
from agentcron.core.notify import masked_channels
from agentcron.core.specs import SETTINGS
from agentcron.core.storage.models import Schedule


def parse_id(value: str | uuid.UUID, kind: str = "schedule") -> uuid.UUID:
    """An id from a path or a caller; anything that is not a UUID is simply not found."""
    if isinstance(value, uuid.UUID):
        return value
    try:
        return uuid.UUID(value)
    except (ValueError, AttributeError, TypeError):
        raise NotFound(kind, str(value)) from None


def schedule_view(schedule: Schedule) -> dict[str, Any]:
    """The public shape of a schedule (docs/api.md): secrets masked, description in words."""
    trigger = triggers.trigger_from_dict(schedule.trigger)
    return {
        **{name: getattr(schedule, name) for name in SETTINGS},
        "id": schedule.id,
        "owner": schedule.owner,
        "key": schedule.key,
        "notify": masked_channels(schedule.notify),
        "next_run": schedule.next_run,
        "description": triggers.describe(trigger),
        "paused_at": schedule.paused_at,
        "paused_note": schedule.paused_note,
        "last_run_at": schedule.last_run_at,
        "last_status": schedule.last_status,
        "last_error": schedule.last_error,
        "last_run_id": schedule.last_run_id,
        "consecutive_failures": schedule.consecutive_failures,
        "scheduled_runs": schedule.scheduled_runs or 0,
        "warnings": schedule.warnings or [],
        "created_at": schedule.created_at,
        "updated_at": schedule.updated_at,
    }


async def load_schedule(
    session: AsyncSession, schedule_id: str | uuid.UUID, owner: str | None, *, lock: bool = False
) -> Schedule:
    """The undeleted schedule visible to ``owner`` (None: any owner), optionally row-locked;
    ``NotFound`` otherwise (another owner's schedule is not found, never forbidden)."""
    id = parse_id(schedule_id)
    query = select(Schedule).where(Schedule.id == id, Schedule.deleted_at.is_(None))
    if owner is not None:
        query = query.where(Schedule.owner == owner)
    if lock:
        query = query.with_for_update()
    schedule = (await session.execute(query)).scalar_one_or_none()
    if schedule is None:
        raise NotFound("schedule", str(schedule_id))
    return schedule
