"""What a caller may ask for: the validated shapes of schedule input.

These pydantic models are the request bodies of the HTTP API and the arguments of the Python
service layer alike, so both reject the same input with the same field paths. Anything that
needs more than a type check (the trigger, the runner, notify channels) is validated by its own
module and raises ``InvalidSchedule`` naming the field.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any, Literal, Union, get_args

from pydantic import BaseModel, ConfigDict, Field, create_model, field_validator
from pydantic.fields import FieldInfo

from agentcron.core.errors import InvalidSchedule
from agentcron.core.expectations import EXPECT_DOC
from agentcron.core.pagination import MAX_LIMIT

Mode = Literal["isolated", "persistent"]
Overlap = Literal["allow", "skip", "buffer_one", "cancel_other"]
Catchup = Literal["skip", "latest"]

MAX_PROMPT_CHARS = 100_000
MAX_NAME_CHARS = 200
MAX_NOTE_CHARS = 2_000
MAX_NOTIFY_CHANNELS = 20
MAX_TIMEOUT_SECONDS = 7 * 86_400
MAX_WINDOW_SECONDS = 31_536_000
MAX_RETENTION_DAYS = 36_500
RETENTION_DOC = (
    "Days a finished run is kept before the pruner may delete it (the newest "
    "AGENTCRON_RETENTION_KEEP_LAST runs and the latest run are always kept); null: the "
    "service's AGENTCRON_RETENTION_DAYS"
)
# Fields an update may set to null (meaning "the service default"); the rest are not nullable.
NULLABLE = frozenset(
    {"retention_days", "pause_after_failures", "max_runs", "jitter_seconds", "expect"}
)
MAX_RUNS = 1_000_000_000
MAX_RUNS_DOC = (
    "At most this many due times get a run (a skipped occurrence counts); then the timetable "
    "ends (next_run null). scheduled_runs counts them; null: no bound"
)
MAX_JITTER_SECONDS = 3600
JITTER_DOC = (
    "Start each run up to this many seconds after its due time, at an offset fixed by the "
    "schedule and the due time (every replica agrees), so schedules due at one instant spread "
    "out; null: start at the due time"
)
BREAKER_DOC = (
    "The circuit breaker: pause the schedule after this many failed runs in a row, with a note "
    "saying why, and deliver the run that tripped it to every notify channel; null: never"
)

TRIGGER_DOC = (
    'Exactly one of {"cron": "<5 fields or @macro>", "timezone": "<IANA zone>", '
    '"dst_gap": "shift|skip"?, "dst_repeat": "first|last|both"?}, '
    '{"every_seconds": 1..31536000, "start_at": "<datetime>"?} or {"at": "<datetime>"}. '
    "dst_gap / dst_repeat: what a cron time in a spring gap / a repeated autumn hour does "
    "(default: shift and first for fixed-time jobs, skip and both for wildcard jobs)."
)


def reject_nul(value: Any, field: str) -> None:
    """Refuse NUL characters anywhere in ``value``: PostgreSQL text and jsonb cannot hold them."""
    if isinstance(value, str):
        if "\x00" in value:
            raise InvalidSchedule("NUL characters are not allowed", field=field)
    elif isinstance(value, dict):
        for key, item in value.items():
            reject_nul(key, field)
            reject_nul(item, f"{field}.{key}")
    elif isinstance(value, list):
        for index, item in enumerate(value):
            reject_nul(item, f"{field}.{index}")


MAX_CONFIG_BYTES = 65_536


def reject_oversized(value: Any, field: str, limit: int = MAX_CONFIG_BYTES) -> None:
    """Refuse a trigger, runner or notify configuration larger than ``limit`` bytes as JSON:
    it is stored on the schedule and copied into every run's payload, so a megabyte of
    ``argv`` or ``env`` would be a megabyte per run."""
    size = len(json.dumps(value, ensure_ascii=False).encode())
    if size > limit:
        raise InvalidSchedule(
            f"{field} is {size:,} bytes as JSON; at most {limit:,} are stored", field=field
        )


def _no_nul(value: str | None) -> str | None:
    if value is not None and "\x00" in value:
        raise ValueError("NUL characters are not allowed")
    return value


def _non_blank(value: str | None) -> str | None:
    if value is not None and not value.strip():
        raise ValueError("must not be blank")
    return value


class _Input(BaseModel):
    # strict: "5" is not an int and "true" is not a bool; unknown fields are errors, not ignored.
    model_config = ConfigDict(extra="forbid", strict=True)


class _ScheduleChecks(_Input):
    # check_fields=False: the fields are declared once, in ScheduleCreate; the update model
    # made from it inherits these checks by name.
    _nul = field_validator("name", "prompt", check_fields=False)(_no_nul)
    _blank = field_validator("name", check_fields=False)(_non_blank)


class ScheduleCreate(_ScheduleChecks):
    """A new schedule: every field a caller sets, declared once (type, bounds, default,
    description). ``ScheduleUpdate`` and the settings part of the public shape
    (``ScheduleSettingsOut``) are made from these fields, and the row is built from them.
    Defaults follow docs/api.md; ``overlap`` defaults by ``mode``."""

    name: str = Field(min_length=1, max_length=MAX_NAME_CHARS)
    prompt: str = Field(min_length=1, max_length=MAX_PROMPT_CHARS)
    trigger: dict[str, Any] = Field(description=TRIGGER_DOC)
    enabled: bool = True
    mode: Mode = "isolated"
    overlap: Overlap | None = Field(
        default=None, description="allow (isolated default) | skip (persistent default) | ..."
    )
    catchup: Catchup = "skip"
    catchup_window_seconds: int = Field(default=3600, ge=0, le=MAX_WINDOW_SECONDS)
    misfire_grace_seconds: int = Field(default=60, ge=1, le=86_400)
    timeout_seconds: int = Field(default=3600, ge=1, le=MAX_TIMEOUT_SECONDS)
    max_attempts: int = Field(default=3, ge=1, le=100)
    runner: dict[str, Any]
    notify: list[dict[str, Any]] = Field(default_factory=list, max_length=MAX_NOTIFY_CHANNELS)
    retention_days: int | None = Field(
        default=None, ge=1, le=MAX_RETENTION_DAYS, description=RETENTION_DOC
    )
    pause_after_failures: int | None = Field(default=None, ge=1, le=1000, description=BREAKER_DOC)
    max_runs: int | None = Field(default=None, ge=1, le=MAX_RUNS, description=MAX_RUNS_DOC)
    jitter_seconds: int | None = Field(
        default=None, ge=1, le=MAX_JITTER_SECONDS, description=JITTER_DOC
    )
    # Checked by core.expectations, which names the field (expect.matches...).
    expect: dict[str, Any] | None = Field(default=None, description=EXPECT_DOC)


SETTINGS: tuple[str, ...] = tuple(ScheduleCreate.model_fields)  # a schedule's settable fields


class SchedulePatch(_ScheduleChecks):
    """What ``ScheduleUpdate`` adds to its fields: reading the caller's changes."""

    def changes(self) -> dict[str, Any]:
        """The fields the caller named. A null is refused for any not in ``NULLABLE``."""
        named = {name: getattr(self, name) for name in self.model_fields_set}
        for name, value in named.items():
            if value is None and name not in NULLABLE:
                raise InvalidSchedule(f"{name} may not be null", field=name)
        return named


