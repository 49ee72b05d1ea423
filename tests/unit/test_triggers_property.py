"""Property tests of the trigger arithmetic (docs/design.md, promises 1 and 2), with hypothesis.

Cron expressions are generated from parts whose meaning is known: each field's value set is
computed here from the Debian rules (values, ranges, reversed ranges that wrap, steps, lists,
names, 0 and 7 for Sunday, the OR/AND day rule), never by asking the parser. They are checked
in IANA zones (every zone can be drawn; the DST-heavy ones more often), under every DST policy
(``dst_gap``, ``dst_repeat``, or neither), from instants between 1900 and 2100, many of them a
few hours from a UTC-offset transition, against the one brute-force oracle of these rules
(``oracle``, whose docstring states them), which reads the wall-clock minutes of the zone
segment by segment between its transitions.

Only the public functions of ``core.triggers`` are used. Examples are derandomised (the same
inputs on every run, so CI cannot flake) and counts are kept modest for a 2-core machine.
"""

from __future__ import annotations

import functools
import math
import string
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, date, datetime, time, timedelta, timezone
from itertools import islice, pairwise
from typing import Any
from zoneinfo import ZoneInfo, available_timezones

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from agentcron.core.errors import InvalidSchedule
from agentcron.core.triggers import (
    MAX_INTERVAL_SECONDS,
    CronTrigger,
    IntervalTrigger,
    OneShotTrigger,
    dst_rule,
    fire_times,
    is_wildcard_job,
    next_fire,
    parse_trigger,
    preview,
    trigger_from_dict,
    trigger_to_dict,
)
from agentcron.core.triggers.kinds import GAP_POLICIES, REPEAT_POLICIES

PROPERTY = settings(
    max_examples=200,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.too_slow],
)
QUICK = settings(PROPERTY, max_examples=100)

NOW = datetime(2025, 6, 1, 12, 0, tzinfo=UTC)
SECOND = timedelta(seconds=1)

DST_HEAVY = (
    "America/New_York",
    "Europe/London",
    "Australia/Lord_Howe",
    "Pacific/Chatham",
    "America/Havana",
    "America/Santiago",
    "Africa/Casablanca",
    "Antarctica/Troll",
    "Australia/Sydney",
    "Pacific/Apia",  # skipped a whole day (2011-12-30) crossing the date line
    "America/St_Johns",  # half-hour zone with DST
    "Europe/Moscow",
)
ALL_ZONES = tuple(sorted(available_timezones()))

# ---------------------------------------------------------------------------------------------
# Cron expressions with a known meaning
# ---------------------------------------------------------------------------------------------

MONTH_NAMES = ("jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec")
DOW_NAMES = ("sun", "mon", "tue", "wed", "thu", "fri", "sat")
MAX_DAYS = (31, 29, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31)


@dataclass(frozen=True)
class Spec:
    low: int
    high: int
    cycle_high: int  # last value of the cycle a reversed range wraps around (6 for weekdays)
    names: dict[int, str]


SPECS = (
    Spec(0, 59, 59, {}),
    Spec(0, 23, 23, {}),
    Spec(1, 31, 31, {}),
    Spec(1, 12, 12, {i + 1: n for i, n in enumerate(MONTH_NAMES)}),
    Spec(0, 7, 6, dict(enumerate(DOW_NAMES))),
)
MIN, HOUR, DOM, MON, DOW = range(5)


@dataclass(frozen=True)
class Field:
    text: str
    values: frozenset[int]

    @property
    def star(self) -> bool:
        return self.text.startswith("*")


