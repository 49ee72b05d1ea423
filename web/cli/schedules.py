"""``agentcron schedules`` and ``agentcron preview``: schedules over HTTP, as docs/api.md defines
them. The service validates everything; the command line only refuses what it cannot even
send (two triggers at once, ``--tz`` without a cron, a ``--file`` that is not JSON)."""

from __future__ import annotations

import json
import sys
from enum import StrEnum
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.text import Text

from web.cli import render
from web.cli.client import (
    DEFAULT_URL,
    USAGE,
    Api,
    CliError,
    JsonOption,
    KeyOption,
    UrlOption,
    answer,
    print_json,
)
from web.cli.runs import AllOption, LimitOption, WaitOption, finish

app = typer.Typer(
    help="Schedules: list, show, add, pause, resume, run now, delete, skip, backfill.",
    no_args_is_help=True,
)


class Mode(StrEnum):
    isolated = "isolated"
    persistent = "persistent"


class Overlap(StrEnum):
    allow = "allow"
    skip = "skip"
    buffer_one = "buffer_one"
    cancel_other = "cancel_other"


class Catchup(StrEnum):
    skip = "skip"
    latest = "latest"


class ResumeCatchup(StrEnum):
    skip = "skip"
    latest = "latest"
    all = "all"


IdArgument = Annotated[str, typer.Argument(metavar="ID", help="the schedule's id")]
TzOption = Annotated[
    str | None,
    typer.Option("--tz", metavar="ZONE", help="IANA zone of the cron expression (default UTC)"),
]
EveryOption = Annotated[
    int | None,
    typer.Option("--every", metavar="SECONDS", help="an interval trigger instead of a cron"),
]
StartAtOption = Annotated[
    str | None,
    typer.Option(
        "--start-at", metavar="ISO8601", help="where the --every grid starts (default: now)"
    ),
]
AtOption = Annotated[
    str | None,
    typer.Option("--at", metavar="ISO8601", help="a one-shot trigger, with an offset"),
]


def trigger_of(
    cron: str | None,
    tz: str | None,
    every: int | None,
    start_at: str | None,
    at: str | None,
    cron_name: str = "--cron",
) -> dict[str, Any] | None:
    """The API trigger the options describe (None when none was given); ``CliError`` (usage)
    for two kinds at once or an option that belongs to a kind not chosen."""
    kinds = ((cron_name, cron), ("--every", every), ("--at", at))
    given = [name for name, value in kinds if value is not None]
    if len(given) > 1:
        raise CliError(f"give one trigger, not {' and '.join(given)}", USAGE)
    if tz is not None and cron is None:
        raise CliError(f"--tz goes with {cron_name} (a cron expression)", USAGE)
    if start_at is not None and every is None:
        raise CliError("--start-at goes with --every", USAGE)
    if cron is not None:
        return {"cron": cron, **({"timezone": tz} if tz is not None else {})}
    if every is not None:
        return {"every_seconds": every, **({"start_at": start_at} if start_at else {})}
    if at is not None:
        return {"at": at}
    return None


def read_body(path: str) -> dict[str, Any]:
    """The JSON object in file ``path`` (``-``: stdin); ``CliError`` (usage) otherwise."""
    try:
        text = sys.stdin.read() if path == "-" else Path(path).read_text()
    except OSError as exc:
        raise CliError(f"--file {path}: {exc.strerror or exc}", USAGE) from None
    try:
        body = json.loads(text)
    except ValueError as exc:
        raise CliError(f"--file {path}: not JSON: {exc}", USAGE) from None
    if not isinstance(body, dict):
        raise CliError(f"--file {path}: a schedule is a JSON object", USAGE)
    return body


def show_schedule(schedule: dict[str, Any]) -> None:
    """Print one schedule's fields."""
    render.emit(render.console(), render.schedule_detail(schedule))


