"""Cron field parsing and validation: what a cron expression means (docs/design.md, promise 1).

``parse_cron`` turns an expression (5 fields or an ``@macro``) into a ``Cron``: the explicit
value set of each field plus what the day rule and the DST rules need. Everything Debian cron
does not accept is rejected here with ``InvalidSchedule`` on ``trigger.cron``, in words a user
can act on. The meaning is summarised in the :mod:`core.triggers` docstring.
``Cron.next_wall`` answers the one question the DST search (:mod:`core.triggers.search`) asks
of an expression: which naive wall-clock minute matches next.
"""

from __future__ import annotations

import functools
import re
from bisect import bisect_left
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Final

from agentcron.core.errors import InvalidSchedule

CRON_FIELD = "trigger.cron"

_MACROS: Final[dict[str, str]] = {
    "@yearly": "0 0 1 1 *",
    "@annually": "0 0 1 1 *",
    "@monthly": "0 0 1 * *",
    "@weekly": "0 0 * * 0",
    "@daily": "0 0 * * *",
    "@midnight": "0 0 * * *",
    "@hourly": "0 * * * *",
}

# Month names (index + 1 = month number) and weekday names (index = cron weekday number).
_MONTH_NAMES: Final = (
    "jan",
    "feb",
    "mar",
    "apr",
    "may",
    "jun",
    "jul",
    "aug",
    "sep",
    "oct",
    "nov",
    "dec",
)
_DOW_NAMES: Final = ("sun", "mon", "tue", "wed", "thu", "fri", "sat")


@dataclass(frozen=True)
class _FieldSpec:
    name: str  # used in messages: "minute 60 is out of range 0-59"
    low: int
    high: int
    names: Mapping[str, int]


_FIELDS: Final = (
    _FieldSpec("minute", 0, 59, {}),
    _FieldSpec("hour", 0, 23, {}),
    _FieldSpec("day of month", 1, 31, {}),
    _FieldSpec("month", 1, 12, {n: i + 1 for i, n in enumerate(_MONTH_NAMES)}),
    _FieldSpec("day of week", 0, 7, {n: i for i, n in enumerate(_DOW_NAMES)}),
)

# Quartz / Jenkins / croniter extensions that Debian cron does not have.
_UNSUPPORTED_CHARS: Final = re.compile(r"[LWHR#?]", re.IGNORECASE)
_VALUE = re.compile(r"^(?:[0-9]+|[A-Za-z]+)$")
_NUMBER = re.compile(r"^[0-9]+$")  # str.isdigit() would also take "²", which int() refuses
_MINUTE: Final = timedelta(minutes=1)
_HOUR: Final = timedelta(hours=1)
_DAY: Final = timedelta(days=1)
# Days in each month, Feb 29 included: that date exists (in leap years).
_MAX_DAYS: Final = (31, 29, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31)


