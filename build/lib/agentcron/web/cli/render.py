"""How the HTTP commands show schedules, runs and previews to a person: rich tables, times in
the viewer's local zone (and the schedule's own zone where it has one), colored statuses.

Color only reaches a terminal: rich writes plain text to pipes and files and honours
``NO_COLOR`` (and ``FORCE_COLOR``). Markup and emoji codes are off, so a schedule named
``[red]x`` or ``:x:`` prints as typed.
"""

from __future__ import annotations

import os
import shlex
from datetime import datetime
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from rich.console import Console, RenderableType
from rich.table import Table
from rich.text import Text

# Run statuses, delivery statuses and the derived schedule states.
STATUS_STYLES = {
    "succeeded": "green",
    "delivered": "green",
    "active": "green",
    "failed": "red",
    "timed_out": "red",
    "pending": "yellow",
    "running": "yellow",
    "paused": "yellow",
    "cancelled": "dim",
    "skipped": "dim",
    "finished": "dim",
}
# The terminal run statuses of core.states, restated: an HTTP client imports nothing of the
# server side (a test holds it).
TERMINAL = frozenset({"succeeded", "failed", "skipped", "timed_out", "cancelled"})
# Wide enough that a pipe gets whole rows: grep and awk see one line per row.
_PIPE_WIDTH = 4096


def console() -> Console:
    """A console on stdout that prints text as given (no markup, emoji or highlighting)."""
    out = Console(markup=False, emoji=False, highlight=False)
    if not out.is_terminal and "COLUMNS" not in os.environ:
        out.width = _PIPE_WIDTH
    return out


def emit(out: Console, renderable: RenderableType, soft_wrap: bool = False) -> None:
    """Print ``renderable``; to a pipe or file without the padding rich puts after the last
    cell, so every line ends where its text does."""
    if out.is_terminal:
        out.print(renderable, soft_wrap=soft_wrap)
        return
    with out.capture() as captured:
        out.print(renderable, soft_wrap=soft_wrap)
    out.file.write("".join(f"{line.rstrip()}\n" for line in captured.get().splitlines()))
    out.file.flush()


def parse_time(value: str | None) -> datetime | None:
    """An API timestamp (ISO 8601 with an offset or ``Z``) as an aware datetime."""
    return None if value is None else datetime.fromisoformat(value)


def stamp(moment: datetime, weekday: bool = False) -> str:
    """``2026-03-05 20:00:00 -05:00`` (``Thu 2026-...`` with ``weekday``), in ``moment``'s zone."""
    offset = moment.strftime("%z")
    text = f"{moment:%Y-%m-%d %H:%M:%S} {offset[:3]}:{offset[3:]}"
    return f"{moment:%a} {text}" if weekday else text


def local(value: str | None, weekday: bool = False) -> str:
    """An API timestamp in the viewer's local zone (the machine's, or ``TZ``); ``-`` for null."""
    moment = parse_time(value)
    return "-" if moment is None else stamp(moment.astimezone(), weekday)


def local_short(value: str | None) -> str:
    """``local`` without the offset, for table cells: the column header says "local"."""
    moment = parse_time(value)
    return "-" if moment is None else f"{moment.astimezone():%Y-%m-%d %H:%M:%S}"


def in_zone(value: str | None, zone: str | None, weekday: bool = False) -> str | None:
    """An API timestamp in IANA ``zone``; None when there is no time or no zone, or this
    machine's time zone data does not know the zone."""
    moment = parse_time(value)
    if moment is None or not zone:
        return None
    try:
        return stamp(moment.astimezone(ZoneInfo(zone)), weekday)
    except (ZoneInfoNotFoundError, ValueError):
        return None


def status(name: str | None, reason: str | None = None) -> Text:
    """A status colored by what it means (green done, red failed, yellow waiting or running,
    dim never ran); ``reason`` (why a run was skipped or cancelled) follows in parentheses."""
    if name is None:
        return Text("-", style="dim")
    text = Text(name, style=STATUS_STYLES.get(name, ""))
    if reason:
        text.append(f" ({reason})", style="dim")
    return text