@dataclass(frozen=True)
class Cron:
    """A generated expression and what it means, derived independently of the parser."""

    text: str
    fields: tuple[Field, Field, Field, Field, Field]

    @property
    def wildcard(self) -> bool:
        return self.fields[MIN].star or self.fields[HOUR].star

    @property
    def day_or(self) -> bool:
        return not (self.fields[DOM].star or self.fields[DOW].star)

    @property
    def never_fires(self) -> bool:
        """Under AND, no listed day exists in a listed month (under OR weekdays always match)."""
        days, months = self.fields[DOM].values, self.fields[MON].values
        return not self.day_or and not any(d <= MAX_DAYS[m - 1] for m in months for d in days)

    @functools.cached_property
    def hours(self) -> list[int]:
        return sorted(self.fields[HOUR].values)

    @functools.cached_property
    def minutes(self) -> list[int]:
        return sorted(self.fields[MIN].values)

    def day_matches(self, day: date) -> bool:
        if day.month not in self.fields[MON].values:
            return False
        dom = day.day in self.fields[DOM].values
        dow = day.isoweekday() % 7 in self.fields[DOW].values
        return (dom or dow) if self.day_or else (dom and dow)

    def walls(self, low: datetime, high: datetime) -> Iterator[datetime]:
        """Every matching wall-clock minute in ``[low, high)``, in order (naive)."""
        day = low.date()
        while datetime.combine(day, time()) < high:
            if self.day_matches(day):
                for hour in self.hours:
                    for minute in self.minutes:
                        wall = datetime.combine(day, time(hour, minute))
                        if wall >= high:
                            return
                        if wall >= low:
                            yield wall
            day += timedelta(days=1)


def _wrap(start: int, stop: int, low: int, cycle_high: int) -> list[int]:
    """start, start+1, ... up to cycle_high, then low, ... up to stop."""
    values = [start]
    while values[-1] != stop:
        values.append(low if values[-1] == cycle_high else values[-1] + 1)
    return values


@st.composite
def _item(draw: st.DrawFn, index: int) -> tuple[str, set[int]]:
    spec = SPECS[index]
    span = spec.high - spec.low + 1

    def token(value: int) -> str:
        name = spec.names.get(value)
        if name is not None and draw(st.booleans()):
            return draw(st.sampled_from((name, name.upper(), name.title())))
        return str(value)

    def step() -> int:
        return draw(st.one_of(st.integers(1, 4), st.integers(1, span + 2)))

    kind = draw(
        st.sampled_from(
            ("star", "star_step", "value", "value", "value", "range", "range", "range_step")
        )
    )
    if kind == "star":
        return "*", set(range(spec.low, spec.high + 1))
    if kind == "star_step":
        s = step()
        return f"*/{s}", set(range(spec.low, spec.high + 1, s))
    value = draw(st.integers(spec.low, spec.high))
    if kind == "value":
        return token(value), {value}
    stop = draw(st.integers(spec.low, spec.high))
    if index == DOW and value > stop and value == 7:
        value, stop = stop, value  # 7 is only another Sunday: keep it at the top of a range
    s = step() if kind == "range_step" else 1
    text = f"{token(value)}-{token(stop)}" + (f"/{s}" if kind == "range_step" else "")
    if value <= stop:
        return text, set(range(value, stop + 1, s))
    return text, set(_wrap(value, stop, spec.low, spec.cycle_high)[::s])


@st.composite
def _field(draw: st.DrawFn, index: int) -> Field:
    if index in (DOM, MON, DOW) and draw(st.integers(0, 2)) == 0:
        return Field("*", frozenset(range(SPECS[index].low, SPECS[index].high + 1)))
    size = draw(st.sampled_from((1, 1, 1, 2, 3)))
    items = draw(st.lists(_item(index), min_size=size, max_size=size))
    values = set().union(*(v for _, v in items))
    if index == DOW and 7 in values:
        values = (values - {7}) | {0}
    return Field(",".join(text for text, _ in items), frozenset(values))


MACROS = {
    "@yearly": "0 0 1 1 *",
    "@annually": "0 0 1 1 *",
    "@monthly": "0 0 1 * *",
    "@weekly": "0 0 * * 0",
    "@daily": "0 0 * * *",
    "@midnight": "0 0 * * *",
    "@hourly": "0 * * * *",
}


def known(text: str) -> Cron:
    """The meaning of a plain expression: numbers, lists, ``*``, ``a-b`` and ``/n`` steps (no
    names, no wrapping ranges), as the macros and the fixed sweep below use."""
    fields = []
    for index, part in enumerate(text.split()):
        spec = SPECS[index]
        values: set[int] = set()
        for item in part.split(","):
            base, _, step = item.partition("/")
            low, _, high = base.partition("-")
            first, last = (spec.low, spec.high) if base == "*" else (int(low), int(high or low))
            values.update(range(first, last + 1, int(step or 1)))
        if index == DOW and 7 in values:
            values = (values - {7}) | {0}
        fields.append(Field(part, frozenset(values)))
    return Cron(text, (fields[0], fields[1], fields[2], fields[3], fields[4]))