@dataclass(frozen=True)
class Cron:
    """A parsed cron expression: explicit value sets plus what the DST and day rules need."""

    minutes: frozenset[int]
    hours: frozenset[int]
    days: frozenset[int]
    months: frozenset[int]
    weekdays: frozenset[int]  # 0 = Sunday .. 6 = Saturday (7 already folded into 0)
    dom_star: bool  # day-of-month field starts with "*"
    dow_star: bool  # day-of-week field starts with "*"
    minute_star: bool
    hour_star: bool
    raw: tuple[str, str, str, str, str]  # the five fields after macro expansion

    @property
    def day_or(self) -> bool:
        """Debian's day rule: OR when both day fields are restricted, else AND."""
        return not (self.dom_star or self.dow_star)

    @property
    def wildcard(self) -> bool:
        """A wildcard job (DST rules): the minute or the hour field starts with ``*``."""
        return self.minute_star or self.hour_star

    @functools.cached_property
    def _sorted(self) -> tuple[tuple[int, ...], tuple[int, ...]]:
        """The minutes and the hours in order, for ``next_wall``'s look-ups."""
        return tuple(sorted(self.minutes)), tuple(sorted(self.hours))

    def matches_day(self, wall: datetime) -> bool:
        """Whether the day of ``wall`` is one of the expression's, by the day rule."""
        in_days, in_weekdays = wall.day in self.days, wall.isoweekday() % 7 in self.weekdays
        return (in_days or in_weekdays) if self.day_or else (in_days and in_weekdays)

    def next_wall(self, after: datetime, horizon: datetime) -> datetime | None:
        """The first naive wall-clock minute strictly after ``after`` (naive) that the
        expression matches, or None if there is none up to ``horizon``.

        It steps by the largest unit that does not match (a month, a day, then to the next
        listed hour and minute), so a lookup costs a few microseconds; a general-purpose cron
        library, asked the same question, cost 70 to 200 us.
        """
        minutes, hours = self._sorted
        wall = after.replace(second=0, microsecond=0) + _MINUTE
        while wall <= horizon:
            if wall.month not in self.months:
                wall = (
                    datetime(wall.year + 1, 1, 1)
                    if wall.month == 12
                    else datetime(wall.year, wall.month + 1, 1)
                )
            elif not self.matches_day(wall):
                wall = datetime(wall.year, wall.month, wall.day) + _DAY
            elif wall.hour not in self.hours:
                later = bisect_left(hours, wall.hour)
                if later == len(hours):
                    wall = datetime(wall.year, wall.month, wall.day) + _DAY
                else:
                    wall = wall.replace(hour=hours[later], minute=0)
            elif wall.minute not in self.minutes:
                later = bisect_left(minutes, wall.minute)
                if later == len(minutes):
                    wall = wall.replace(minute=0) + _HOUR
                else:
                    return wall.replace(minute=minutes[later])
            else:
                return wall
        return None


def _reject(message: str) -> InvalidSchedule:
    return InvalidSchedule(message, field=CRON_FIELD)


def _parse_value(text: str, spec: _FieldSpec, item: str) -> int:
    """One number or 3-letter name of a field, range-checked."""
    if not _VALUE.match(text):
        if _UNSUPPORTED_CHARS.search(text):
            raise _unsupported(spec, item)
        raise _reject(f"{spec.name} value {text!r} in {item!r} is not a number")
    if _NUMBER.match(text):
        value = int(text)
        if not spec.low <= value <= spec.high:
            raise _reject(f"{spec.name} {value} is out of range {spec.low}-{spec.high}")
        return value
    name = text.lower()
    if name in spec.names:
        return spec.names[name]
    if name in ("l", "w", "lw", "h", "r"):
        raise _unsupported(spec, item)
    if spec.names:
        allowed = ", ".join(n.upper() for n in spec.names)
        raise _reject(f"{spec.name} name {text!r} is unknown (use one of {allowed})")
    raise _reject(f"{spec.name} {text!r} is not a number (names only fit month and weekday)")


def _unsupported(spec: _FieldSpec, item: str) -> InvalidSchedule:
    return _reject(
        f"{spec.name} {item!r} uses a special character (L W # ? H R) that Debian cron "
        "does not support; write the values out explicitly"
    )


def _expand_range(start: int, stop: int, step: int, spec: _FieldSpec) -> list[int]:
    """Values of ``start-stop/step``; a reversed range wraps around the end of the cycle."""
    if start <= stop:
        return list(range(start, stop + 1, step))
    low, high = spec.low, spec.high
    if spec.name == "day of week":
        # The weekday cycle is 0..6; 7 is only another spelling of Sunday.
        start, stop, high = start % 7, stop % 7, 6
        if start <= stop:  # e.g. 7-2 is SUN-TUE, not a wrap
            return list(range(start, stop + 1, step))
    cycle = list(range(start, high + 1)) + list(range(low, stop + 1))
    return cycle[::step]


