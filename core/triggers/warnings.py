"""What a schedule is worth being told when it is created or changed: warnings, never errors.

``schedule_warnings`` looks at a validated trigger with the schedule's overlap policy and
timeout and returns a list of ``{"code", "message", "field"}``, in this order:

- ``dst_gap``: a local time the cron expression names does not occur on the next days the
  clocks go forward (within two years); the message says what the schedule's ``dst_gap``
  policy does then;
- ``dst_repeat``: the same for a local time that occurs twice when the clocks go back;
- ``overlap_skips``: under overlap ``skip``, ``timeout_seconds`` is longer than the shortest
  time between due times, so a run that takes that long makes the next due time be skipped;
- ``rare_day``: the days the expression names leave out some of the months it names, and it
  fires on fewer than 12 days a year (``0 0 31 * *``: 7; ``0 0 29 2 *``: once in 4 years);
- ``frequent``: an interval shorter than ``FREQUENT_SECONDS`` (60): every due time starts an
  agent and keeps a run row, so ``every_seconds: 1`` is 86,400 of each a day. A cron trigger
  fires at most once a minute, so it never gets this warning.

The DST warnings are left out for an expression that fires in every hour of the day: an hour
less or more on two days a year is what "every N minutes" means. The work is bounded (about a
millisecond): two years of offset probes, at most 50 due times, eight years of calendar.
"""

from __future__ import annotations

import calendar
from datetime import datetime, timedelta
from itertools import islice, pairwise
from typing import Final
from zoneinfo import ZoneInfo

from agentcron.core import triggers
from agentcron.core.triggers.cron import parse_cron
from agentcron.core.triggers.describe import MONTH_TITLES, WEEKDAY_NAMES
from agentcron.core.triggers.transitions import DstEvent, dst_events

DST_LOOKAHEAD: Final = timedelta(days=731)
DST_DATES_SHOWN: Final = 2
OVERLAP_SAMPLE: Final = 50  # due times whose spacing the overlap check looks at
RARE_YEARS: Final = 8  # two leap-year cycles, and every weekday on every date more than once
RARE_DAYS_A_YEAR: Final = 12
# Below this interval a schedule is told how often it runs: once a minute is cron's finest grain,
# and anything faster is more often a typo for minutes than a wish for 1,440+ agents a day.
FREQUENT_SECONDS: Final = 60
_LARGEST_SHIFT: Final = timedelta(hours=2)  # Antarctica/Troll; others shift by 1 h or less
_LONGEST: Final = (31, 29, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31)  # days, leap years included

WarningItem = dict[str, str]


def schedule_warnings(
    trigger: triggers.Trigger, *, overlap: str, timeout_seconds: int, now: datetime
) -> list[WarningItem]:
    """The warnings of a schedule with ``trigger``, ``overlap`` and ``timeout_seconds``, as of
    ``now`` (aware), in the order of the module docstring; ``[]`` when there is nothing to say.
    Never raises for a valid trigger."""
    found: list[WarningItem] = []
    if isinstance(trigger, triggers.CronTrigger):
        found.extend(_dst_warnings(trigger, now))
    if overlap == "skip":
        found.extend(_overlap_warning(trigger, timeout_seconds, now))
    if isinstance(trigger, triggers.CronTrigger):
        found.extend(_rare_day_warning(trigger, now))
    if isinstance(trigger, triggers.IntervalTrigger) and trigger.every_seconds < FREQUENT_SECONDS:
        found.append(_frequent_warning(trigger.every_seconds))
    return found


def _frequent_warning(every: int) -> WarningItem:
    per_day = 86_400 // every
    return {
        "code": "frequent",
        "message": f"every_seconds {every} runs the agent {per_day:,} times a day, each run "
        f"keeping a row; agentcron warns below {FREQUENT_SECONDS} s (did you mean "
        f"{every} minute{'s' if every != 1 else ''}: every_seconds {every * 60}?)",
        "field": "trigger.every_seconds",
    }


# -- daylight saving time ---------------------------------------------------------------------


def _hhmm(wall: datetime) -> str:
    return wall.strftime("%H:%M")