@st.composite
def crons(draw: st.DrawFn, focus: datetime | None = None) -> Cron:
    """Any valid-looking expression; ``never_fires`` says whether it must be rejected.

    With ``focus`` (a local wall time), the hour and day fields often list that time's hour
    and day, so that DST transitions are actually crossed by matching times.
    """
    if focus is None and draw(st.integers(0, 15)) == 0:
        macro = draw(st.sampled_from(sorted(MACROS)))
        text = draw(st.sampled_from((macro, macro.upper())))
        return Cron(text, known(MACROS[macro]).fields)
    fields = [draw(_field(index)) for index in range(5)]
    if focus is not None and draw(st.integers(0, 3)) > 0:
        near = sorted({(focus + k * timedelta(minutes=30)).hour for k in range(-3, 4)})
        hours = draw(st.lists(st.sampled_from(near), min_size=1, max_size=3, unique=True))
        fields[HOUR] = Field(",".join(map(str, hours)), frozenset(hours))
        fields[DOM] = draw(
            st.sampled_from(
                (Field("*", frozenset(range(1, 32))), Field(str(focus.day), frozenset({focus.day})))
            )
        )
        fields[MON] = Field("*", frozenset(range(1, 13)))
        fields[DOW] = Field("*", frozenset(range(7)))
    separators = draw(
        st.lists(st.sampled_from((" ", " ", " ", "  ", "\t")), min_size=4, max_size=4)
    )
    text = fields[0].text + "".join(
        sep + f.text for sep, f in zip(separators, fields[1:], strict=True)
    )
    if draw(st.integers(0, 9)) == 0:
        text = f" {text} "
    return Cron(text, (fields[0], fields[1], fields[2], fields[3], fields[4]))


# ---------------------------------------------------------------------------------------------
# Zones, their transitions, and instants near them
# ---------------------------------------------------------------------------------------------


def _offset(instant: datetime, zone: ZoneInfo) -> timedelta:
    offset = instant.astimezone(zone).utcoffset()
    assert offset is not None
    return offset


def wall(instant: datetime, zone: ZoneInfo) -> datetime:
    """The naive local wall-clock time of an instant."""
    return instant.astimezone(zone).replace(tzinfo=None)


def _at(seconds: int) -> datetime:
    return datetime(1970, 1, 1, tzinfo=UTC) + timedelta(seconds=seconds)


def transitions(zone: ZoneInfo, start: datetime, end: datetime) -> list[datetime]:
    """The instants in ``(start, end]`` where the zone's UTC offset changes (whole seconds).

    Sampled every 3 hours and bisected: tzdata has no zone that shifts twice within 3 hours.
    """
    found: list[datetime] = []
    step = timedelta(hours=3)
    low = start
    while low < end:
        high = min(low + step, end)
        while _offset(high, zone) != _offset(low, zone):
            before = _offset(low, zone)
            # Transitions fall on whole seconds: the floor of `low` still has its offset.
            lo, hi = math.floor(low.timestamp()), math.ceil(high.timestamp())
            while hi - lo > 1:
                mid = (lo + hi) // 2
                if _offset(_at(mid), zone) == before:
                    lo = mid
                else:
                    hi = mid
            found.append(_at(hi))
            low = _at(hi)
        low = high
    return found


@functools.lru_cache(maxsize=4096)
def transitions_in_year(zone_name: str, year: int) -> tuple[datetime, ...]:
    start = datetime(year, 1, 1, tzinfo=UTC)
    return tuple(transitions(ZoneInfo(zone_name), start, start.replace(year=year + 1)))


zones = st.one_of(st.sampled_from(DST_HEAVY), st.sampled_from(ALL_ZONES))
years = st.one_of(st.integers(1970, 2040), st.integers(1900, 2100))


uniform_instants = st.datetimes(datetime(1900, 1, 2), datetime(2100, 12, 30)).map(
    lambda naive: naive.replace(tzinfo=UTC)
)


