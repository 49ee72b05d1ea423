"""Rendering: the Jinja2 environment (autoescaping every template) and its filters.

Times are shown in the schedule's own zone (a cron trigger's zone, else UTC) inside a
``<time datetime="...UTC...">`` element; the page's script adds the viewer's local time.
"""

from __future__ import annotations

import json
import shlex
from collections.abc import Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from zoneinfo import available_timezones

import jinja2
from fastapi import Request
from fastapi.responses import HTMLResponse
from markupsafe import Markup

from agentcron.core.expectations import describe
from agentcron.core.triggers import CronTrigger, IntervalTrigger, clock_time, trigger_from_dict

TEMPLATES = Path(__file__).with_name("templates")
OUTPUT_PREVIEW_CHARS = 2000
# A pause note in the list is cut here (the whole note is its title, and on the schedule's page):
# a breaker's note quotes the last error, and would make its row many lines tall.
NOTE_CHARS = 80
FINISHED = frozenset({"succeeded", "failed", "skipped", "timed_out", "cancelled"})

env = jinja2.Environment(
    loader=jinja2.FileSystemLoader(TEMPLATES),
    autoescape=True,
    undefined=jinja2.StrictUndefined,
    trim_blocks=True,
    lstrip_blocks=True,
)


def zone_of(trigger: dict[str, Any]) -> str:
    """The zone a schedule's times read in: its cron zone, else UTC."""
    zone = trigger.get("timezone")
    return zone if isinstance(zone, str) and zone else "UTC"


def when(moment: datetime | None, zone: str = "UTC", viewer_time: bool = True) -> Markup:
    """``<time>`` for ``moment``: UTC in the attribute, the text in ``zone``; a dash for None.

    ``viewer_time=False`` asks the page script not to add the viewer's time (where space is short
    and the time is history, not a plan)."""
    if moment is None:
        return Markup('<span class="muted">—</span>')
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    text = clock_time(moment, zone)
    iso = moment.astimezone(UTC).isoformat().replace("+00:00", "Z")
    extra = Markup("") if viewer_time else Markup(' data-local="no"')
    return Markup('<time datetime="{}" data-zone="{}"{}>{}</time>').format(iso, zone, extra, text)


def duration(started: datetime | None, finished: datetime | None) -> str:
    """How long a run took, in words a person reads at a glance (``16 ms``, ``1.2 s``,
    ``3 min 4 s``): under a second in milliseconds, where most quick agents end."""
    if started is None or finished is None:
        return ""
    seconds = max((finished - started).total_seconds(), 0.0)
    if seconds < 1:
        return f"{round(seconds * 1000)} ms" if seconds < 0.9995 else "1.0 s"
    if seconds < 60:
        return f"{seconds:.1f} s"
    minutes, rest = divmod(int(seconds), 60)
    if minutes < 60:
        return f"{minutes} min {rest} s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours} h {minutes} min"


STAGES = ("claimed", "started", "output", "finished", "delivered")


def run_stages(run: Mapping[str, Any]) -> list[tuple[str, datetime, str]]:
    """The stages a run reached (``claimed_at``, ``started_at``, ``output_at``,
    ``finished_at``, ``delivered_at``), each with its time and how long after the run's due
    time (or, for a queued run, its queueing) it came: ``("output", <at>, "+2.1 s")``."""
    origin = run.get("due_at") or run["created_at"]
    reached = [(name, run.get(f"{name}_at")) for name in STAGES]
    return [(name, at, f"+{duration(origin, at)}") for name, at in reached if at is not None]


def excerpt(text: str | None, limit: int = OUTPUT_PREVIEW_CHARS) -> str:
    """The tail of an output or error: runs keep the tail because the outcome is usually last."""
    if not text:
        return ""
    return text if len(text) <= limit else "…" + text[-limit:]


def last_line(text: str | None, limit: int = 90) -> str:
    """The last non-blank line of an output, shortened: the one-line summary of a run."""
    lines = [line.strip() for line in (text or "").splitlines() if line.strip()]
    if not lines:
        return ""
    line = lines[-1]
    return line if len(line) <= limit else line[: limit - 1] + "…"


def as_json(value: Any, indent: int | None = None) -> str:
    """A run's result as JSON text (escaped by the template like any text): one line, or
    indented by ``indent``."""
    return json.dumps(value, indent=indent, ensure_ascii=False)