@app.command("list")
def list_schedules(
    url: UrlOption = DEFAULT_URL,
    key: KeyOption = None,
    as_json: JsonOption = False,
    limit: LimitOption = 50,
    every_page: AllOption = False,
) -> None:
    """Schedules, newest first (a key sees its owner's; an admin key sees all).

    With --json and --all, one document {"items": [...every page...], "next_cursor": null}.
    """
    api = Api.connect(url, key)
    items, texts = api.pages("/api/v1/schedules", limit, every_page)
    if as_json:
        print_json(
            texts[0] if len(texts) == 1 else json.dumps({"items": items, "next_cursor": None})
        )
        return
    render.emit(render.console(), render.schedules_table(items))


@app.command("show")
def show(
    schedule_id: IdArgument,
    url: UrlOption = DEFAULT_URL,
    key: KeyOption = None,
    as_json: JsonOption = False,
) -> None:
    """One schedule: trigger in words, next run (local and in its zone), last run, policy."""
    answer(Api.connect(url, key).get(f"/api/v1/schedules/{schedule_id}"), as_json, show_schedule)


@app.command("add")
def add(
    name: Annotated[str | None, typer.Option("--name", help="1-200 characters")] = None,
    prompt: Annotated[
        str | None, typer.Option("--prompt", help="what the agent gets on stdin")
    ] = None,
    cron: Annotated[
        str | None,
        typer.Option("--cron", metavar="EXPR", help='5 fields or @macro, e.g. "0 9 * * 1-5"'),
    ] = None,
    tz: TzOption = None,
    every: EveryOption = None,
    start_at: StartAtOption = None,
    at: AtOption = None,
    command: Annotated[
        list[str] | None,
        typer.Option(
            "--command",
            metavar="ARG",
            help="one word of the agent's argv, repeated in order (a command runner)",
        ),
    ] = None,
    env: Annotated[
        list[str] | None,
        typer.Option("--env", metavar="NAME=VALUE", help="an environment variable of the agent"),
    ] = None,
    mode: Annotated[Mode | None, typer.Option("--mode", help="default isolated")] = None,
    overlap: Annotated[
        Overlap | None,
        typer.Option("--overlap", help="default allow (isolated) or skip (persistent)"),
    ] = None,
    catchup: Annotated[Catchup | None, typer.Option("--catchup", help="default skip")] = None,
    timeout: Annotated[
        int | None,
        typer.Option("--timeout", metavar="SECONDS", help="a run's time limit (default 3600)"),
    ] = None,
    max_attempts: Annotated[
        int | None, typer.Option("--max-attempts", help="tries of a run (default 3)")
    ] = None,
    paused: Annotated[bool, typer.Option("--paused", help="create it paused")] = False,
    file: Annotated[
        str | None,
        typer.Option(
            "--file",
            metavar="PATH",
            help="a whole schedule as JSON, the create body of docs/api.md (- reads stdin); "
            "other options override it",
        ),
    ] = None,
    url: UrlOption = DEFAULT_URL,
    key: KeyOption = None,
    as_json: JsonOption = False,
) -> None:
    """Create a schedule: name, prompt, one trigger and a runner (or a --file body).

    Example: schedules add --name hi --prompt hello --cron "0 8 * * 1-5" --command cat
    """
    api = Api.connect(url, key)
    body = read_body(file) if file is not None else {}
    trigger = trigger_of(cron, tz, every, start_at, at)
    if env and not command:
        raise CliError("--env goes with --command", USAGE)
    fields: dict[str, Any] = {
        "name": name,
        "prompt": prompt,
        "trigger": trigger,
        "runner": {"type": "command", "argv": command, **_env(env)} if command else None,
        "mode": mode.value if mode else None,
        "overlap": overlap.value if overlap else None,
        "catchup": catchup.value if catchup else None,
        "timeout_seconds": timeout,
        "max_attempts": max_attempts,
        "enabled": False if paused else None,
    }
    body.update({field: value for field, value in fields.items() if value is not None})
    missing = [
        option
        for field, option in (
            ("name", "--name"),
            ("prompt", "--prompt"),
            ("trigger", "--cron, --every or --at"),
            ("runner", "--command"),
        )
        if field not in body
    ]
    if missing:
        raise CliError(f"missing {', '.join(missing)} (or give them in --file)", USAGE)
    answer(api.post("/api/v1/schedules", body), as_json, show_schedule)


