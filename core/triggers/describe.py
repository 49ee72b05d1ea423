"""English descriptions of triggers, e.g. "At 08:00, Monday through Friday, UTC"."""

from __future__ import annotations

import re
from datetime import datetime
from typing import Final
from zoneinfo import ZoneInfo

from agentcron.core.triggers.cron import Cron, parse_cron
from agentcron.core.triggers.kinds import CronTrigger, IntervalTrigger, Trigger

WEEKDAY_NAMES: Final = (
    "Sunday",
    "Monday",
    "Tuesday",
    "Wednesday",
    "Thursday",
    "Friday",
    "Saturday",
)
# Spelled out rather than taken from ``calendar``, whose names follow the process locale.
MONTH_TITLES: Final = (
    "January",
    "February",
    "March",
    "April",
    "May",
    "June",
    "July",
    "August",
    "September",
    "October",
    "November",
    "December",
)
_STEP = re.compile(r"^\*/([0-9]+)$")


def _join(words: list[str]) -> str:
    if len(words) <= 1:
        return "".join(words)
    return ", ".join(words[:-1]) + " and " + words[-1]


def _cyclic_run(values: frozenset[int], size: int, base: int) -> tuple[int, int] | None:
    """``(first, last)`` if ``values`` is one contiguous run (wrapping) of 3+ values."""
    if not 3 <= len(values) < size:
        return None
    starts = [v for v in values if (v - base - 1) % size + base not in values]
    if len(starts) != 1:
        return None
    first = starts[0]
    return first, (first - base + len(values) - 1) % size + base


def _numbers(values: frozenset[int]) -> str:
    """``1, 15 and 28`` or ``1 through 7`` for a day-of-month set."""
    ordered = sorted(values)
    if len(ordered) >= 3 and ordered[-1] - ordered[0] == len(ordered) - 1:
        return f"{ordered[0]} through {ordered[-1]}"
    return _join([str(v) for v in ordered])


def _weekday_phrase(weekdays: frozenset[int], conjunction: str = "and") -> str:
    """ "Monday through Friday" or "on Saturday and Sunday" ("or" when narrowing days)."""
    run = _cyclic_run(weekdays, 7, 0)
    if run is not None:
        return f"{WEEKDAY_NAMES[run[0]]} through {WEEKDAY_NAMES[run[1]]}"
    # Read the week Monday first, so 0,6 reads as a weekend, not "Sunday and Saturday".
    names = [WEEKDAY_NAMES[d] for d in sorted(weekdays, key=lambda d: (d + 6) % 7)]
    if len(names) == 1:
        return f"on {names[0]}"
    return f"on {', '.join(names[:-1])} {conjunction} {names[-1]}"


def _month_phrase(months: frozenset[int]) -> str:
    run = _cyclic_run(months, 12, 1)
    if run is not None:
        return f"{MONTH_TITLES[run[0] - 1]} through {MONTH_TITLES[run[1] - 1]}"
    return "in " + _join([MONTH_TITLES[m - 1] for m in sorted(months)])


def _progression(values: list[int]) -> int | None:
    """The common difference if ``values`` (sorted, 2+) are evenly spaced, else ``None``."""
    steps = {b - a for a, b in zip(values, values[1:], strict=False)}
    return steps.pop() if len(steps) == 1 else None


def _every(count: int, unit: str) -> str:
    return f"Every {unit}" if count == 1 else f"Every {count} {unit}s"


def _time_phrase(spec: Cron) -> str | None:
    """The time-of-day part, or ``None`` for shapes that would not read well."""
    minute, hour = spec.raw[0], spec.raw[1]
    hours, minutes = sorted(spec.hours), sorted(spec.minutes)
    if not spec.minute_star and len(minutes) == 1:
        (m,) = minutes
        if not spec.hour_star and len(hours) <= 6:
            return "At " + _join([f"{h:02d}:{m:02d}" for h in hours])
        if hour == "*":
            return "Every hour" if m == 0 else f"Every hour at minute {m}"
        step = _progression(hours) if len(hours) > 1 else None
        if step is None:
            return None
        # ``*/n`` hours (a wildcard job) and ``0-23/n`` (fixed-time) read the same: the
        # difference only shows on DST days.
        return f"{_every(step, 'hour')} from {hours[0]:02d}:{m:02d} to {hours[-1]:02d}:{m:02d}"
    if not spec.minute_star and hour == "*" and len(minutes) <= 6:
        return f"Every hour at minutes {_join([str(m) for m in minutes])}"
    if not spec.minute_star and not spec.hour_star and len(hours) * len(minutes) <= 6:
        return "At " + _join([f"{h:02d}:{m:02d}" for h in hours for m in minutes])
    step_match = _STEP.match(minute)
    if minute == "*":
        every = "Every minute"
    elif step_match and 60 % int(step_match.group(1)) == 0:
        every = _every(int(step_match.group(1)), "minute")
    else:
        return None
    if hour == "*":
        return every
    if not spec.hour_star and hours[-1] - hours[0] == len(hours) - 1:
        return f"{every}, between {hours[0]:02d}:00 and {hours[-1]:02d}:59"
    return None