@dataclass(frozen=True)
class Case:
    """An expression in a zone with DST policies (``None``: the job kind's default), asked
    from an instant."""

    cron: Cron
    zone: str
    gap: str | None
    repeat: str | None
    after: datetime

    def trigger(self) -> CronTrigger:
        data = {"cron": self.cron.text, "timezone": self.zone}
        trigger = parse_trigger(data | {"dst_gap": self.gap, "dst_repeat": self.repeat}, NOW)
        assert isinstance(trigger, CronTrigger)
        return trigger

    @property
    def policies(self) -> tuple[str, str]:
        """The effective (gap, repeat) policies: a fixed-time job shifts and fires the first
        pass, a wildcard job skips and fires both."""
        if self.cron.wildcard:
            return self.gap or "skip", self.repeat or "both"
        return self.gap or "shift", self.repeat or "first"


@st.composite
def cron_cases(draw: st.DrawFn) -> Case:
    """Mostly a few hours before or after one of the zone's transitions in a random year, with
    the expression often aimed at that transition, under any DST policy."""
    zone_name = draw(zones)
    zone = ZoneInfo(zone_name)
    found = transitions_in_year(zone_name, draw(years)) if draw(st.integers(0, 3)) else ()
    if found:
        transition = draw(st.sampled_from(found))
        after = transition + timedelta(
            seconds=draw(st.integers(-5 * 3600, 3 * 3600)),
            microseconds=draw(st.sampled_from((0, 0, 1, 500_000, 999_999))),
        )
        cron = draw(crons(focus=wall(transition - SECOND, zone)))
    else:
        after = draw(uniform_instants)
        cron = draw(crons())
    assume(not cron.never_fires)
    gap = draw(st.sampled_from((None, "shift", "skip")))
    repeat = draw(st.sampled_from((None, "first", "last", "both")))
    # The caller's instant may be in any zone: only the instant counts.
    shown_in = draw(st.sampled_from((UTC, zone, ZoneInfo("Asia/Kolkata"))))
    return Case(cron, zone_name, gap, repeat, after.astimezone(shown_in))


# ---------------------------------------------------------------------------------------------
# The oracle: fire instants from the rules, segment by segment between transitions
# ---------------------------------------------------------------------------------------------

# Every pass of a wall time near the ends of a window lies within this much of them: no zone
# moves its clock back by more than a day (the date-line moves included).
MARGIN = timedelta(hours=30)


def oracle(case: Case, end: datetime) -> dict[datetime, str | None]:
    """The fire instants in ``(case.after, end]`` (UTC), in order, each with the rule that
    ``dst_rule`` must name for it, from the DST rules alone.

    Between two transitions the offset ``o`` is constant, so the instants ``[a, b)`` read the
    wall times ``[a + o, b + o)``: a matching wall minute ``m`` read there is read at ``m - o``.
    A time read once fires then (no rule); a time read twice (a clock set back) fires at its
    first, last or both passes by the repeat policy (``repeat_<policy>``); a time the clock
    jumps over (a clock set forward) is read never, and under ``shift`` fires at the jump
    (``gap_shift``, unless the jump's own wall time matches: then it is an ordinary fire). The
    fires are a set, so times shifted to one jump fire once.
    """
    gap, repeat = case.policies
    zone = ZoneInfo(case.zone)
    start = case.after.astimezone(UTC).replace(microsecond=0) - MARGIN
    last = end.astimezone(UTC) + MARGIN
    changes = transitions(zone, start, last)
    passes: dict[datetime, list[datetime]] = {}
    for a, b in pairwise([start, *changes, last]):
        o = _offset(a, zone)
        for m in case.cron.walls((a + o).replace(tzinfo=None), (b + o).replace(tzinfo=None)):
            passes.setdefault(m, []).append((m - o).replace(tzinfo=UTC))
    fires: dict[datetime, str | None] = {}
    for read in passes.values():
        rule = f"repeat_{repeat}" if len(read) > 1 else None
        fires.update(
            dict.fromkeys({"first": read[:1], "last": read[-1:], "both": read}[repeat], rule)
        )
    for change in changes if gap == "shift" else ():
        jumped = case.cron.walls(wall(change - SECOND, zone) + SECOND, wall(change, zone))
        if any(m not in passes for m in jumped):
            fires.setdefault(change, "gap_shift")
    return {f: fires[f] for f in sorted(fires) if case.after < f <= end}


