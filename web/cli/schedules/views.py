"""How the schedule commands print what the service answers, when ``--json`` is not given.

It owns the readable forms of a schedule, of a resume plan and of a backfill plan, drawn with
``web.cli.render``.
"""

from __future__ import annotations

from typing import Any

from rich.text import Text

from agentcron.web.cli import render


def show_schedule(schedule: dict[str, Any]) -> None:
    """Print one schedule's fields."""
    render.emit(render.console(), render.schedule_detail(schedule))


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
