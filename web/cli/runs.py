"""``agentcron runs``: a schedule's run history, one run, replay and cancel, over HTTP."""

from __future__ import annotations

import json
import time
from typing import Annotated, Any

import typer
from rich.text import Text

from agentcron.web.cli import render
from agentcron.web.cli.client import (
    DEFAULT_URL,
    Api,
    CliError,
    JsonOption,
    KeyOption,
    Params,
    UrlOption,
    answer,
    hint_more_pages,
    print_json,
)

app = typer.Typer(help="A schedule's runs: list, show, replay, cancel.", no_args_is_help=True)

LimitOption = Annotated[
    int, typer.Option("--limit", min=1, max=500, help="items per request (the API's page size)")
]
AllOption = Annotated[bool, typer.Option("--all", help="follow next_cursor through every page")]
WaitOption = Annotated[
    bool,
    typer.Option(
        "--wait", help="wait until the run finishes; exit 1 unless it succeeded (Ctrl-C stops)"
    ),
]
StatusOption = Annotated[
    list[str] | None,
    typer.Option(
        "--status",
        metavar="STATUS",
        help="only runs in this status (pending, running, succeeded, failed, timed_out,"
        " cancelled, skipped); repeat for several",
    ),
]
TriggerOption = Annotated[
    list[str] | None,
    typer.Option(
        "--trigger", metavar="TRIGGER", help="only runs of this trigger (schedule, manual, replay)"
    ),
]
OriginOption = Annotated[
    list[str] | None,
    typer.Option(
        "--origin",
        metavar="ORIGIN",
        help="only runs of this origin (schedule, catchup, manual, replay, backfill)",
    ),
]
HideSkippedOption = Annotated[
    bool,
    typer.Option("--hide-skipped", help="leave out due times that did not run (skipped rows)"),
]
POLL_SECONDS = 0.5


def show_run(run: dict[str, Any]) -> None:
    """Print one run: its fields, its deliveries, then its output, result (as indented JSON)
    and error whole."""
    out = render.console()
    render.emit(out, render.run_detail(run))
    if run["deliveries"]:
        out.print()
        render.emit(out, render.deliveries_table(run["deliveries"]))
    result = run.get("result")  # absent from a service older than the field
    shown = json.dumps(result, indent=2, ensure_ascii=False) if result is not None else None
    for label, text in (("output", run["output"]), ("result", shown), ("error", run["error"])):
        if text:
            out.print()
            out.print(Text(f"{label}:", style="bold"))
            # soft_wrap: the text as the agent wrote it, no re-wrapping; Text drops control codes.
            out.print(Text(text.rstrip("\n")), soft_wrap=True)


def finish(api: Api, response_text: str, as_json: bool, wait: bool) -> None:
    """Print a just-queued run (202), or with ``wait`` poll it until it finishes and print
    that; ``CliError`` when a waited run ended other than ``succeeded``."""
    run = json.loads(response_text)
    text = response_text
    if wait:
        while run["status"] not in render.TERMINAL:
            time.sleep(POLL_SECONDS)
            response = api.get(f"/api/v1/runs/{run['id']}")
            run, text = response.json(), response.text
    if as_json:
        print_json(text)
    else:
        show_run(run)
    if wait and run["status"] != "succeeded":
        detail = render.first_line(run["error"] or run.get("reason"), 200)
        raise CliError(f"run {run['id']} {run['status']}" + (f": {detail}" if detail else ""))


@app.command("list")
def list_runs(
    schedule_id: Annotated[str, typer.Argument(metavar="SCHEDULE_ID")],
    url: UrlOption = DEFAULT_URL,
    key: KeyOption = None,
    as_json: JsonOption = False,
    limit: LimitOption = 20,
    every_page: AllOption = False,
    status: StatusOption = None,
    trigger: TriggerOption = None,
    origin: OriginOption = None,
    hide_skipped: HideSkippedOption = False,
) -> None:
    """A schedule's runs, newest first, every trigger (schedule, manual, replay), or those
    the filters keep: `--status failed --status timed_out` lists the failures."""
    api = Api.connect(url, key)
    filters: Params = {}
    for name, values in (("status", status), ("trigger", trigger), ("origin", origin)):
        if values:
            filters[name] = list(values)
    if hide_skipped:
        filters["skipped"] = "false"
    path = f"/api/v1/schedules/{schedule_id}/runs"
    items, texts = api.pages(path, limit, every_page, filters)
    if as_json:
        print_json(
            texts[0] if len(texts) == 1 else json.dumps({"items": items, "next_cursor": None})
        )
        return
    render.emit(render.console(), render.runs_table(items))
    if not every_page:
        hint_more_pages(texts, len(items), "runs")


@app.command("show")
def show(
    run_id: Annotated[str, typer.Argument(metavar="RUN_ID")],
    url: UrlOption = DEFAULT_URL,
    key: KeyOption = None,
    as_json: JsonOption = False,
) -> None:
    """One run with its deliveries, output and error."""
    answer(Api.connect(url, key).get(f"/api/v1/runs/{run_id}"), as_json, show_run)


@app.command("replay")
def replay(
    run_id: Annotated[str, typer.Argument(metavar="RUN_ID")],
    url: UrlOption = DEFAULT_URL,
    key: KeyOption = None,
    as_json: JsonOption = False,
    wait: WaitOption = False,
) -> None:
    """Run an earlier run's saved prompt and runner again, as a new run (trigger replay)."""
    api = Api.connect(url, key)
    finish(api, api.post(f"/api/v1/runs/{run_id}/replay").text, as_json, wait)


@app.command("cancel")
def cancel(
    run_id: Annotated[str, typer.Argument(metavar="RUN_ID")],
    url: UrlOption = DEFAULT_URL,
    key: KeyOption = None,
    as_json: JsonOption = False,
) -> None:
    """Cancel a pending run or stop a running one (a finished run: HTTP 409, exit 1)."""
    answer(Api.connect(url, key).post(f"/api/v1/runs/{run_id}/cancel"), as_json, show_run)
