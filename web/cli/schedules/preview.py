"""``agentcron preview``: a trigger in words and its next due times, before it is saved.

It owns the preview command, which takes the same trigger options as ``schedules add`` (the
cron expression as its argument) and asks the service, which validates the trigger, for the
description and the due times.
"""

from __future__ import annotations

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
    print_json,
)
from agentcron.web.cli.schedules.options import (
    AtOption,
    EveryOption,
    StartAtOption,
    TzOption,
    trigger_of,
)


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
