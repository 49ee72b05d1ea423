"""``agentcron schedules list|show|add|delete``: reading, creating and deleting schedules.

It owns the options of ``add`` (the runner, its environment, the policies, a ``--file`` body
that the options override) and the checks that stay on this side: a ``--file`` that is not a
JSON object, ``--env`` without ``--command``, and the fields missing from the body; and the
confirmation ``delete`` asks for on a terminal.
"""

from __future__ import annotations

import json
import sys
from enum import StrEnum
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.text import Text

from agentcron.web.cli import render
from agentcron.web.cli.client import (
    DEFAULT_URL,
    USAGE,
    Api,
    CliError,
    JsonOption,
    KeyOption,
    UrlOption,
    answer,
    hint_more_pages,
    print_json,
)
from agentcron.web.cli.runs import AllOption, LimitOption
from agentcron.web.cli.schedules.options import (
    AtOption,
    EveryOption,
    IdArgument,
    StartAtOption,
    TzOption,
    trigger_of,
)
from agentcron.web.cli.schedules.views import show_schedule


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
    if not every_page:
        hint_more_pages(texts, len(items), "schedules")


def show(
    schedule_id: IdArgument,
    url: UrlOption = DEFAULT_URL,
    key: KeyOption = None,
    as_json: JsonOption = False,
) -> None:
    """One schedule: trigger in words, next run (local and in its zone), last run, policy."""
    answer(Api.connect(url, key).get(f"/api/v1/schedules/{schedule_id}"), as_json, show_schedule)


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
