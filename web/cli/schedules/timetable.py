"""``agentcron schedules pause|resume|skip|backfill|run``: when a schedule's runs happen.

It owns the commands that change or add to the timetable without editing the schedule: pause
and resume (with the catch-up of the due times a pause covered, or its dry run), skipping one
upcoming due time or putting it back, a backfill of past due times, and a run now.
"""

from __future__ import annotations

import json
from enum import StrEnum
from typing import Annotated

import typer
from rich.text import Text

from agentcron.web.cli import render
from agentcron.web.cli.client import (
    DEFAULT_URL,
    Api,
    JsonOption,
    KeyOption,
    UrlOption,
    answer,
    print_json,
)
from agentcron.web.cli.runs import WaitOption, finish
from agentcron.web.cli.schedules.options import IdArgument
from agentcron.web.cli.schedules.views import show_backfill, show_resume_plan, show_schedule


class ResumeCatchup(StrEnum):
    skip = "skip"
    latest = "latest"
    all = "all"


def pause(
    schedule_id: IdArgument,
    note: Annotated[str | None, typer.Option("--note", help="why, shown on the schedule")] = None,
    url: UrlOption = DEFAULT_URL,
    key: KeyOption = None,
    as_json: JsonOption = False,
) -> None:
    """Stop new runs at once (a run claimed but not started is skipped)."""
    api = Api.connect(url, key)
    answer(
        api.post(f"/api/v1/schedules/{schedule_id}/pause", {"note": note} if note else None),
        as_json,
        show_schedule,
    )


def resume(
    schedule_id: IdArgument,
    catchup: Annotated[
        ResumeCatchup,
        typer.Option(
            "--catchup",
            help="the due times the pause covered: skip them (default), run the latest, or all",
        ),
    ] = ResumeCatchup.skip,
    dry_run: Annotated[
        bool, typer.Option("--dry-run", help="only show which due times would run")
    ] = False,
    url: UrlOption = DEFAULT_URL,
    key: KeyOption = None,
    as_json: JsonOption = False,
) -> None:
    """Resume from the next due time after now; --catchup says what the pause's due times get."""
    body = {"catchup": catchup.value, "dry_run": dry_run}
    response = Api.connect(url, key).post(f"/api/v1/schedules/{schedule_id}/resume", body)
    if dry_run:
        answer(response, as_json, show_resume_plan)
    else:
        answer(response, as_json, show_schedule)


def skip(
    schedule_id: IdArgument,
    due_at: Annotated[str, typer.Argument(metavar="DUE_AT", help="an upcoming due time, ISO 8601")],
    undo: Annotated[bool, typer.Option("--undo", help="put a skipped due time back")] = False,
    url: UrlOption = DEFAULT_URL,
    key: KeyOption = None,
    as_json: JsonOption = False,
) -> None:
    """Skip one upcoming due time of the schedule (and only it); --undo puts it back."""
    api = Api.connect(url, key)
    if undo:
        api.post(f"/api/v1/schedules/{schedule_id}/unskip", {"due_at": due_at})
        if as_json:
            print_json(json.dumps({"due_at": due_at, "skipped": False}))
        else:
            render.console().print(Text(f"{due_at} will run"))
        return
    response = api.post(f"/api/v1/schedules/{schedule_id}/skip", {"due_at": due_at})
    answer(response, as_json, lambda run: render.emit(render.console(), render.run_detail(run)))


def backfill(
    schedule_id: IdArgument,
    start: Annotated[str, typer.Option("--start", metavar="ISO8601", help="from (inclusive)")],
    end: Annotated[
        str, typer.Option("--end", metavar="ISO8601", help="to (exclusive), not future")
    ],
    all_at_once: Annotated[
        bool,
        typer.Option("--all-at-once", help="start them together (default: one at a time)"),
    ] = False,
    dry_run: Annotated[
        bool, typer.Option("--dry-run", help="only list the due times; queue nothing")
    ] = False,
    url: UrlOption = DEFAULT_URL,
    key: KeyOption = None,
    as_json: JsonOption = False,
) -> None:
    """Run the past due times in [--start, --end) that did not run, once each."""
    body = {
        "start": start,
        "end": end,
        "overlap": "allow" if all_at_once else "buffer_all",
        "dry_run": dry_run,
    }
    response = Api.connect(url, key).post(f"/api/v1/schedules/{schedule_id}/backfill", body)
    answer(response, as_json, show_backfill)


def run_now(
    schedule_id: IdArgument,
    url: UrlOption = DEFAULT_URL,
    key: KeyOption = None,
    as_json: JsonOption = False,
    wait: WaitOption = False,
) -> None:
    """Run it now (trigger manual); the timetable does not move."""
    api = Api.connect(url, key)
    finish(api, api.post(f"/api/v1/schedules/{schedule_id}/run").text, as_json, wait)
