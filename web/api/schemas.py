"""Response shapes of the HTTP API (request shapes live in ``core.specs``)."""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Any

from pydantic import BaseModel, Field

from agentcron.core.specs import ScheduleSettingsOut


class WarningOut(BaseModel):
    code: str = Field(description="dst_gap | dst_repeat | overlap_skips | rare_day")
    message: str
    field: str = Field(description="the input the warning is about, e.g. trigger.dst_gap")


class ScheduleOut(ScheduleSettingsOut):
    """A schedule: its settings (declared once, in ``core.specs.ScheduleCreate``) and what
    the service keeps about it."""

    id: uuid.UUID
    owner: str
    key: str | None = Field(
        description="the host's own key for this schedule (PUT /api/v1/schedules/by-key/{key}),"
        " unique per owner; null for a schedule created without one"
    )
    next_run: datetime | None
    description: str
    paused_at: datetime | None
    paused_note: str | None
    last_run_at: datetime | None
    last_status: str | None
    last_error: str | None
    last_run_id: uuid.UUID | None
    consecutive_failures: int
    scheduled_runs: int = Field(description="due times the timetable has taken (see max_runs)")
    warnings: list[WarningOut] = Field(
        description="what the last create or update found worth saying, not errors: a cron "
        "time in a DST gap or repeated hour in the next two years (and what the schedule's "
        "policy does then), a timeout longer than the time between due times under overlap "
        "skip, a day of the month that rarely occurs; [] when there is nothing to say"
    )
    created_at: datetime
    updated_at: datetime


class SchedulePage(BaseModel):
    items: list[ScheduleOut]
    next_cursor: str | None


class PreviewOut(BaseModel):
    description: str
    next: list[datetime]
    expect: str | None = Field(
        default=None,
        description="the expectations given, in words (what the dashboard says); null without",
    )


class ResumePlanOut(BaseModel):
    """A resume's dry run: the due times it would queue, and those it would skip."""

    catchup: str
    run: list[datetime] = Field(description="due times that would run, oldest first")
    skipped: int | None = Field(
        description="due times that would get a paused row (null: more than it counts)"
    )
    skipped_first: datetime | None
    skipped_last: datetime | None


class BackfillOut(BaseModel):
    dry_run: bool
    overlap: str
    due_times: list[datetime] = Field(description="due times queued (or, dry run, that would be)")
    kept: int = Field(
        description="due times in the range left alone: they ran, are running, "
        "or were skipped on purpose"
    )


class ErrorDetail(BaseModel):
    type: str
    message: str
    field: str | None = None


class ErrorOut(BaseModel):
    error: ErrorDetail


class DeliveryOut(BaseModel):
    index: int
    channel: str
    target: str
    status: str
    attempts: int
    error: str | None


class RunOut(BaseModel):
    id: uuid.UUID
    schedule_id: uuid.UUID
    trigger: str
    due_at: datetime | None
    replay_of: uuid.UUID | None
    origin: str = Field(
        description="what started the run: schedule, catchup (the missed due time catch-up "
        "latest ran), manual or replay"
    )
    started_by: str | None = Field(
        description="the API key owner who asked for a manual run or a replay; null otherwise"
    )
    status: str
    reason: str | None
    covers: int | None = Field(
        description="due times this row stands for: 1, or for a skipped row summarising a gap "
        "the count (null: more than 30); see covers_until"
    )
    covers_until: datetime | None = Field(
        description="the last due time a skipped gap row stands for; null on other runs"
    )
    dst_rule: str | None = Field(
        description="the daylight saving time rule that decided this due time: gap_shift (a "
        "local time in a spring gap, moved to the end of the gap), repeat_first / repeat_last "
        "(that pass of a repeated autumn hour, the other did not run), repeat_both (both "
        "passes ran); null for an ordinary due time and for runs that are not cron due times",
    )
    attempt: int
    task_id: uuid.UUID | None
    created_at: datetime
    claimed_at: datetime | None = Field(
        description="when an engine first took the run (the claim of its due time, or the "
        "first take of a queued run)"
    )
    started_at: datetime | None
    output_at: datetime | None = Field(
        description="when its last attempt's agent returned its output, before the record"
    )
    finished_at: datetime | None
    delivered_at: datetime | None = Field(
        description="when the last of its deliveries that reached its channel was made"
    )
    error: str | None
    output: str | None
    result: dict[str, Any] | None = Field(
        description="the JSON object a host's handler (or a python target) returned, as given: "
        "what it needs to find the work the run started, a session id say; null when it "
        "returned none"
    )
    deliveries: list[DeliveryOut]


class RunPage(BaseModel):
    items: list[RunOut]
    next_cursor: str | None


class TaskLockOut(BaseModel):
    state: str  # "idle" | "running"
    run_id: uuid.UUID | None


class TaskOut(BaseModel):
    id: uuid.UUID
    schedule_id: uuid.UUID | None
    workdir: str
    lock: TaskLockOut
    conversation: list[dict[str, Any]]
    created_at: datetime
    updated_at: datetime


class SecretOut(BaseModel):
    """A stored secret as it is shown: its name and times, never its value."""

    name: str
    created_at: datetime
    updated_at: datetime


class SecretList(BaseModel):
    items: list[SecretOut] = Field(description="the caller's owner's secrets, by name")