def _fires(trigger: CronTrigger, after: datetime, count: int = 8, hours: int = 0) -> list[datetime]:
    """Up to ``count`` due times, or all those of the next ``hours`` if there are more (so that
    a dense expression reaches a transition too), cut after 400 days past the first (sparse
    expressions such as Feb 29 on a Monday would otherwise make the oracle walk centuries)."""
    fires = list(islice(fire_times(trigger, after, after + timedelta(hours=hours)), 500))
    if len(fires) < count:
        fires = preview(trigger, after, count)
    assert fires, "a valid cron expression has a next due time"
    horizon = fires[0] + timedelta(days=400)
    return [f for i, f in enumerate(fires) if i < 2 or f <= horizon]


# ---------------------------------------------------------------------------------------------
# Cron properties
# ---------------------------------------------------------------------------------------------


@PROPERTY
@given(crons())
def test_expression_accepted_unless_it_never_fires(cron: Cron) -> None:
    data = {"cron": cron.text, "timezone": "UTC"}
    if cron.never_fires:
        with pytest.raises(InvalidSchedule) as caught:
            parse_trigger(data, NOW)
        assert caught.value.field == "trigger.cron"
        assert "never fires" in caught.value.message
        return
    trigger = parse_trigger(data, NOW)
    assert trigger == CronTrigger(cron.text.strip(), "UTC")
    assert trigger_from_dict(trigger_to_dict(trigger)) == trigger
    assert is_wildcard_job(cron.text) is cron.wildcard


@PROPERTY
@given(cron_cases())
def test_due_times_are_the_oracles(case: Case) -> None:
    """The due times are exactly the oracle's, in UTC: none that should fire (by the cron
    meaning and the DST rules) is missed between them, none is added, none doubled; and
    ``dst_rule`` names the rule the oracle applied to each."""
    trigger = case.trigger()
    fires = _fires(trigger, case.after, hours=8)
    assert all(fire.tzinfo is UTC for fire in fires)
    expected = oracle(case, fires[-1])
    assert fires == list(expected)
    assert {f: dst_rule(trigger, f) for f in fires} == expected


# Changes in 2025, each swept with every policy: New York's, the table's of
# tests/unit/test_triggers_dst.py, and one of each shape it does not have (as zoneinfo prints):
# Lord Howe 02:00 +10:30 -> 02:30 +11 (a 30-minute gap), 02:00 +11 -> 01:30 +10:30 (only
# 01:30-01:59 twice); Chatham 02:45 +12:45 -> 03:45 +13:45 (off the hour); Havana 00:00 -05 ->
# 01:00 -04 (midnight does not occur); Santiago 00:00 -03 -> 23:00 -04 the day before;
# Casablanca 03:00 +01 -> 02:00 +00 (negative DST, +00 during Ramadan); Troll 01:00 +00 ->
# 03:00 +02 and back (a 2-hour shift).
SWEPT = [
    ("America/New_York", "2025-03-09T07:00:00+00:00"),
    ("America/New_York", "2025-11-02T06:00:00+00:00"),
    ("Australia/Lord_Howe", "2025-04-05T15:00:00+00:00"),
    ("Australia/Lord_Howe", "2025-10-04T15:30:00+00:00"),
    ("Pacific/Chatham", "2025-04-05T14:00:00+00:00"),
    ("Pacific/Chatham", "2025-09-27T14:00:00+00:00"),
    ("America/Havana", "2025-03-09T05:00:00+00:00"),
    ("America/Havana", "2025-11-02T05:00:00+00:00"),
    ("America/Santiago", "2025-04-06T03:00:00+00:00"),
    ("Africa/Casablanca", "2025-02-23T02:00:00+00:00"),
    ("Africa/Casablanca", "2025-04-06T02:00:00+00:00"),
    ("Antarctica/Troll", "2025-03-30T01:00:00+00:00"),
    ("Antarctica/Troll", "2025-10-26T01:00:00+00:00"),
]


