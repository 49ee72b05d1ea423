"""The options and arguments the schedule commands share, and the trigger they describe.

It owns the schedule id argument, the trigger options (``--tz``, ``--every``, ``--start-at``,
``--at``; the cron expression is each command's own) and ``trigger_of``, which turns them into
the API's trigger and refuses, as a usage error, what cannot even be sent: two kinds at once,
or an option of a kind not chosen.
"""

from __future__ import annotations

from typing import Annotated, Any

import typer

from agentcron.web.cli.client import USAGE, CliError

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