def _day_phrase(spec: Cron) -> str | None:
    """The day part ("" when every day matches), or ``None`` when it would not read well."""
    all_days = len(spec.days) == 31
    all_weekdays = len(spec.weekdays) == 7
    if spec.day_or and (all_days or all_weekdays):
        return ""
    if not all_days and len(spec.days) > 7 and _cyclic_run(spec.days, 31, 1) is None:
        return None  # e.g. */2: a long list of numbers helps nobody
    plural = "days" if len(spec.days) > 1 else "day"
    day_part = f"on {plural} {_numbers(spec.days)} of the month"
    if spec.day_or:
        return f"{day_part} or {_weekday_phrase(spec.weekdays)}"
    if all_days:
        return "" if all_weekdays else _weekday_phrase(spec.weekdays)
    if all_weekdays:
        return day_part
    return f"{day_part} that fall {_weekday_phrase(spec.weekdays, 'or')}"


_GAP_PHRASES: Final = {
    "shift": "times in a DST gap run when it ends",
    "skip": "times in a DST gap are skipped",
}
_REPEAT_PHRASES: Final = {
    "first": "a repeated hour runs once, first pass",
    "last": "a repeated hour runs once, second pass",
    "both": "a repeated hour runs twice",
}


def _dst_phrase(trigger: CronTrigger) -> str:
    """ "; times in a DST gap are skipped" for each policy that differs from the job kind's
    default, so the common case reads as before."""
    default = CronTrigger(trigger.cron, trigger.timezone)
    phrases = []
    if trigger.gap_policy != default.gap_policy:
        phrases.append(_GAP_PHRASES[trigger.gap_policy])
    if trigger.repeat_policy != default.repeat_policy:
        phrases.append(_REPEAT_PHRASES[trigger.repeat_policy])
    return "".join(f"; {phrase}" for phrase in phrases)


def _describe_cron(trigger: CronTrigger) -> str:
    return _describe_timetable(trigger) + _dst_phrase(trigger)


def _describe_timetable(trigger: CronTrigger) -> str:
    spec = parse_cron(trigger.cron)
    time_part = _time_phrase(spec)
    day_part = _day_phrase(spec)
    if time_part is None or day_part is None:
        return f"Cron {trigger.cron!r} ({trigger.timezone})"
    pieces = [time_part]
    months = spec.months
    single_date = len(months) == 1 and len(spec.days) == 1 and len(spec.weekdays) == 7
    if single_date and not spec.dom_star:
        (month,), (day,) = months, spec.days
        pieces.append(f"on {MONTH_TITLES[month - 1]} {day}")
    else:
        if day_part:
            pieces.append(day_part)
        if len(months) < 12:
            pieces.append(_month_phrase(months))
    pieces.append(trigger.timezone)
    return ", ".join(pieces)


def _describe_interval(seconds: int) -> str:
    for unit, size in (("day", 86_400), ("hour", 3_600), ("minute", 60)):
        if seconds % size == 0:
            count = seconds // size
            return f"Every {unit}" if count == 1 else f"Every {count} {unit}s"
    return "Every second" if seconds == 1 else f"Every {seconds} seconds"


def describe(trigger: Trigger) -> str:
    """A short English description for people, e.g. "At 08:00, Monday through Friday, UTC".

    Common cron shapes (fixed times, every N minutes/hours, weekday ranges and lists, days of
    the month, months, @macros) read naturally, followed by the zone; rarer shapes fall back to
    ``Cron '<expr>' (<zone>)``. A DST policy other than the job kind's default is appended
    ("At 02:30, America/New_York; times in a DST gap are skipped"). Intervals read
    "Every 90 seconds", one-shots "Once at 2026-12-01 09:00:00 UTC". Bounds follow
    (", from ..., until ..."). Every time reads as the schedule's pages show times: on the
    trigger's own clock (a cron trigger's zone, else UTC), labelled with its offset
    (``clock_time``). Raises ``InvalidSchedule`` for an invalid cron expression.
    """
    if isinstance(trigger, CronTrigger):
        zone = trigger.timezone
        return _describe_cron(trigger) + _bounds(trigger.start_at, trigger.end_at, zone)
    if isinstance(trigger, IntervalTrigger):
        return _describe_interval(trigger.every_seconds) + _bounds(None, trigger.end_at, "UTC")
    return f"Once at {clock_time(trigger.at, 'UTC')}"


def _bounds(start_at: datetime | None, end_at: datetime | None, zone: str) -> str:
    """ ", from <time> until <time>" for the bounds that are set, on ``zone``'s clock."""
    text = ""
    if start_at is not None:
        text += f", from {clock_time(start_at, zone)}"
    if end_at is not None:
        text += f", until {clock_time(end_at, zone)}"
    return text


def clock_time(moment: datetime, zone: str) -> str:
    """An aware ``moment`` as ``zone``'s clock shows it, labelled with its offset:
    ``2026-12-01 09:00:00 +08:00``, ``2026-12-01 01:00:00 UTC``."""
    there = moment.astimezone(ZoneInfo(zone))
    return there.strftime("%Y-%m-%d %H:%M:%S ") + offset_label(there)


def offset_label(there: datetime) -> str:
    """``UTC``, or the numeric offset (``+08:00``, ``+05:45``) of an aware local time.

    Not the zone's abbreviation: "CST" is China's and the US's, and many zones have none
    (tzdata writes "+04"); an offset reads the same everywhere."""
    offset = there.utcoffset()
    if offset is None or there.tzname() == "UTC":
        return "UTC"
    minutes = int(offset.total_seconds() // 60)
    sign = "-" if minutes < 0 else "+"
    hours, rest = divmod(abs(minutes), 60)
    return f"{sign}{hours:02d}:{rest:02d}"
