"""The ``agentcron`` command line: ``serve``, ``migrate``, ``example`` and ``keys``, which act
on the server's own database (``local``)."""

from __future__ import annotations

import sys

import typer

from web.cli import local

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


def main(argv: list[str] | None = None) -> int:
    """Run the command ``argv`` (default ``sys.argv[1:]``); returns the process exit code."""
    try:
        app(args=argv, prog_name="agentcron")
    except SystemExit as exc:
        return _exit_code(exc.code)
    return 0


def _exit_code(code: object) -> int:
    if code is None:
        return 0
    if isinstance(code, int):
        return code
    sys.stderr.write(f"{code}\n")
    return 1