def _optional(field: FieldInfo) -> tuple[Any, FieldInfo]:
    """The same field with the same bounds and description, absent by default (None)."""
    annotation: Any = field.annotation
    return annotation | None, FieldInfo.merge_field_infos(field, default=None, default_factory=None)


def _shown(name: str, field: FieldInfo) -> tuple[Any, FieldInfo]:
    """The field as the API shows it: its type and description, no bounds (a stored value
    is shown as it is, even one outside bounds tightened since), null only if nullable."""
    annotation: Any = field.annotation
    if name not in NULLABLE and type(None) in get_args(annotation):
        kept = tuple(arg for arg in get_args(annotation) if arg is not type(None))
        annotation = Union[kept]  # noqa: UP007 (a Union built at run time)
    return annotation, FieldInfo(annotation=annotation, description=field.description)


if TYPE_CHECKING:
    # For the type checker: the models below have exactly ScheduleCreate's fields.

    class ScheduleUpdate(SchedulePatch):
        pass

    class ScheduleSettingsOut(BaseModel):
        pass

else:
    ScheduleUpdate = create_model(
        "ScheduleUpdate",
        __base__=SchedulePatch,
        __doc__="A partial update: each field named replaces the stored one whole.",
        **{name: _optional(field) for name, field in ScheduleCreate.model_fields.items()},
    )
    ScheduleSettingsOut = create_model(
        "ScheduleSettingsOut",
        __doc__="A schedule's settings as the API shows them.",
        **{name: _shown(name, field) for name, field in ScheduleCreate.model_fields.items()},
    )


