"""``agentcron schedules`` and ``agentcron preview``: schedules over HTTP, as docs/api.md defines
them. The service validates everything; the command line only refuses what it cannot even
send (two triggers at once, ``--tz`` without a cron, a ``--file`` that is not JSON).

- ``crud``: list, show, add, delete;
- ``timetable``: pause, resume, skip, backfill, run now;
- ``preview``: ``agentcron preview``;
- ``options``: the shared arguments and trigger options, and ``trigger_of``;
- ``views``: how a schedule and the resume and backfill plans are printed.

The commands are registered here, in the order ``--help`` lists them.
"""

from __future__ import annotations

import typer

from agentcron.web.cli.schedules import crud, timetable

app = typer.Typer(
    help="Schedules: list, show, add, pause, resume, run now, delete, skip, backfill.",
    no_args_is_help=True,
)
app.command("list")(crud.list_schedules)
app.command("show")(crud.show)
app.command("add")(crud.add)
app.command("pause")(timetable.pause)
app.command("resume")(timetable.resume)
app.command("skip")(timetable.skip)
app.command("backfill")(timetable.backfill)
app.command("run")(timetable.run_now)
app.command("delete")(crud.delete)

__all__ = ["app"]
