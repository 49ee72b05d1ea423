"""Due-time arithmetic: cron, interval and one-shot triggers, time zones, DST, validation.

Everything here is a pure function of its arguments: the current time is always passed in
(``now`` / ``after``), never read. This is the only module that imports croniter, and croniter
is only ever asked one question: "which naive wall-clock minutes match this (already validated
and normalised) expression?". The meaning of cron (DESIGN.md contract point 1) is decided by
our own parser, and the DST rules (contract point 2) are applied here with :mod:`zoneinfo`.

Cron meaning (Debian / Vixie cron):

* 5 fields ``minute hour day-of-month month day-of-week`` or an ``@macro``;
* lists, ranges, ``*/n`` and ``a-b/n`` steps, 3-letter month and weekday names;
* day-of-week 0 and 7 are Sunday; ``a-a`` is the single value ``a``; a reversed range
  (``FRI-MON``, hour ``22-2``) wraps around the end of its cycle;
* day-of-month and day-of-week both restricted: a day matches if either matches; if either
  field starts with ``*``: both must match.

DST rules, given the naive local times ``L`` the expression matches in the trigger's zone:

* ``L`` occurs once: fire at that instant;
* ``L`` occurs twice (autumn fold): a fixed-time job fires at the first occurrence only, a
  wildcard job (minute or hour field starting with ``*``) at both;
* ``L`` does not occur (spring gap): a fixed-time job fires at the first instant after the
  gap, a wildcard job does not fire for it;
* the fire times are a set of instants: several skipped times collapse into one.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, Final
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from croniter import CroniterBadDateError, croniter

from core.errors import InvalidSchedule

__all__ = [
    "MAX_INTERVAL_SECONDS",
    "CronTrigger",
    "IntervalTrigger",
    "OneShotTrigger",
    "Trigger",
    "describe",
    "is_wildcard_job",
    "next_fire",
    "parse_trigger",
    "preview",
    "trigger_from_dict",
    "trigger_to_dict",
]

MAX_INTERVAL_SECONDS: Final = 31_536_000


@dataclass(frozen=True)
class CronTrigger:
    """A validated cron expression (as the user wrote it, stripped) in an IANA zone."""

    cron: str
    timezone: str = "UTC"


@dataclass(frozen=True)
class IntervalTrigger:
    """Fires at ``start_at + k * every_seconds`` (k >= 0) in real (UTC) time."""

    every_seconds: int
    start_at: datetime


@dataclass(frozen=True)
class OneShotTrigger:
    """Fires once, at ``at`` (aware, UTC)."""

    at: datetime


Trigger = CronTrigger | IntervalTrigger | OneShotTrigger


# --------------------------------------------------------------------------------------------
# Cron parsing
# --------------------------------------------------------------------------------------------

_CRON_FIELD = "trigger.cron"

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
# Days in each month, Feb 29 included: that date exists (in leap years).
_MAX_DAYS: Final = (31, 29, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31)


@dataclass(frozen=True)
class _Cron:
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
    def normalised(self) -> str:
        """The expression croniter is given: explicit comma lists, never the user's text.

        croniter's own reading of ranges (``5-5``), of 7 and of the day rule must never decide
        anything, so every field is spelled out. The day rule is chosen by the ``day_or``
        argument; under OR, a full day field makes every day match, which is spelled ``* *``
        because croniter would otherwise collapse a full list to ``*`` and AND the fields.
        """
        days = _spell(self.days, 1, 31)
        weekdays = _spell(self.weekdays, 0, 6)
        if self.day_or and (days == "*" or weekdays == "*"):
            days = weekdays = "*"
        return " ".join(
            (
                _spell(self.minutes, 0, 59),
                _spell(self.hours, 0, 23),
                days,
                _spell(self.months, 1, 12),
                weekdays,
            )
        )


def _spell(values: frozenset[int], low: int, high: int) -> str:
    if len(values) == high - low + 1:
        return "*"
    return ",".join(str(v) for v in sorted(values))


def _reject(message: str) -> InvalidSchedule:
    return InvalidSchedule(message, field=_CRON_FIELD)


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
def _parse_cron(cron: str) -> _Cron:
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
    parsed = _Cron(
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
    return _parse_cron(cron).wildcard


# --------------------------------------------------------------------------------------------
# Parsing triggers from input
# --------------------------------------------------------------------------------------------

_KIND_KEYS: Final = {
    "cron": frozenset({"cron", "timezone"}),
    "every_seconds": frozenset({"every_seconds", "start_at"}),
    "at": frozenset({"at"}),
}
_ALL_KEYS: Final = frozenset().union(*_KIND_KEYS.values())
# "+08:00", "UTC+8", "GMT-5", "8": offsets, which do not follow DST; IANA names never match.
_OFFSET_LIKE = re.compile(r"^\s*(?:utc|gmt|z)?\s*[+\-\u2212]?\s*\d", re.IGNORECASE)


def _zone(name: object) -> ZoneInfo:
    """Load an IANA zone or raise ``InvalidSchedule`` on ``trigger.timezone``."""
    field = "trigger.timezone"
    if not isinstance(name, str):
        raise InvalidSchedule("timezone must be a string (an IANA name)", field=field)
    hint = "use an IANA zone name such as 'Asia/Shanghai' or 'UTC'"
    if not name.strip():
        raise InvalidSchedule(f"timezone is empty: {hint}", field=field)
    if _OFFSET_LIKE.match(name):
        raise InvalidSchedule(
            f"timezone {name!r} is a UTC offset, not a zone (offsets change with DST): {hint}",
            field=field,
        )
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError, OSError) as exc:
        raise InvalidSchedule(f"unknown timezone {name!r}: {hint}", field=field) from exc


def _aware_utc(value: object, field: str) -> datetime:
    """A datetime or ISO-8601 string with an offset, as aware UTC."""
    key = field.rsplit(".", 1)[-1]
    if isinstance(value, str):
        try:
            parsed = datetime.fromisoformat(value.strip())
        except ValueError as exc:
            raise InvalidSchedule(
                f"{key} {value!r} is not an ISO-8601 datetime", field=field
            ) from exc
    elif isinstance(value, datetime):
        parsed = value
    else:
        raise InvalidSchedule(f"{key} must be an ISO-8601 datetime string", field=field)
    if parsed.tzinfo is None or parsed.utcoffset() is None:
        raise InvalidSchedule(
            f"{key} {parsed.isoformat()!r} has no UTC offset; add one, e.g. 'Z' or '+08:00'",
            field=field,
        )
    return parsed.astimezone(UTC)


def _require_aware(value: datetime, what: str) -> datetime:
    if value.tzinfo is None or value.utcoffset() is None:
        raise ValueError(f"{what} must be an aware datetime, got {value!r}")
    return value.astimezone(UTC)


def _build(data: Mapping[str, Any], now: datetime | None) -> Trigger:
    """Shared by ``parse_trigger`` (``now`` given) and ``trigger_from_dict`` (trusted)."""
    if not isinstance(data, Mapping):
        raise InvalidSchedule("trigger must be an object", field="trigger")
    for key in data:
        if key not in _ALL_KEYS:
            raise InvalidSchedule(f"unknown trigger field {key!r}", field=f"trigger.{key}")
    kinds = [kind for kind in _KIND_KEYS if kind in data]
    if len(kinds) != 1:
        found = " and ".join(repr(k) for k in kinds) if kinds else "none"
        raise InvalidSchedule(
            f"trigger needs exactly one of 'cron', 'every_seconds' or 'at' (got {found})",
            field="trigger",
        )
    kind = kinds[0]
    for key in data:
        if key not in _KIND_KEYS[kind]:
            raise InvalidSchedule(
                f"{key!r} does not apply to a {kind!r} trigger", field=f"trigger.{key}"
            )

    if kind == "cron":
        cron = data["cron"]
        if not isinstance(cron, str):
            raise InvalidSchedule("cron must be a string", field=_CRON_FIELD)
        # A JSON null timezone means "not given", as for any optional field.
        timezone = data.get("timezone")
        timezone = "UTC" if timezone is None else timezone
        _zone(timezone)
        _parse_cron(cron)
        return CronTrigger(cron=cron.strip(), timezone=timezone)

    if kind == "every_seconds":
        every = data["every_seconds"]
        field = "trigger.every_seconds"
        if isinstance(every, bool) or not isinstance(every, int):
            raise InvalidSchedule("every_seconds must be an integer", field=field)
        if not 1 <= every <= MAX_INTERVAL_SECONDS:
            raise InvalidSchedule(
                f"every_seconds {every} is out of range 1-{MAX_INTERVAL_SECONDS} (one year)",
                field=field,
            )
        start = data.get("start_at")
        if start is not None:
            start_at = _aware_utc(start, "trigger.start_at")
        elif now is not None:
            start_at = _require_aware(now, "now").replace(microsecond=0)
        else:
            raise InvalidSchedule("stored interval trigger lacks start_at", "trigger.start_at")
        return IntervalTrigger(every_seconds=every, start_at=start_at)

    at = _aware_utc(data["at"], "trigger.at")
    if now is not None and at <= _require_aware(now, "now"):
        raise InvalidSchedule(
            f"at {at.isoformat()} lies in the past (now is {now.astimezone(UTC).isoformat()})",
            field="trigger.at",
        )
    return OneShotTrigger(at=at)


def parse_trigger(data: Mapping[str, Any], now: datetime) -> Trigger:
    """Validate user input (API.md "Trigger") into a ``Trigger``.

    ``data`` holds exactly one of ``{"cron", "timezone"?}``, ``{"every_seconds", "start_at"?}``
    or ``{"at"}``; ``now`` is an aware datetime. Datetimes may be given as ``datetime`` or as
    ISO-8601 strings, and must carry an offset; they are stored as UTC. An interval's
    ``start_at`` defaults to ``now`` truncated to the whole second; a one-shot ``at`` must lie
    strictly after ``now``. A JSON null for an optional key counts as absent.

    Raises ``InvalidSchedule`` whose ``field`` is ``trigger`` or ``trigger.<key>`` and whose
    message says what is wrong. Raises ``ValueError`` if ``now`` is naive (a caller bug).
    """
    _require_aware(now, "now")
    return _build(data, now)


def trigger_to_dict(trigger: Trigger) -> dict[str, Any]:
    """The JSON-safe stored form; ``trigger_from_dict`` turns it back into an equal trigger."""
    if isinstance(trigger, CronTrigger):
        return {"cron": trigger.cron, "timezone": trigger.timezone}
    if isinstance(trigger, IntervalTrigger):
        return {
            "every_seconds": trigger.every_seconds,
            "start_at": trigger.start_at.astimezone(UTC).isoformat(),
        }
    return {"at": trigger.at.astimezone(UTC).isoformat()}


def trigger_from_dict(data: Mapping[str, Any]) -> Trigger:
    """Rebuild a trigger from its stored form (no "lies in the future" check).

    Raises ``InvalidSchedule`` if the stored form is not one ``trigger_to_dict`` could make.
    """
    return _build(data, None)


# --------------------------------------------------------------------------------------------
# Due times
# --------------------------------------------------------------------------------------------

# Croniter is asked for the next naive match; under AND a Feb 29 on a given weekday can be
# 28 years (40 across 2100) away, so its search horizon must be wider than its default.
_MAX_YEARS_BETWEEN_MATCHES: Final = 100
# How far ahead to look for a backward shift of the wall clock (wildcard jobs fire at both
# passes of a repeated hour, so matches just *before* the current wall time may still be due).
# 26 h covers every shift in tzdata, historical date-line moves included.
_FOLD_LOOKAHEAD: Final = timedelta(hours=26)
_FOLD_PROBE_STEP: Final = timedelta(hours=1)


def _wall(instant: datetime, zone: ZoneInfo) -> datetime:
    """The naive local wall-clock time of an aware instant."""
    return instant.astimezone(zone).replace(tzinfo=None)


def _first_at_or_after(wall: datetime, zone: ZoneInfo, low: datetime, high: datetime) -> datetime:
    """The first UTC instant in ``(low, high]`` whose wall clock reads ``wall`` or later.

    ``low`` reads earlier than ``wall`` and ``high`` reads later; used to find the end of a
    spring gap (the transition instant) by bisection to the second (tzdata transitions fall on
    whole seconds).
    """
    lo = int(low.timestamp())
    hi = int(high.timestamp()) + 1
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if _wall(datetime.fromtimestamp(mid, UTC), zone) >= wall:
            hi = mid
        else:
            lo = mid
    return datetime.fromtimestamp(hi, UTC)


def _instants(wall: datetime, zone: ZoneInfo) -> tuple[datetime, list[datetime]]:
    """Where a naive local time lands: ``(first, occurrences)``, all aware UTC.

    ``first`` is the first instant whose wall clock reads ``wall`` or later: the instant
    itself, the first pass of a repeated time, or the end of the gap for a skipped time.
    ``occurrences`` are the instants whose wall clock reads exactly ``wall``: one, two (fold)
    or none (gap). ``first`` is non-decreasing in ``wall``, which bounds the searches below.
    """
    earlier = wall.replace(tzinfo=zone, fold=0)
    later = wall.replace(tzinfo=zone, fold=1)
    if earlier.utcoffset() == later.utcoffset():
        instant = earlier.astimezone(UTC)
        return instant, [instant]
    # zoneinfo reads fold=0 with the offset before the transition and fold=1 with the one
    # after; converting back to local time tells a fold (both exist) from a gap (neither).
    first, second = earlier.astimezone(UTC), later.astimezone(UTC)
    if _wall(first, zone) == wall:
        return first, sorted((first, second))
    # In a gap: fold=1 (offset after) lands before the transition, fold=0 after it.
    low, high = min(first, second), max(first, second)
    return _first_at_or_after(wall, zone, low, high), []


def _next_cron(trigger: CronTrigger, after: datetime) -> datetime | None:
    """Smallest cron fire instant strictly after ``after`` (aware UTC)."""
    try:
        return _search(_parse_cron(trigger.cron), ZoneInfo(trigger.timezone), after)
    except (OverflowError, ValueError):
        # Date arithmetic ran past year 9999: there is no representable next fire. Anywhere
        # else the same errors are bugs and must surface.
        if after.year < datetime.max.year - _MAX_YEARS_BETWEEN_MATCHES:
            raise
        return None


def _search(spec: _Cron, zone: ZoneInfo, after: datetime) -> datetime | None:
    """The search behind ``_next_cron``: walk matched wall times, map them to instants."""
    now_wall = _wall(after, zone)
    start = now_wall
    if spec.wildcard:
        # A matched time at or before the current wall time can still be due if the clock is
        # about to fall back over it (the second pass). Find how far back it can fall: a probe
        # up to one step after a backward transition reads at most one step later than the
        # wall clock just after it. (This assumes no zone falls back and springs forward again
        # within one hour; none in tzdata does.)
        for step in range(1, int(_FOLD_LOOKAHEAD / _FOLD_PROBE_STEP) + 1):
            probe = _wall(after + step * _FOLD_PROBE_STEP, zone) - _FOLD_PROBE_STEP
            start = min(start, probe)
    matches = croniter(
        spec.normalised,
        start,
        day_or=spec.day_or,
        max_years_between_matches=_MAX_YEARS_BETWEEN_MATCHES,
    )
    best: datetime | None = None
    try:
        while True:
            wall = matches.get_next(datetime)
            first, occurrences = _instants(wall, zone)
            if best is not None and first >= best:
                return best
            if not spec.wildcard:
                # One fire per matched time, at ``first``; ``first`` is non-decreasing, so the
                # first one after ``after`` is the answer. (A time at or before now_wall has
                # first <= after, which is why the search starts at now_wall.)
                if first > after:
                    return first
                continue
            for instant in occurrences:
                if instant > after and (best is None or instant < best):
                    best = instant
    except CroniterBadDateError:
        # No match within croniter's horizon (100 years): validation already rejects dates
        # that never occur, so only the end of representable time gets here.
        return best


def next_fire(trigger: Trigger, after: datetime) -> datetime | None:
    """The smallest fire instant strictly after ``after``, or ``None`` if there is none.

    ``after`` is an aware datetime in any zone (``ValueError`` if naive). The result is a pure
    function of the instant ``after``: asking from inside the second pass of a repeated hour
    never returns a first-pass instant, and never anything at or before ``after``.

    * cron: an aware datetime in the trigger's ``ZoneInfo`` (its ``utcoffset()`` is the zone's
      offset at that instant), following the DST rules in the module docstring;
    * interval: UTC, the smallest ``start_at + k * every_seconds`` (k >= 0) after ``after``,
      so a future ``start_at`` is itself the first fire;
    * one-shot: ``at`` (UTC) if it lies after ``after``, else ``None``.

    Store and compare cron results in UTC (``.astimezone(UTC)``): Python compares two datetimes
    sharing one ``ZoneInfo`` by wall clock, and ``==`` across zones is always False for a time
    in a repeated hour (PEP 495).
    """
    moment = _require_aware(after, "after")
    if isinstance(trigger, CronTrigger):
        found = _next_cron(trigger, moment)
        return None if found is None else found.astimezone(ZoneInfo(trigger.timezone))
    if isinstance(trigger, IntervalTrigger):
        start = trigger.start_at.astimezone(UTC)
        if start > moment:
            return start
        every = timedelta(seconds=trigger.every_seconds)
        try:
            return start + ((moment - start) // every + 1) * every
        except OverflowError:
            return None
    at = trigger.at.astimezone(UTC)
    return at if at > moment else None


def preview(trigger: Trigger, after: datetime, count: int) -> list[datetime]:
    """Up to ``count`` successive fire instants strictly after ``after`` (fewer if they end)."""
    times: list[datetime] = []
    cursor = after
    while len(times) < count:
        found = next_fire(trigger, cursor)
        if found is None:
            break
        times.append(found)
        cursor = found
    return times


# --------------------------------------------------------------------------------------------
# describe
# --------------------------------------------------------------------------------------------

_WEEKDAY_NAMES: Final = (
    "Sunday",
    "Monday",
    "Tuesday",
    "Wednesday",
    "Thursday",
    "Friday",
    "Saturday",
)
# Spelled out rather than taken from ``calendar``, whose names follow the process locale.
_MONTH_TITLES: Final = (
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
        return f"{_WEEKDAY_NAMES[run[0]]} through {_WEEKDAY_NAMES[run[1]]}"
    # Read the week Monday first, so 0,6 reads as a weekend, not "Sunday and Saturday".
    names = [_WEEKDAY_NAMES[d] for d in sorted(weekdays, key=lambda d: (d + 6) % 7)]
    if len(names) == 1:
        return f"on {names[0]}"
    return f"on {', '.join(names[:-1])} {conjunction} {names[-1]}"


def _month_phrase(months: frozenset[int]) -> str:
    run = _cyclic_run(months, 12, 1)
    if run is not None:
        return f"{_MONTH_TITLES[run[0] - 1]} through {_MONTH_TITLES[run[1] - 1]}"
    return "in " + _join([_MONTH_TITLES[m - 1] for m in sorted(months)])


def _progression(values: list[int]) -> int | None:
    """The common difference if ``values`` (sorted, 2+) are evenly spaced, else ``None``."""
    steps = {b - a for a, b in zip(values, values[1:], strict=False)}
    return steps.pop() if len(steps) == 1 else None


def _every(count: int, unit: str) -> str:
    return f"Every {unit}" if count == 1 else f"Every {count} {unit}s"


def _time_phrase(spec: _Cron) -> str | None:
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


def _day_phrase(spec: _Cron) -> str | None:
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


def _describe_cron(trigger: CronTrigger) -> str:
    spec = _parse_cron(trigger.cron)
    time_part = _time_phrase(spec)
    day_part = _day_phrase(spec)
    if time_part is None or day_part is None:
        return f"Cron {trigger.cron!r} ({trigger.timezone})"
    pieces = [time_part]
    months = spec.months
    single_date = len(months) == 1 and len(spec.days) == 1 and len(spec.weekdays) == 7
    if single_date and not spec.dom_star:
        (month,), (day,) = months, spec.days
        pieces.append(f"on {_MONTH_TITLES[month - 1]} {day}")
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
    ``Cron '<expr>' (<zone>)``. Intervals read "Every 90 seconds", one-shots
    "Once at <ISO UTC>". Raises ``InvalidSchedule`` for an invalid cron expression.
    """
    if isinstance(trigger, CronTrigger):
        return _describe_cron(trigger)
    if isinstance(trigger, IntervalTrigger):
        return _describe_interval(trigger.every_seconds)
    return f"Once at {trigger.at.astimezone(UTC).isoformat()}"
