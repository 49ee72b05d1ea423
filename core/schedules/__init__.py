"""The schedule half of the service layer: create, read, list, update, pause, resume, delete.

Every write validates first and computes ``next_run`` before anything reaches the database, so
bad input never leaves a row behind. ``next_run`` is always recomputed from *now* when the
timetable or the enabled state changes, which is why a due time missed while paused is never
run late.

- ``views``: ids, the one owner-visible loader, the public shape of a schedule;
- ``plans``: pure previews and resume/backfill plans;
- ``service``: ``ScheduleService`` (CRUD), with the timetable verbs of ``timetable``.
"""

from __future__ import annotations

from agentcron.core.schedules.plans import (
    MAX_BACKFILL,
    REDOABLE,
    RESUME_ALL_CAP,
    BackfillPlan,
    Preview,
    ResumePlan,
    check_preview_after,
    preview,
    resume_plan,
)
from agentcron.core.schedules.service import WARNING_INPUTS, ScheduleService
from agentcron.core.schedules.views import load_schedule, parse_id, schedule_view

__all__ = [
    "MAX_BACKFILL",
    "REDOABLE",
    "RESUME_ALL_CAP",
    "WARNING_INPUTS",
    "BackfillPlan",
    "Preview",
    "ResumePlan",
    "ScheduleService",
    "check_preview_after",
    "load_schedule",
    "parse_id",
    "preview",
    "resume_plan",
    "schedule_view",
]