def badge(status: str | None) -> Markup:
    """A status badge; its class colours it (see dashboard.css)."""
    if not status:
        return Markup('<span class="badge badge-none">never run</span>')
    label = status.replace("_", " ")
    return Markup('<span class="badge badge-{}">{}</span>').format(status, label)


def state_pill(schedule: dict[str, Any]) -> Markup:
    """``paused``, ``ended`` (enabled, but its timetable runs nothing more: a fired one-shot,
    every due time max runs allows taken, past its end) or ``enabled``, as a pill."""
    if not schedule["enabled"]:
        return Markup('<span class="pill off">paused</span>')
    if schedule["next_run"] is None:
        return Markup('<span class="pill ended">ended</span>')
    return Markup('<span class="pill on">enabled</span>')


def attrs(**pairs: Any) -> Markup:
    """HTML attributes, escaped; a False or None value leaves its attribute out."""
    parts = []
    for name, value in pairs.items():
        if value is None or value is False:
            continue
        key = name.rstrip("_").replace("_", "-")
        parts.append(
            Markup(" {}").format(key) if value is True else Markup(' {}="{}"').format(key, value)
        )
    return Markup("").join(parts)


_GAP_WORDS = {"shift": "runs at the end of the gap", "skip": "does not run that day"}
_REPEAT_WORDS = {
    "first": "runs in the first pass",
    "last": "runs in the second pass",
    "both": "runs in both passes",
}


def trigger_notes(trigger: dict[str, Any], zone: str) -> list[Markup]:
    """What a trigger says beyond its description, in words: its bounds and the DST policies
    it sets (a policy left to its default is not repeated here)."""
    parsed = trigger_from_dict(trigger)
    notes: list[Markup] = []
    if isinstance(parsed, IntervalTrigger):
        notes.append(Markup("counted from {}").format(when(parsed.start_at, zone)))
    if isinstance(parsed, CronTrigger):
        if parsed.start_at is not None:
            notes.append(Markup("not before {}").format(when(parsed.start_at, zone)))
        if parsed.dst_gap is not None:
            notes.append(Markup("a time the clocks skip {}").format(_GAP_WORDS[parsed.dst_gap]))
        if parsed.dst_repeat is not None:
            words = _REPEAT_WORDS[parsed.dst_repeat]
            notes.append(Markup("a time the clocks repeat {}").format(words))
    end_at = getattr(parsed, "end_at", None)
    if end_at is not None:
        notes.append(Markup("not after {}").format(when(end_at, zone)))
    return notes


def shell_words(argv: list[str]) -> str:
    """An argv as a POSIX shell would need it typed, as the CLI shows it: ``sh -c 'echo $(cat)'``
    (joined with spaces, the quoting that tells the words apart would be lost)."""
    return shlex.join(str(word) for word in argv)


def breakable(text: object) -> Markup:
    """``text`` escaped, with a line break allowed after each ``/``: a zone
    (``America/Argentina/Buenos_Aires``), a path or a URL then wraps at its slashes in a narrow
    column, where the browser would otherwise cut it mid-word or widen the column past the
    screen. Copying the text copies it unchanged."""
    return Markup(str(Markup.escape(str(text))).replace("/", "/<wbr>"))


env.filters.update(
    when=when,
    excerpt=excerpt,
    badge=badge,
    last_line=last_line,
    shell_words=shell_words,
    as_json=as_json,
    breakable=breakable,
    expectations=describe,
)
env.globals.update(
    duration=duration,
    state_pill=state_pill,
    attrs=attrs,
    zone_of=zone_of,
    trigger_notes=trigger_notes,
    run_stages=run_stages,
    FINISHED=FINISHED,
    NOTE_CHARS=NOTE_CHARS,
)
ZONES = sorted(available_timezones())


def render(request: Request, name: str, status_code: int = 200, **context: Any) -> HTMLResponse:
    """The template ``name`` as a response; every template sees ``request`` and ``viewer``."""
    context.setdefault("viewer", None)
    context.setdefault("notice", None)
    html = env.get_template(name).render(request=request, **context)
    return HTMLResponse(html, status_code=status_code, headers=NO_STORE)


# Pages show live state and carry the viewer's data: never cached, never framed.
NO_STORE = {
    "Cache-Control": "no-store",
    "X-Frame-Options": "DENY",
    "Content-Security-Policy": (
        "default-src 'self'; img-src 'self' data:; style-src 'self'; script-src 'self'; "
        "frame-ancestors 'none'; form-action 'self'; base-uri 'none'"
    ),
    "Referrer-Policy": "same-origin",
}