def _parse_field(text: str, spec: _FieldSpec) -> frozenset[int]:
    """The explicit set of values a field matches (weekday 7 folded into 0)."""
    values: set[int] = set()
    for item in text.split(","):
        if not item:
            raise _reject(f"{spec.name} field {text!r} has an empty list item")
        base, slash, step_text = item.partition("/")
        step = 1
        if slash:
            if not _NUMBER.match(step_text):
                if _UNSUPPORTED_CHARS.search(step_text):
                    raise _unsupported(spec, item)
                raise _reject(f"{spec.name} step {step_text!r} in {item!r} is not a number")
            step = int(step_text)
            if step == 0:
                raise _reject(f"{spec.name} step 0 in {item!r} is not allowed (use 1 or more)")
        if base == "*":
            start, stop = spec.low, spec.high
        elif "-" in base:
            first, _, last = base.partition("-")
            if "-" in last:
                raise _reject(f"{spec.name} {item!r} is not a range (write a-b)")
            start, stop = _parse_value(first, spec, item), _parse_value(last, spec, item)
        else:
            start = stop = _parse_value(base, spec, item)
            if slash:
                high = spec.high
                raise _reject(
                    f"{spec.name} {item!r}: a step needs a range or '*'; "
                    f"write '{base}-{high}/{step_text}' (or '*/{step_text}')"
                )
        values.update(_expand_range(start, stop, step, spec))
    if spec.name == "day of week" and 7 in values:
        values.discard(7)
        values.add(0)
    return frozenset(values)


@functools.lru_cache(maxsize=1024)
def parse_cron(cron: str) -> Cron:
    """Parse and fully validate a cron expression, or raise ``InvalidSchedule``."""
    text = cron.strip()
    if not text:
        raise _reject("cron expression is empty")
    if text.startswith("@"):
        macro = text.lower()
        if macro == "@reboot":
            raise _reject("@reboot is not supported: schedules fire on a timetable, not at start")
        if macro not in _MACROS:
            known = " ".join(_MACROS)
            raise _reject(f"unknown cron macro {text!r}; use one of {known} or 5 fields")
        text = _MACROS[macro]
    parts = text.split()
    if len(parts) != 5:
        if len(parts) in (6, 7):
            raise _reject(
                f"cron has 5 fields: minute hour day month weekday; got {len(parts)} "
                "(seconds and years are not supported)"
            )
        raise _reject(
            f"cron has 5 fields: minute hour day month weekday; got {len(parts)} in {text!r}"
        )
    sets = [_parse_field(part, spec) for part, spec in zip(parts, _FIELDS, strict=True)]
    parsed = Cron(
        minutes=sets[0],
        hours=sets[1],
        days=sets[2],
        months=sets[3],
        weekdays=sets[4],
        dom_star=parts[2].startswith("*"),
        dow_star=parts[4].startswith("*"),
        minute_star=parts[0].startswith("*"),
        hour_star=parts[1].startswith("*"),
        raw=(parts[0], parts[1], parts[2], parts[3], parts[4]),
    )
    # Under AND the listed days must exist in a listed month (every date falls on every
    # weekday sooner or later); under OR the weekday side always matches something.
    if not parsed.day_or and not any(
        day <= _MAX_DAYS[month - 1] for month in parsed.months for day in parsed.days
    ):
        raise _reject(f"cron {cron.strip()!r} never fires: no listed month has a listed day")
    return parsed


def is_wildcard_job(cron: str) -> bool:
    """Whether ``cron`` is a wildcard job for the DST rules.

    True when its minute or hour field begins with ``*`` (``@hourly`` included); every other
    job is fixed-time: ``0 */2 * * *`` is wildcard, ``0 0-23/2 * * *`` is fixed-time.
    Raises ``InvalidSchedule`` (field ``trigger.cron``) for an invalid expression.
    """
    return parse_cron(cron).wildcard