@pytest.mark.parametrize(
    ("zone", "at"),
    [pytest.param(z, t, id=f"{z.split('/')[-1].lower()}_{t[:10]}") for z, t in SWEPT],
)
@pytest.mark.parametrize("cron", ["*/15 * * * *", "0,30 0-3 * * *", "45 23,0,1,2,3 * * *"])
@pytest.mark.parametrize(
    ("gap", "repeat"),
    [(None, None)] + [(gap, repeat) for gap in GAP_POLICIES for repeat in REPEAT_POLICIES],
)
def test_due_times_around_known_transitions_are_the_oracles(
    zone: str, at: str, cron: str, gap: str | None, repeat: str | None
) -> None:
    """Five hours either side of each transition, under every policy and the job kind's
    default: the due times and the ``dst_rule`` of each are the oracle's, and ``next_fire``
    from instants all through them gives the next one."""
    transition = datetime.fromisoformat(at)
    assert transitions(ZoneInfo(zone), transition - SECOND, transition) == [transition]
    case = Case(known(cron), zone, gap, repeat, transition - timedelta(hours=5))
    end = transition + timedelta(hours=5)
    expected = oracle(case, end)
    trigger = case.trigger()
    fires = [f for f in preview(trigger, case.after, len(expected) + 1) if f <= end]
    assert fires == list(expected)
    assert {f: dst_rule(trigger, f) for f in fires} == expected
    for origin in (case.after + timedelta(minutes=k, seconds=29) for k in range(0, 600, 13)):
        following = [f for f in expected if f > origin]
        if following:
            assert next_fire(trigger, origin) == following[0], f"next_fire({origin})"


@PROPERTY
@given(cron_cases(), st.lists(st.floats(0, 1), min_size=1, max_size=12), st.sampled_from(ALL_ZONES))
def test_next_fire_is_a_pure_function_of_the_instant(
    case: Case, fractions: list[float], asked_in: str
) -> None:
    """From any instant, ``next_fire`` gives the next due time of one fixed walk: where an
    iteration started never matters (so asking from the second pass of a repeated hour never
    returns the first pass), and the zone the instant is written in does not either."""
    zone = ZoneInfo(case.zone)
    trigger = case.trigger()
    walked = _fires(trigger, case.after)  # in UTC, as every answer is
    # UTC throughout: arithmetic and comparisons on datetimes sharing a ZoneInfo use wall time.
    after = case.after.astimezone(UTC)
    span = walked[-1] - after
    origins = [after + span * f for f in fractions]
    origins += [w - timedelta(microseconds=1) for w in walked] + walked[:-1]
    # Inside every repeated stretch of wall time the walk crosses: second-pass origins.
    for transition in transitions(zone, after, walked[-1]):
        if _offset(transition, zone) < _offset(transition - SECOND, zone):
            origins += [transition + k * timedelta(minutes=7, seconds=3) for k in range(9)]
    for origin in origins:
        if not after <= origin < walked[-1]:
            continue
        expected = next(w for w in walked if w > origin)
        found = next_fire(trigger, origin.astimezone(ZoneInfo(asked_in)))
        assert found is not None
        assert found.astimezone(UTC) == expected, f"next_fire({origin.isoformat()})"


def test_every_iana_zone_is_accepted() -> None:
    trigger_data: dict[str, Any] = {"cron": "30 2 * * *"}
    refused = []
    for name in ALL_ZONES:
        try:
            trigger = parse_trigger({**trigger_data, "timezone": name}, NOW)
        except InvalidSchedule as exc:
            refused.append(f"{name}: {exc.message}")
            continue
        found = next_fire(trigger, NOW)
        assert found is not None and found > NOW
    assert refused == []


CRON_ALPHABET = string.digits + "*/-,@ \tLW#?HRjanfebmonSUNsat" + "\x00٣５é\u2212"


@QUICK
@given(
    st.one_of(st.text(CRON_ALPHABET, max_size=40), st.text(max_size=40)),
    st.one_of(st.none(), st.sampled_from(DST_HEAVY), st.text(max_size=30)),
)
def test_any_text_is_accepted_or_rejected_naming_the_field(cron: str, zone: str | None) -> None:
    data = {"cron": cron, "timezone": zone}
    try:
        trigger = parse_trigger(data, NOW)
    except InvalidSchedule as exc:
        assert exc.field in ("trigger.cron", "trigger.timezone")
        assert exc.message
        return
    assert isinstance(trigger, CronTrigger)
    found = next_fire(trigger, NOW)
    assert found is None or found > NOW


