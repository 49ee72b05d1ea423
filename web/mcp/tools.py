"""The MCP tools: one per REST operation an agent needs, each a thin call into the HTTP API.

A tool is the API operation it calls (method and path), the API's own models for what it
takes (the request body or the query, ``core.specs``) and answers (``web.api.schemas``), and a
description written for a model. The input schema is those models' JSON schema with the path's
id in front: no field is declared here that the API declares (tests/integration/test_mcp_tools.py
holds each tool to the operation in the OpenAPI document). Arguments are not validated here but
by the API, so a tool refuses exactly what the API refuses, in the API's words; only the id
that goes into the URL is checked first, since it decides which operation is called.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from mcp_types import Tool, ToolAnnotations
from pydantic import BaseModel, ConfigDict, Field, create_model

from agentcron.core.specs import (
    OccurrenceRequest,
    PageRequest,
    PauseRequest,
    PreviewRequest,
    ResumeRequest,
    RunFilter,
    ScheduleCreate,
    ScheduleUpdate,
)
from agentcron.web.api.schemas import PreviewOut, RunOut, RunPage, ScheduleOut, SchedulePage

# Letters, digits and hyphens: every id the API hands out (a UUID) fits, and an id that fits
# cannot reach another operation through the URL (no "/", "?" or "#"); one that names nothing
# is the API's to answer (NotFound).
_ID = r"^[A-Za-z0-9-]{1,64}$"


class _Ids(BaseModel):
    # As strict as the API's bodies: an id is a string, and nothing else is taken with it.
    model_config = ConfigDict(extra="forbid", strict=True)


class ScheduleId(_Ids):
    """The schedule a tool acts on."""

    schedule_id: str = Field(
        pattern=_ID,
        description="the schedule's id (a UUID), as create_schedule and list_schedules return it",
    )


class RunId(_Ids):
    """The run a tool reads."""

    run_id: str = Field(
        pattern=_ID,
        description="the run's id (a UUID), as run_now and list_runs return it",
    )


def _query_value(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value)


@dataclass(frozen=True)
class ApiTool:
    """An MCP tool that is one request to the REST API (docs/api.md)."""

    name: str
    title: str
    description: str
    method: str
    path: str  # the API path; its ``{name}`` parts are filled from ``ids``
    ids: type[_Ids] | None = None  # the ids the path names
    body: type[BaseModel] | None = None  # the API's request body model
    query: type[BaseModel] | None = None  # the API's query model
    answer: type[BaseModel] | None = None  # the API's 2xx answer model: the output schema
    read_only: bool = False
    destructive: bool = False
    idempotent: bool = False

    def arguments(self) -> type[BaseModel]:
        """The model of the tool's arguments: the ids first, then the body's or the query's
        fields, inherited, so each field keeps the one declaration the API validates with."""
        parts = tuple(model for model in (self.body, self.query, self.ids) if model is not None)
        # Pydantic lays out inherited fields from the last base to the first: the ids lead.
        return create_model(self.name, __base__=parts or (_Ids,))

    def definition(self) -> Tool:
        """The tool as ``tools/list`` shows it."""
        return Tool(
            name=self.name,
            title=self.title,
            description=self.description,
            input_schema=self.arguments().model_json_schema(),
            output_schema=self.answer.model_json_schema(mode="serialization")
            if self.answer is not None
            else None,
            annotations=ToolAnnotations(
                title=self.title,
                read_only_hint=self.read_only,
                destructive_hint=self.destructive,
                idempotent_hint=self.idempotent,
            ),
        )

    def split(self, arguments: dict[str, Any]) -> tuple[str, dict[str, str], dict[str, Any]]:
        """The request path with the ids filled in, the ids, and the arguments left for the
        body or the query. Raises pydantic's ``ValidationError`` for a missing or malformed id,
        or, on a tool that takes nothing else, for any other argument."""
        alone = self.body is None and self.query is None
        ids: dict[str, str] = {}
        if self.ids is not None:
            named = set(self.ids.model_fields)
            given = {key: value for key, value in arguments.items() if alone or key in named}
            ids = self.ids.model_validate(given).model_dump()
        elif alone:
            _Ids.model_validate(arguments)
        rest = {key: value for key, value in arguments.items() if key not in ids}
        return self.path.format(**ids), ids, rest

    def query_params(self, rest: dict[str, Any]) -> dict[str, str | list[str]]:
        """``rest`` as a query string carries it, for the API to accept or refuse as it would
        from any client: a list repeats its name (``?status=failed&status=timed_out``, the
        API's form of "any of"), text goes as it is, anything else as JSON (``false``, ``20``);
        a null is an absent parameter."""
        return {
            key: [_query_value(item) for item in value]
            if isinstance(value, list)
            else _query_value(value)
            for key, value in rest.items()
            if value is not None
        }


_TIMES = (
    "Times in answers are ISO 8601: next_run, due_at, started_at and finished_at in UTC "
    "(Z); a preview's due times in the trigger's own zone offset."
)
_PAGE = (
    "One page at a time, newest first: limit is 1-500 items (default 50); when next_cursor "
    "is not null, call again with cursor set to it for the next page."
)
_TRIGGER = """\
trigger is exactly one of:
- {"cron": "MIN HOUR DAY MONTH WEEKDAY", "timezone": "Area/City"}: five fields separated by \
spaces: minute 0-59, hour 0-23, day of the month 1-31, month 1-12 (or jan-dec), weekday 0-6 \
(0 and 7 are Sunday, 1-5 Monday to Friday, or sun-sat). In each field * is any value, 1-5 a \
range, 1,15 a list, */15 every 15th. The times are wall-clock times in timezone, an IANA zone \
(default UTC), daylight saving time included: "0 9 * * 1-5" with "Europe/Berlin" is 09:00 \
Berlin time every weekday. @hourly, @daily, @weekly, @monthly and @yearly work too. If both \
the day of the month and the weekday are restricted, a day matching either runs.
- {"every_seconds": N}: every N seconds (1-31536000), the first N seconds after creation, \
or on the grid of "start_at" (a datetime with an offset) when given.
- {"at": "2026-12-24T18:00:00+01:00"}: once at that moment; it needs a UTC offset and must \
lie in the future."""

_RUNNER = """\
runner says what runs the prompt: {"type": "command", "argv": ["program", "arg", ...]} runs \
a program on the service's host with the prompt on its standard input and its standard \
output as the run's output; {"type": "openai", "base_url": ..., "model": ..., \
"api_key_secret": NAME} asks a chat model; {"type": "command", "agent": NAME, "params": \
{...}} runs an agent the operator declared. Which ones a key may use is the operator's choice: \
a refusal says what is allowed."""

TOOLS: tuple[ApiTool, ...] = (
    ApiTool(
        name="list_schedules",
        title="List schedules",
        description="List your schedules: each with its id, name, prompt, trigger, the trigger "
        "in words (description), next_run, enabled, and the status and error of its latest "
        f"run (last_status, last_error). {_PAGE} {_TIMES}\n"
        'Example: {"limit": 20}',
        method="GET",
        path="/api/v1/schedules",
        query=PageRequest,
        answer=SchedulePage,
        read_only=True,
    ),
    ApiTool(
        name="get_schedule",
        title="Get a schedule",
        description="One schedule by id, every field: next_run (the next due time; null when "
        "paused or finished), description (the trigger in words), last_status and last_error "
        f"of its latest run, warnings about its timetable. {_TIMES}\n"
        'Example: {"schedule_id": "3f0c6a2e-5d3b-4e7f-9a41-0c2b7d8e9f10"}',
        method="GET",
        path="/api/v1/schedules/{schedule_id}",
        ids=ScheduleId,
        answer=ScheduleOut,
        read_only=True,
    ),
    ApiTool(
        name="create_schedule",
        title="Create a schedule",
        description="Create a schedule: each time its trigger is due, prompt is handed to "
        "runner and the outcome is kept as a run (see list_runs). Answers the stored schedule "
        "with its id, next_run and description (the trigger in words: check it says what you "
        "meant; preview_trigger shows the due times first). Unknown fields are refused, "
        f"never ignored.\n{_TRIGGER}\n{_RUNNER}\n{_TIMES}\n"
        'Example: {"name": "morning digest", "prompt": "Summarise the news in five bullets.", '
        '"trigger": {"cron": "0 8 * * 1-5", "timezone": "Asia/Shanghai"}, '
        '"runner": {"type": "command", "argv": ["sh", "-c", "echo agent got: $(cat)"]}}',
        method="POST",
        path="/api/v1/schedules",
        body=ScheduleCreate,
        answer=ScheduleOut,
    ),
    ApiTool(
        name="update_schedule",
        title="Change a schedule",
        description="Change a schedule: each field given replaces the stored one whole (a "
        "new trigger, runner or notify list replaces the old, not merged into it); fields not "
        "given stay. next_run is computed again from now. Answers the schedule as stored. "
        f"Triggers are as in create_schedule. {_TIMES}\n"
        'Example: {"schedule_id": "3f0c6a2e-5d3b-4e7f-9a41-0c2b7d8e9f10", '
        '"trigger": {"cron": "30 7 * * *", "timezone": "Europe/Paris"}}',
        method="PATCH",
        path="/api/v1/schedules/{schedule_id}",
        ids=ScheduleId,
        body=ScheduleUpdate,
        answer=ScheduleOut,
        idempotent=True,
    ),
    ApiTool(
        name="pause_schedule",
        title="Pause a schedule",
        description="Pause a schedule at once: no new run starts (next_run becomes null) "
        "until resume_schedule; a run already going goes on. note says why and is shown on the "
        "schedule. Answers the schedule.\n"
        'Example: {"schedule_id": "3f0c6a2e-5d3b-4e7f-9a41-0c2b7d8e9f10", '
        '"note": "on holiday until Monday"}',
        method="POST",
        path="/api/v1/schedules/{schedule_id}/pause",
        ids=ScheduleId,
        body=PauseRequest,
        answer=ScheduleOut,
        idempotent=True,
    ),
    ApiTool(
        name="resume_schedule",
        title="Resume a schedule",
        description="Resume a paused schedule from its next due time after now. catchup says "
        "what happens to the due times the pause covered: skip (default) runs none of them, "
        "latest runs the latest one now, all runs each (at most 100), oldest first. With "
        "dry_run true nothing changes and the answer is the plan (which due times would run, "
        "how many would be skipped); otherwise it is the schedule.\n"
        'Example: {"schedule_id": "3f0c6a2e-5d3b-4e7f-9a41-0c2b7d8e9f10", "catchup": "latest"}',
        method="POST",
        path="/api/v1/schedules/{schedule_id}/resume",
        ids=ScheduleId,
        body=ResumeRequest,
    ),
    ApiTool(
        name="delete_schedule",
        title="Delete a schedule",
        description="Delete a schedule for good; its pending runs are cancelled, its finished "
        "runs stay readable with get_run. To stop it for a while, pause_schedule instead.\n"
        'Example: {"schedule_id": "3f0c6a2e-5d3b-4e7f-9a41-0c2b7d8e9f10"}',
        method="DELETE",
        path="/api/v1/schedules/{schedule_id}",
        ids=ScheduleId,
        destructive=True,
        idempotent=True,
    ),
    ApiTool(
        name="preview_trigger",
        title="Preview a trigger",
        description="Say a trigger in words and list its next due times, without creating "
        "anything: check a cron expression and its zone before create_schedule. count is how "
        "many due times (1-1000, default 10); after (a datetime with an offset, default now) is "
        "where they start. The due times carry the trigger zone's own offset (+08:00 for "
        "Asia/Shanghai), daylight saving time included. With expect (as create_schedule "
        "takes it), the expectations are checked and said in words.\n"
        f"{_TRIGGER}\n"
        'Example: {"trigger": {"cron": "0 9 * * 1-5", "timezone": "Asia/Shanghai"}, '
        '"count": 3}',
        method="POST",
        path="/api/v1/schedules/preview",
        body=PreviewRequest,
        answer=PreviewOut,
        read_only=True,
    ),
    ApiTool(
        name="run_now",
        title="Run a schedule now",
        description="Run a schedule once now, besides its timetable (which does not move), "
        "even while it is paused. Answers at once with the queued run (status pending, trigger "
        "manual); call get_run with its id until status is succeeded, failed, timed_out or "
        "cancelled, and read its output there.\n"
        'Example: {"schedule_id": "3f0c6a2e-5d3b-4e7f-9a41-0c2b7d8e9f10"}',
        method="POST",
        path="/api/v1/schedules/{schedule_id}/run",
        ids=ScheduleId,
        answer=RunOut,
    ),
    ApiTool(
        name="list_runs",
        title="List a schedule's runs",
        description="A schedule's run history: every run of every trigger (its timetable, "
        "run_now, replays), each with status (pending, running, succeeded, failed, timed_out, "
        "skipped, cancelled), due_at, started_at, finished_at, output, result and error. "
        "status, trigger and origin keep only runs with one of the values listed; skipped: "
        f"false leaves out due times that did not run. {_PAGE} {_TIMES}\n"
        'Example: {"schedule_id": "3f0c6a2e-5d3b-4e7f-9a41-0c2b7d8e9f10", "limit": 5, '
        '"status": ["failed", "timed_out"]}',
        method="GET",
        path="/api/v1/schedules/{schedule_id}/runs",
        ids=ScheduleId,
        query=RunFilter,
        answer=RunPage,
        read_only=True,
    ),
    ApiTool(
        name="get_run",
        title="Get a run",
        description="One run: its status, attempt, times, its whole output (what the agent "
        "wrote), its result (the JSON object a host's handler returned, or null) and error, "
        "and its deliveries (each notify channel's status). A run is "
        "finished when status is succeeded, failed, timed_out, skipped or cancelled. "
        f"{_TIMES}\n"
        'Example: {"run_id": "5b1e2c3d-4f5a-6b7c-8d9e-0f1a2b3c4d5e"}',
        method="GET",
        path="/api/v1/runs/{run_id}",
        ids=RunId,
        answer=RunOut,
        read_only=True,
    ),
    ApiTool(
        name="skip_occurrence",
        title="Skip one due time",
        description="Skip one upcoming due time of a schedule, and only that one: it gets a "
        "skipped run instead of running; the ones after it run as usual. due_at must be one of "
        "the schedule's future due times exactly (its next_run, or one preview_trigger lists), "
        "with an offset. Answers the skipped run.\n"
        'Example: {"schedule_id": "3f0c6a2e-5d3b-4e7f-9a41-0c2b7d8e9f10", '
        '"due_at": "2026-12-24T09:00:00+08:00"}',
        method="POST",
        path="/api/v1/schedules/{schedule_id}/skip",
        ids=ScheduleId,
        body=OccurrenceRequest,
        answer=RunOut,
        idempotent=True,
    ),
)

BY_NAME: dict[str, ApiTool] = {tool.name: tool for tool in TOOLS}
