"""The ``agentcron`` command line.

On the server's machine: ``serve``, ``migrate``, ``example``, ``keys``, ``secrets-key`` and
``secrets-rotate`` (``local``). From anywhere, as a client of a running service over HTTP:
``schedules``, ``runs``, ``secrets``, ``preview`` and ``mcp``, the MCP server for agents
(``schedules``, ``runs``, ``secrets``, ``mcp``, ``client``). Exit codes: 0 done, 1 the service
refused or could not be reached (the message says which), 2 a usage error or a service that
cannot start.
"""

from __future__ import annotations

import sys
from typing import Any

import typer
from typer.core import TyperOption

from agentcron.web.cli import local, mcp, runs, schedules, secrets
from agentcron.web.cli.client import CliError
from agentcron.web.cli.schedules.preview import preview


def _no_type_for_flags() -> None:
    """Leave a flag's type column empty in ``--help``: typer 0.29 writes ``<bool>`` beside
    every flag (``--help -h <bool>``, ``--json <bool>``), which reads as a value to type. A flag
    takes none; options with values keep their types (``<int range>``). Without it every one of
    the command line's 31 help pages shows ``<bool>``: beside ``--help`` on each, and 30 times
    beside other flags (``tests/e2e/test_cli.py`` holds it)."""
    shown = TyperOption.display_type_rich

    # ctx: typer's own (vendored) click Context.
    def display_type_rich(self: TyperOption, ctx: Any) -> str | None:
        if self.is_flag and not self.count:
            return None
        return shown(self, ctx)

    setattr(TyperOption, "display_type_rich", display_type_rich)  # noqa: B010 (a method)


_no_type_for_flags()

app = typer.Typer(
    name="agentcron",
    help="Run AI-agent work on a timetable.",
    no_args_is_help=True,
    add_completion=False,
    # A plain traceback: typer's pretty one shows local variables, which include API keys.
    pretty_exceptions_enable=False,
    context_settings={"help_option_names": ["-h", "--help"]},
)
app.command("serve")(local.serve)
app.command("migrate")(local.migrate)
app.command("example")(local.example)
app.add_typer(local.keys, name="keys")
app.command("secrets-key")(local.secrets_key)
app.command("secrets-rotate")(local.secrets_rotate)
app.add_typer(schedules.app, name="schedules")
app.add_typer(runs.app, name="runs")
app.add_typer(secrets.app, name="secrets")
app.command("preview")(preview)
app.command("mcp")(mcp.mcp)


def main(argv: list[str] | None = None) -> int:
    """Run the command ``argv`` (default ``sys.argv[1:]``); returns the process exit code."""
    try:
        app(args=argv, prog_name="agentcron")
    except SystemExit as exc:
        return _exit_code(exc.code)
    except CliError as exc:
        sys.stderr.write(f"agentcron: {exc.message}\n")
        sys.stderr.flush()
        return exc.code
    return 0


def _exit_code(code: object) -> int:
    if code is None:
        return 0
    if isinstance(code, int):
        return code
    sys.stderr.write(f"{code}\n")
    return 1