def duration(start: str | None, end: str | None) -> str:
    """``12 ms``, ``1.2 s``, ``3 min 4 s`` or ``2 h 5 min`` from ``start`` to ``end``; ``-``
    when either is null."""
    first, last = parse_time(start), parse_time(end)
    if first is None or last is None:
        return "-"
    seconds = (last - first).total_seconds()
    if seconds < 1:
        return f"{seconds * 1000:.0f} ms"
    if seconds < 60:
        return f"{seconds:.1f} s"
    minutes, secs = divmod(int(seconds), 60)
    if minutes < 60:
        return f"{minutes} min {secs} s"
    return f"{minutes // 60} h {minutes % 60} min"


def first_line(text: str | None, width: int = 60) -> str:
    """The first non-blank line of ``text``, cut to ``width`` characters with an ellipsis."""
    if not text:
        return ""
    line = next((part.strip() for part in text.splitlines() if part.strip()), "")
    return line if len(line) <= width else f"{line[: width - 1]}…"


# -- schedules -------------------------------------------------------------------------------


def schedule_state(schedule: dict[str, Any]) -> str:
    """``paused`` (not enabled), ``finished`` (a one-shot that has fired) or ``active``."""
    if not schedule["enabled"]:
        return "paused"
    return "finished" if schedule["next_run"] is None else "active"


def trigger_summary(trigger: dict[str, Any]) -> str:
    """A trigger in a few words: ``0 9 * * 1-5 Asia/Shanghai``, ``every 30 s``, ``at <local>``
    (an interval's ``start_at`` is left to the detail view)."""
    if "cron" in trigger:
        return f"{trigger['cron']} {trigger.get('timezone') or 'UTC'}"
    if "every_seconds" in trigger:
        return f"every {trigger['every_seconds']} s"
    if "at" in trigger:
        return f"at {local(trigger['at'])}"
    return str(trigger)


def trigger_zone(trigger: dict[str, Any]) -> str | None:
    """The zone a trigger's times are meant in: a cron's ``timezone`` (UTC by default)."""
    return (trigger.get("timezone") or "UTC") if "cron" in trigger else None


def next_run(schedule: dict[str, Any]) -> Text:
    """The next due time, local; for a zoned trigger also in its zone, when that differs."""
    if schedule["next_run"] is None:
        return Text("-", style="dim")
    text = Text(local(schedule["next_run"]))
    zone = trigger_zone(schedule["trigger"])
    there = in_zone(schedule["next_run"], zone)
    if there is not None and there != local(schedule["next_run"]):
        text.append(f"  ({there} {zone})", style="dim")
    return text


def schedules_table(schedules: list[dict[str, Any]]) -> Table | Text:
    """One row per schedule: id, name, trigger, next run, state, last run's status."""
    if not schedules:
        return Text("no schedules", style="dim")
    table = Table(box=None, header_style="bold", pad_edge=False)
    # Ids stay whole (commands take them); on a narrow terminal the other cells wrap.
    table.add_column("ID", no_wrap=True)
    table.add_column("NAME", min_width=8)
    table.add_column("TRIGGER", min_width=11)
    table.add_column("NEXT RUN (local)", min_width=10)
    table.add_column("STATE", no_wrap=True)
    table.add_column("LAST RUN", no_wrap=True)
    for item in schedules:
        table.add_row(
            item["id"],
            item["name"],
            trigger_summary(item["trigger"]),
            local_short(item["next_run"]),
            status(schedule_state(item)),
            status(item["last_status"]),
        )
    return table


def _fields(rows: list[tuple[str, str | Text | None]]) -> Table:
    grid = Table.grid(padding=(0, 2))
    grid.add_column(style="bold", no_wrap=True)
    grid.add_column()
    for name, value in rows:
        if value is not None and value != "":
            grid.add_row(name, value)
    return grid