def _env(pairs: list[str] | None) -> dict[str, Any]:
    if not pairs:
        return {}
    env = {}
    for pair in pairs:
        name, sep, value = pair.partition("=")
        if not sep or not name:
            raise CliError(f"--env {pair!r}: expected NAME=VALUE", USAGE)
        env[name] = value
    return {"env": env}


@app.command("pause")
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


@app.command("resume")
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


def show_resume_plan(plan: dict[str, Any]) -> None:
    out = render.console()
    skipped = plan["skipped"]
    out.print(
        Text(
            f"catch-up {plan['catchup']}: {len(plan['run'])} due time(s) would run, "
            f"{'more than 30' if skipped is None else skipped} would be skipped (paused)"
        )
    )
    for due in plan["run"]:
        out.print(Text(f"  run {render.local(due)}"))


@app.command("skip")
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


@app.command("backfill")
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


def show_backfill(plan: dict[str, Any]) -> None:
    out = render.console()
    verb = "would queue" if plan["dry_run"] else "queued"
    out.print(
        Text(
            f"{verb} {len(plan['due_times'])} run(s); {plan['kept']} due time(s) in the range "
            "left alone (they ran, are running, or were skipped on purpose)"
        )
    )
    for due in plan["due_times"]:
        out.print(Text(f"  {render.local(due)}"))


@app.command("run")
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


@app.command("delete")
def delete(
    schedule_id: IdArgument,
    yes: Annotated[bool, typer.Option("--yes", "-y", help="do not ask")] = False,
    url: UrlOption = DEFAULT_URL,
    key: KeyOption = None,
    as_json: JsonOption = False,
) -> None:
    """Delete a schedule; its pending and running runs are cancelled.

    Asks first on a terminal; without a terminal (a script) it needs --yes. With --json it
    prints {"id": ID, "deleted": true} (the API answers 204, no body).
    """
    api = Api.connect(url, key)
    if not yes:
        if not sys.stdin.isatty():
            raise CliError(f"not deleting {schedule_id} without --yes (no terminal to ask)", USAGE)
        schedule = api.get(f"/api/v1/schedules/{schedule_id}").json()
        if not typer.confirm(f"Delete schedule {schedule['name']!r} ({schedule_id})?"):
            raise CliError("not deleted", 1)
    api.request("DELETE", f"/api/v1/schedules/{schedule_id}")
    if as_json:
        print_json(json.dumps({"id": schedule_id, "deleted": True}))
        return
    render.console().print(Text(f"deleted {schedule_id}"))


def preview(
    expr: Annotated[
        str | None,
        typer.Argument(metavar="EXPR", help='a cron expression, e.g. "0 9 * * 1-5"'),
    ] = None,
    tz: TzOption = None,
    every: EveryOption = None,
    start_at: StartAtOption = None,
    at: AtOption = None,
    count: Annotated[int, typer.Option("--count", min=1, max=1000, help="how many")] = 10,
    after: Annotated[
        str | None,
        typer.Option("--after", metavar="ISO8601", help="due times strictly after (default now)"),
    ] = None,
    url: UrlOption = DEFAULT_URL,
    key: KeyOption = None,
    as_json: JsonOption = False,
) -> None:
    """A trigger in words and its next due times, in its zone and local, before saving it.

    Example: agentcron preview "0 9 * * 1-5" --tz Asia/Shanghai
    """
    api = Api.connect(url, key)
    trigger = trigger_of(expr, tz, every, start_at, at, cron_name="EXPR")
    if trigger is None:
        raise CliError("give a cron EXPR, --every or --at", USAGE)
    body: dict[str, Any] = {"trigger": trigger, "count": count}
    if after is not None:
        body["after"] = after
    response = api.post("/api/v1/schedules/preview", body)
    if as_json:
        print_json(response.text)
        return
    result = response.json()
    out = render.console()
    out.print(Text(result["description"], style="bold"))
    render.emit(out, render.preview_table(result, render.trigger_zone(trigger)))