@QUICK
@given(st.text(min_size=1, max_size=40).filter(lambda z: z not in ALL_ZONES))
def test_unknown_zone_names_are_rejected(zone: str) -> None:
    with pytest.raises(InvalidSchedule) as caught:
        parse_trigger({"cron": "0 8 * * *", "timezone": zone}, NOW)
    assert caught.value.field == "trigger.timezone"


# ---------------------------------------------------------------------------------------------
# Interval and one-shot triggers
# ---------------------------------------------------------------------------------------------

aware_instants = st.builds(
    lambda naive, minutes: naive.replace(tzinfo=timezone(timedelta(minutes=minutes))),
    st.datetimes(datetime(1900, 1, 2), datetime(2100, 12, 30)),
    st.integers(-14 * 60, 14 * 60),
)
every_seconds = st.one_of(
    st.integers(1, 120), st.sampled_from((3600, 86_400)), st.integers(1, MAX_INTERVAL_SECONDS)
)


@PROPERTY
@given(every_seconds, aware_instants, aware_instants)
def test_interval_fires_on_its_grid_strictly_after(
    every: int, start_at: datetime, after: datetime
) -> None:
    trigger = parse_trigger({"every_seconds": every, "start_at": start_at.isoformat()}, NOW)
    assert trigger == IntervalTrigger(every, start_at.astimezone(UTC))
    assert trigger_from_dict(trigger_to_dict(trigger)) == trigger
    step = timedelta(seconds=every)
    fires = preview(trigger, after, 4)
    assert len(fires) == 4
    first = fires[0]
    assert first.tzinfo == UTC and first > after
    # On the grid start_at + k * every (k >= 0), and the smallest such point after `after`.
    assert (first - start_at) % step == timedelta(0) and first >= start_at
    assert first == start_at or first - step <= after
    assert [b - a for a, b in pairwise(fires)] == [step] * 3
    # Pure: asking from between two due times gives the later one.
    assert next_fire(trigger, fires[1] - timedelta(microseconds=1)) == fires[1]
    assert next_fire(trigger, fires[1]) == fires[2]


any_instant = st.builds(
    lambda naive, minutes: naive.replace(tzinfo=timezone(timedelta(minutes=minutes))),
    st.one_of(  # years 1 to 9999, often within a day of either end
        st.datetimes(),
        st.datetimes(max_value=datetime(1, 1, 2)),
        st.datetimes(min_value=datetime(9999, 12, 30)),
    ),
    st.integers(-14 * 60, 14 * 60),
)


@QUICK
@given(any_instant, every_seconds, st.datetimes().map(lambda d: d.replace(tzinfo=UTC)))
def test_instants_anywhere_in_representable_time_are_parsed_or_refused_by_field(
    instant: datetime, every: int, after: datetime
) -> None:
    """``0001-01-01T00:00+14:00`` lies before year 1 in UTC: refused on its field, never an
    OverflowError; whatever is accepted has due times (or none) from any instant."""
    for data, field in (
        ({"at": instant.isoformat()}, "trigger.at"),
        ({"every_seconds": every, "start_at": instant.isoformat()}, "trigger.start_at"),
    ):
        try:
            trigger = parse_trigger(data, NOW)
        except InvalidSchedule as exc:
            assert exc.field == field
            continue
        fires = preview(trigger, after, 3)
        assert all(f > after for f in fires)
        assert all(a < b for a, b in pairwise(fires))


@PROPERTY
@given(aware_instants, aware_instants)
def test_one_shot_fires_once_strictly_after_now(at: datetime, after: datetime) -> None:
    if at <= NOW:
        with pytest.raises(InvalidSchedule) as caught:
            parse_trigger({"at": at.isoformat()}, NOW)
        assert caught.value.field == "trigger.at"
        trigger = trigger_from_dict({"at": at.isoformat()})  # stored: no future check
    else:
        trigger = parse_trigger({"at": at.isoformat()}, NOW)
    assert trigger == OneShotTrigger(at.astimezone(UTC))
    assert trigger_from_dict(trigger_to_dict(trigger)) == trigger
    fires = preview(trigger, after, 3)
    if at > after:
        assert fires == [at] and fires[0].tzinfo == UTC
        assert next_fire(trigger, at) is None
    else:
        assert fires == [] and next_fire(trigger, after) is None
