"""``agentcron secrets``: the caller's stored secrets over HTTP: set, list, delete.

A value goes from stdin (or ``--value``) to the service and nowhere else: it is never echoed,
printed or logged, and no answer of the API carries it.
"""

from __future__ import annotations

import getpass
import json
import sys
from typing import Annotated, Any

import typer
from rich.table import Table
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
    print_json,
)

app = typer.Typer(
    help='Stored secrets (write-only; referenced as {"secret": NAME}): set, list, delete.',
    no_args_is_help=True,
)

NameArgument = Annotated[str, typer.Argument(metavar="NAME", help="the secret's name")]


def read_value(given: str | None) -> str:
    """The value to store: ``given``, else stdin whole (one trailing line break dropped: what
    ``echo`` adds), else, on a terminal, typed without echo. ``CliError`` (usage) if empty."""
    if given is not None:
        value = given
    elif sys.stdin.isatty():
        value = getpass.getpass("value (not shown): ")
    else:
        value = sys.stdin.read()
        value = value.removesuffix("\n").removesuffix("\r")
    if not value:
        raise CliError("no value: pipe it on stdin or pass --value", USAGE)
    return value


def _when(value: str | None) -> str:
    return render.local(value)


def secrets_table(items: list[dict[str, Any]]) -> Table | Text:
    """One row per secret: its name and when it was stored and last replaced."""
    if not items:
        return Text("no secrets (agentcron secrets set NAME)", style="dim")
    table = Table(box=None, header_style="bold", pad_edge=False)
    table.add_column("NAME", no_wrap=True)
    table.add_column("CREATED (local)", no_wrap=True)
    table.add_column("UPDATED (local)", no_wrap=True)
    for item in items:
        table.add_row(item["name"], _when(item["created_at"]), _when(item["updated_at"]))
    return table


@app.command("set")
def set_secret(
    name: NameArgument,
    value: Annotated[
        str | None,
        typer.Option(
            "--value",
            help="the value (else read from stdin); visible to `ps` and shell history",
            show_default=False,
        ),
    ] = None,
    url: UrlOption = DEFAULT_URL,
    key: KeyOption = None,
    as_json: JsonOption = False,
) -> None:
    """Store a secret (create, or replace its value). The value is read from stdin:
    `printf %s "$TOKEN" | agentcron secrets set NAME`, or typed unseen on a terminal."""
    api = Api.connect(url, key)
    response = api.request("PUT", f"/api/v1/secrets/{name}", body={"value": read_value(value)})

    def show(stored: dict[str, Any]) -> None:
        render.console().print(
            Text(f"stored secret {stored['name']} (updated {_when(stored['updated_at'])})")
        )

    answer(response, as_json, show)


@app.command("list")
def list_secrets(
    url: UrlOption = DEFAULT_URL, key: KeyOption = None, as_json: JsonOption = False
) -> None:
    """The names of your stored secrets and when they were stored; never their values."""
    api = Api.connect(url, key)
    response = api.get("/api/v1/secrets")
    answer(
        response, as_json, lambda page: render.emit(render.console(), secrets_table(page["items"]))
    )


@app.command("delete")
def delete_secret(
    name: NameArgument,
    url: UrlOption = DEFAULT_URL,
    key: KeyOption = None,
    as_json: JsonOption = False,
) -> None:
    """Delete a stored secret. Schedules that refer to it keep the reference, and their next
    run or delivery fails naming it. With --json it prints {"name": NAME, "deleted": true}
    (the API answers 204, no body)."""
    api = Api.connect(url, key)
    api.request("DELETE", f"/api/v1/secrets/{name}")
    if as_json:
        print_json(json.dumps({"name": name, "deleted": True}))
        return
    render.console().print(Text(f"deleted secret {name}"))