class PauseRequest(_Input):
    """Body of a pause: an optional note saying why, shown on the schedule."""

    note: str | None = Field(default=None, max_length=MAX_NOTE_CHARS)

    _nul = field_validator("note")(_no_nul)


class OccurrenceRequest(_Input):
    """Body of skip and unskip: one upcoming due time of the schedule."""

    due_at: str = Field(
        max_length=64,
        description="ISO 8601 datetime: a future due time of this schedule; without an "
        "offset, read in the schedule's zone (a cron trigger's, else UTC)",
    )


class ResumeRequest(_Input):
    """Body of a resume (optional): what to do with the due times the pause covered."""

    catchup: Literal["skip", "latest", "all"] = Field(
        default="skip",
        description="skip: none of them runs (each gets a paused row); latest: the latest one "
        "runs now; all: every one runs (at most 100), one at a time, oldest first",
    )
    dry_run: bool = Field(
        default=False, description="only say which due times would run; change nothing"
    )


class BackfillRequest(_Input):
    """Body of a backfill: run the past due times of ``[start, end)`` that have not run."""

    start: str = Field(max_length=64, description="ISO 8601 datetime with an offset")
    end: str = Field(max_length=64, description="ISO 8601 datetime with an offset, not after now")
    overlap: Literal["buffer_all", "allow"] = Field(
        default="buffer_all",
        description="buffer_all: one run at a time, oldest first; allow: all at once (bounded "
        "by the service's concurrency)",
    )
    dry_run: bool = Field(default=False, description="only list the due times; change nothing")


class PreviewRequest(_Input):
    """Body of a preview: the due times of ``trigger`` strictly after ``after`` (default now)."""

    trigger: dict[str, Any] = Field(description=TRIGGER_DOC)
    count: int = Field(default=10, ge=1, le=1000)
    after: str | None = Field(
        default=None, description="ISO 8601 datetime with an offset; default now"
    )
    expect: dict[str, Any] | None = Field(
        default=None, description="expectations to check and say in words (as a schedule's)"
    )


class PageRequest(BaseModel):
    """Query of a paginated list (``?limit=&cursor=``, docs/api.md#pagination).

    Not strict, unlike the bodies above: a query string carries ``limit`` as text. Unknown
    query parameters are ignored, as they always were.
    """

    limit: int = Field(default=50, ge=1, le=MAX_LIMIT, description="items per page")
    cursor: str | None = Field(
        default=None,
        max_length=500,
        description="the next_cursor of the previous page; none: the first page",
    )


# The values of core.states.RunStatus, spelled out: an enum would be a schema of its own in
# the OpenAPI document (tests/unit/test_specs.py keeps the two equal).
RunStatusName = Literal[
    "pending", "running", "succeeded", "failed", "timed_out", "cancelled", "skipped"
]
RunTrigger = Literal["schedule", "manual", "replay"]
RunOrigin = Literal["schedule", "catchup", "manual", "replay", "backfill"]


class RunFilter(PageRequest):
    """Query of a schedule's run history: a page, and which runs it lists. Each list is
    "any of" (``?status=failed&status=timed_out``); the filters combine with "and"."""

    status: list[RunStatusName] | None = Field(
        default=None, description="only runs in one of these statuses"
    )
    trigger: list[RunTrigger] | None = Field(
        default=None, description="only runs of these triggers: schedule, manual, replay"
    )
    origin: list[RunOrigin] | None = Field(
        default=None,
        description="only runs of these origins: schedule, catchup, manual, replay, backfill",
    )
    skipped: bool = Field(
        default=True,
        description="false leaves out the skipped rows (due times that did not run, each "
        "with its reason): the timeline without its gaps",
    )


class SecretPut(_Input):
    """Body of ``PUT /api/v1/secrets/{name}``: the value to store (write-only)."""

    value: str = Field(
        description="the secret's value: 1 character to 64 KiB as UTF-8, no NUL; stored "
        "encrypted and never returned"
    )