def _times(event: DstEvent) -> str:
    """ "02:30", "02:00, 02:20 and 02:40", or "12 times from 02:00 to 02:55"."""
    walls = event.walls
    if len(walls) <= 3 and not event.more:
        names = [_hhmm(wall) for wall in walls]
        return names[0] if len(names) == 1 else ", ".join(names[:-1]) + " and " + names[-1]
    count = f"{len(walls)}+" if event.more else str(len(walls))
    return f"{count} times from {_hhmm(walls[0])} to {_hhmm(walls[-1])}"


def _dates(events: list[DstEvent]) -> str:
    days = [event.local_date.isoformat() for event in events[:DST_DATES_SHOWN]]
    return " and ".join(days)


def _policy_note(name: str, value: str, given: str | None) -> str:
    return f"{name}: {value}" if given is not None else f"{name}: {value}, the default"


def _dst_warnings(trigger: triggers.CronTrigger, now: datetime) -> list[WarningItem]:
    if len(parse_cron(trigger.cron).hours) == 24:
        return []
    events = dst_events(trigger, now, now + DST_LOOKAHEAD)
    found: list[WarningItem] = []
    gaps = [event for event in events if event.kind == "gap"]
    if gaps:
        first = gaps[0]
        single = len(first.walls) == 1 and not first.more
        subject = _times(first)
        verb = "does not occur" if single else "do not occur"
        change = first.transition
        if trigger.gap_policy == "shift":
            outcome = f"{'it runs' if single else 'they run once'} at {_hhmm(change.wall_after)}"
            outcome += " instead"
        else:
            outcome = f"{'it does' if single else 'they do'} not run that day"
        note = _policy_note("dst_gap", trigger.gap_policy, trigger.dst_gap)
        found.append(
            {
                "code": "dst_gap",
                "message": f"{subject} {verb} in {trigger.timezone} on {_dates(gaps)} (clocks "
                f"go forward from {_hhmm(change.wall_before)} to "
                f"{_hhmm(change.wall_after)}): {outcome} ({note})",
                "field": "trigger.dst_gap",
            }
        )
    repeats = [event for event in events if event.kind == "repeat"]
    if repeats:
        first = repeats[0]
        single = len(first.walls) == 1 and not first.more
        change = first.transition
        runs = "it runs" if single else "they run"
        outcome = {
            "first": f"{runs} once, in the first pass",
            "last": f"{runs} once, in the second pass",
            "both": f"{runs} twice, once in each pass",
        }[trigger.repeat_policy]
        note = _policy_note("dst_repeat", trigger.repeat_policy, trigger.dst_repeat)
        found.append(
            {
                "code": "dst_repeat",
                "message": f"{_times(first)} {'occurs' if single else 'occur'} twice in "
                f"{trigger.timezone} on {_dates(repeats)} (clocks go back from "
                f"{_hhmm(change.wall_before)} to {_hhmm(change.wall_after)}): {outcome} "
                f"({note})",
                "field": "trigger.dst_repeat",
            }
        )
    return found


# -- overlap ----------------------------------------------------------------------------------


def _duration(seconds: int) -> str:
    for unit, size in (("day", 86_400), ("hour", 3_600), ("minute", 60)):
        if seconds >= size and seconds % size == 0:
            count = seconds // size
            return f"{count} {unit}{'s' if count != 1 else ''}"
    return f"{seconds} second{'s' if seconds != 1 else ''}"


def _shortest_spacing(trigger: triggers.Trigger, now: datetime, longer_than: int) -> int | None:
    """The shortest time between two of the next due times, in whole seconds, if one is at
    most ``longer_than`` (the search stops at the first such); otherwise None."""
    if isinstance(trigger, triggers.IntervalTrigger):
        every = trigger.every_seconds
        return every if every < longer_than else None
    if isinstance(trigger, triggers.OneShotTrigger):
        return None
    if longer_than <= _spacing_floor(trigger):
        return None
    sample = islice(triggers.fire_times(trigger, now), OVERLAP_SAMPLE + 1)
    for previous, following in pairwise(sample):
        spacing = int((following - previous).total_seconds())
        if spacing < longer_than:
            return spacing
    return None