def schedule_detail(schedule: dict[str, Any]) -> Table:
    """Every field of one schedule a person acts on, times local."""
    state = status(schedule_state(schedule))
    if schedule["paused_at"]:
        state.append(f" since {local(schedule['paused_at'])}", style="dim")
        if schedule["paused_note"]:
            state.append(f": {schedule['paused_note']}")
    last: Text | None = None
    if schedule["last_status"]:
        last = status(schedule["last_status"])
        last.append(f"  {local(schedule['last_run_at'])}  run {schedule['last_run_id']}")
    trigger = trigger_summary(schedule["trigger"])
    if schedule["trigger"].get("start_at"):
        trigger += f" from {local(schedule['trigger']['start_at'])}"
    runner = schedule["runner"]
    notify = ", ".join(
        f"{channel.get('type')} {channel.get('url') or channel.get('path') or channel.get('to')}"
        for channel in schedule["notify"]
    )
    return _fields(
        [
            ("id", schedule["id"]),
            ("name", schedule["name"]),
            ("owner", schedule["owner"]),
            ("trigger", trigger),
            ("description", schedule["description"]),
            ("state", state),
            ("next run", next_run(schedule)),
            ("last run", last),
            ("last error", schedule["last_error"]),
            ("failures in a row", str(schedule["consecutive_failures"] or "")),
            (
                "runner",
                shlex.join(runner["argv"]) if runner.get("type") == "command" else str(runner),
            ),
            ("notify", notify),
            (
                "policy",
                (
                    f"mode {schedule['mode']}, overlap {schedule['overlap']}, catchup "
                    f"{schedule['catchup']}, timeout {schedule['timeout_seconds']} s, "
                    f"max attempts {schedule['max_attempts']}"
                ),
            ),
            ("created", local(schedule["created_at"])),
            ("updated", local(schedule["updated_at"])),
            ("prompt", schedule["prompt"]),
        ]
    )


def preview_table(preview: dict[str, Any], zone: str | None) -> Table:
    """The due times of a preview, numbered: in ``zone`` (a cron's) when given, and local."""
    table = Table(box=None, header_style="bold", pad_edge=False)
    table.add_column("#", justify="right")
    if zone:
        table.add_column(zone, no_wrap=True)
    table.add_column("local", no_wrap=True)
    for number, due in enumerate(preview["next"], start=1):
        cells = [str(number)]
        if zone:
            cells.append(in_zone(due, zone, weekday=True) or due)
        cells.append(local(due, weekday=True))
        table.add_row(*cells)
    return table


# -- runs ------------------------------------------------------------------------------------


def runs_table(runs: list[dict[str, Any]]) -> Table | Text:
    """One row per run: id, trigger, due, status (with the attempt past the first), start,
    duration, first error line."""
    if not runs:
        return Text("no runs", style="dim")
    table = Table(box=None, header_style="bold", pad_edge=False)
    table.add_column("RUN", no_wrap=True)
    table.add_column("TRIGGER", no_wrap=True)
    table.add_column("DUE (local)", min_width=10)
    table.add_column("STATUS", no_wrap=True)
    table.add_column("STARTED (local)", min_width=10)
    table.add_column("TOOK", min_width=4)
    table.add_column("ERROR", min_width=8)
    for run in runs:
        state = status(run["status"], run.get("reason"))
        if run["attempt"] > 1:
            state.append(f" attempt {run['attempt']}", style="dim")
        table.add_row(
            run["id"],
            run["trigger"],
            local_short(run["due_at"]),
            state,
            local_short(run["started_at"]),
            duration(run["started_at"], run["finished_at"]),
            first_line(run["error"]),
        )
    return table


def run_detail(run: dict[str, Any]) -> Table:
    """One run's fields, times local (output and error are printed apart, whole)."""
    return _fields(
        [
            ("run", run["id"]),
            ("schedule", run["schedule_id"]),
            ("trigger", run["trigger"]),
            ("replay of", run["replay_of"]),
            ("status", status(run["status"], run.get("reason"))),
            ("attempt", str(run["attempt"])),
            ("task", run["task_id"]),
            ("due", local(run["due_at"]) if run["due_at"] else None),
            ("created", local(run["created_at"])),
            ("started", local(run["started_at"])),
            ("finished", local(run["finished_at"])),
            ("took", duration(run["started_at"], run["finished_at"])),
        ]
    )


def deliveries_table(deliveries: list[dict[str, Any]]) -> Table:
    """A run's deliveries: channel index and type, target (masked by the API), status."""
    table = Table(box=None, header_style="bold", pad_edge=False, title_justify="left")
    for name in ("#", "CHANNEL", "TARGET", "STATUS", "ATTEMPTS", "ERROR"):
        table.add_column(name)
    for item in deliveries:
        table.add_row(
            str(item["index"]),
            item["channel"],
            item["target"],
            status(item["status"]),
            str(item["attempts"]),
            first_line(item["error"]),
        )
    return table