def _spacing_floor(trigger: triggers.CronTrigger) -> int:
    """A lower bound, in seconds, of the time between two due times, read off the expression
    alone, so the common case (a few fixed times a day, a timeout under an hour) needs no
    search: the shortest wall-clock distance between two listed times of day (the last to
    the next day's first included), less the largest DST shift in tzdata (2 h). No bound when
    a repeated hour fires twice."""
    if trigger.repeat_policy == "both":
        return 0
    spec = parse_cron(trigger.cron)
    minutes = sorted(hour * 60 + minute for hour in spec.hours for minute in spec.minutes)
    distances = [b - a for a, b in zip(minutes, minutes[1:], strict=False)]
    distances.append(minutes[0] + 1440 - minutes[-1])
    return min(distances) * 60 - int(_LARGEST_SHIFT.total_seconds())


def _overlap_warning(
    trigger: triggers.Trigger, timeout_seconds: int, now: datetime
) -> list[WarningItem]:
    spacing = _shortest_spacing(trigger, now, timeout_seconds)
    if spacing is None:
        return []
    return [
        {
            "code": "overlap_skips",
            "message": f"timeout_seconds ({_duration(timeout_seconds)}) is longer than the "
            f"{_duration(spacing)} between due times: under overlap skip, a run that takes "
            "longer than that makes the next due time be skipped",
            "field": "timeout_seconds",
        }
    ]


# -- days that rarely occur -------------------------------------------------------------------


def _join(words: list[str], conjunction: str = "and") -> str:
    return words[0] if len(words) == 1 else f"{', '.join(words[:-1])} {conjunction} {words[-1]}"


def _rare_day_warning(trigger: triggers.CronTrigger, now: datetime) -> list[WarningItem]:
    spec = parse_cron(trigger.cron)
    all_weekdays = len(spec.weekdays) == 7
    if spec.day_or or len(spec.days) == 31 or (all_weekdays and min(spec.days) <= 28):
        # Every listed month has a listed day: OR always has the weekdays, and each month has
        # days 1-28 and every weekday.
        return []
    first_year = now.astimezone(ZoneInfo(trigger.timezone)).year
    days = months_hit = 0
    for month in spec.months:
        for year in range(first_year, first_year + RARE_YEARS):
            length = calendar.monthrange(year, month)[1]
            hits = sum(
                1
                for day in spec.days
                if day <= length and (calendar.weekday(year, month, day) + 1) % 7 in spec.weekdays
            )
            days += hits
            months_hit += hits > 0
    per_year = days / RARE_YEARS
    if months_hit == len(spec.months) * RARE_YEARS or per_year >= RARE_DAYS_A_YEAR:
        return []
    if per_year >= 1:
        rounded = round(per_year)
        about = "" if rounded == per_year else "about "
        how_often = (
            f"fires {about}once a year"
            if rounded == 1
            else f"fires on {about}{rounded} days a year"
        )
    elif per_year > 0:
        how_often = f"fires about once every {round(1 / per_year)} years"
    else:
        how_often = f"does not fire in the next {RARE_YEARS} years"
    reasons: list[str] = []
    listed = sorted(spec.days)
    numbers = _join([str(day) for day in listed], "or")
    # Listed months too short for every listed day (February counts its 29th).
    never = [month for month in sorted(spec.months) if min(listed) > _LONGEST[month - 1]]
    if never:
        names = [MONTH_TITLES[month - 1] for month in never]
        reasons.append(f"day {numbers} does not occur in {_join(names, 'or')}")
    if 2 in spec.months and 2 not in never and min(listed) == 29:
        reasons.append("February 29 occurs only in leap years")
    if not all_weekdays:
        weekdays = [WEEKDAY_NAMES[day] for day in sorted(spec.weekdays, key=lambda d: (d + 6) % 7)]
        reasons.append(f"it runs only when day {numbers} falls on {_join(weekdays, 'or')}")
    upcoming = triggers.next_fire(trigger, now)
    after = (
        f" (next: {triggers.in_zone(trigger, upcoming).date().isoformat()})"
        if upcoming is not None
        else ""
    )
    because = f": {'; '.join(reasons)}" if reasons else ""
    return [
        {
            "code": "rare_day",
            "message": f"{trigger.cron!r} {how_often}{because}{after}",
            "field": "trigger.cron",
        }
    ]
