"""DST-exact cron search: the next fire instant of a cron trigger after a given instant.

The expression is asked only one question: "which naive wall-clock minute matches next?"
(``Cron.next_wall``, see :mod:`core.triggers.cron`). Mapping those wall times to instants with
:mod:`zoneinfo` and applying the DST rules of the :mod:`core.triggers` docstring happen here.
"""

from __future__ import annotations

import functools
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Final
from zoneinfo import ZoneInfo

from agentcron.core.triggers.cron import Cron, parse_cron
from agentcron.core.triggers.kinds import CronTrigger

# How far ahead a search looks for the next naive match: under AND a Feb 29 on a given weekday
# can be 28 years (40 across 2100) away.
_MAX_YEARS_BETWEEN_MATCHES: Final = 100
# How far ahead to look for a backward shift of the wall clock (wildcard jobs fire at both
# passes of a repeated hour, so matches just *before* the current wall time may still be due).
# 26 h covers every shift in tzdata, historical date-line moves included.
_FOLD_LOOKAHEAD: Final = timedelta(hours=26)
_FOLD_PROBE_STEP: Final = timedelta(hours=1)


def _matches(spec: Cron, after: datetime, horizon: datetime) -> Iterator[datetime]:
    """The naive wall minutes strictly after ``after`` that ``spec`` matches, in order, up to
    ``horizon``."""
    wall = spec.next_wall(after, horizon)
    while wall is not None:
        yield wall
        wall = spec.next_wall(wall, horizon)


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


def next_cron(trigger: CronTrigger, after: datetime) -> datetime | None:
    """Smallest cron fire instant strictly after ``after`` (aware UTC)."""
    try:
        return _search(
            parse_cron(trigger.cron),
            ZoneInfo(trigger.timezone),
            after,
            gap=trigger.gap_policy,
            repeat=trigger.repeat_policy,
        )
    except (OverflowError, ValueError):
        # Date arithmetic ran past year 9999: there is no representable next fire. Anywhere
        # else the same errors are bugs and must surface.
        if after.year < datetime.max.year - _MAX_YEARS_BETWEEN_MATCHES:
            raise
        return None


def _fires_of(
    first: datetime, occurrences: list[datetime], gap: str, repeat: str
) -> list[datetime]:
    """The fire instants of one matched wall time under the DST policies (see ``_instants``)."""
    if not occurrences:
        return [first] if gap == "shift" else []
    if len(occurrences) == 1 or repeat == "both":
        return occurrences
    return [occurrences[0] if repeat == "first" else occurrences[-1]]


@functools.lru_cache(maxsize=4096)
def _earliest_due_wall(after: datetime, zone: ZoneInfo) -> datetime:
    """The earliest wall time whose second pass may still be due after ``after``: the current
    wall time, or earlier if the clock is about to fall back over it.

    Found by probing the next 26 hours hour by hour: a probe up to one step after a backward
    transition reads at most one step later than the wall clock just after it. (This assumes
    no zone falls back and springs forward again within one hour; none in tzdata does.) The 26
    probes are most of a lookup's cost, and they depend on the instant and the zone alone, so
    the schedules of a claim due at the same instant in one zone (every ``*/5`` job at 09:05)
    share them.
    """
    start = _wall(after, zone)
    for step in range(1, int(_FOLD_LOOKAHEAD / _FOLD_PROBE_STEP) + 1):
        probe = _wall(after + step * _FOLD_PROBE_STEP, zone) - _FOLD_PROBE_STEP
        start = min(start, probe)
    return start


def _search(
    spec: Cron, zone: ZoneInfo, after: datetime, *, gap: str, repeat: str
) -> datetime | None:
    """The search behind ``next_cron``: walk matched wall times, map them to instants."""
    now_wall = _wall(after, zone)
    # Under ``first`` every fire of a wall time at or before now is its first instant, which is
    # at or before ``after``: the search starts at the current wall time.
    start = now_wall if repeat == "first" else _earliest_due_wall(after, zone)
    horizon = now_wall + timedelta(days=366 * _MAX_YEARS_BETWEEN_MATCHES)
    best: datetime | None = None
    for wall in _matches(spec, start, horizon):
        first, occurrences = _instants(wall, zone)
        # Every fire of ``wall`` is at or after ``first``, which never decreases: nothing later
        # can beat ``best``.
        if best is not None and first >= best:
            return best
        for instant in _fires_of(first, occurrences, gap, repeat):
            if instant > after and (best is None or instant < best):
                best = instant
        if best is not None and repeat == "first":
            # Under ``first`` a wall time fires at ``first`` or not at all, so the first fire
            # after ``after`` is the answer (no need to look at the next match).
            return best
    # Past the horizon (100 years): only a time that falls in a gap every time it matches
    # (under ``skip``) or the end of representable time gets here.
    return best


_SECOND: Final = timedelta(seconds=1)
_MINUTE: Final = timedelta(minutes=1)
_RULE_OF_REPEAT: Final = {"first": "repeat_first", "last": "repeat_last", "both": "repeat_both"}


def matched_walls(
    trigger: CronTrigger, low: datetime, high: datetime, limit: int
) -> tuple[list[datetime], bool]:
    """The naive wall times in ``[low, high)`` the expression matches (at most ``limit``),
    and whether there are more."""
    spec = parse_cron(trigger.cron)
    found: list[datetime] = []
    for wall in _matches(spec, low.replace(second=0, microsecond=0) - _MINUTE, high):
        if wall >= high:
            return found, False
        if wall >= low:
            if len(found) == limit:
                return found, True
            found.append(wall)
    return found, False


def dst_rule(trigger: CronTrigger, due: datetime) -> str | None:
    """Which DST rule made ``due`` (a fire instant of ``trigger``, aware) a fire time, if any.

    * ``gap_shift``: ``due`` is the end of a spring gap, and fires only because matched local
      times inside the gap were shifted to it (a time that matches on its own gets ``None``);
    * ``repeat_first`` / ``repeat_last``: ``due`` is that pass of a repeated local time, and
      the other pass does not fire; ``repeat_both``: both passes fire;
    * ``None``: an ordinary instant.

    Cheap when no transition is at hand: a few ``utcoffset`` look-ups and no cron matching.
    """
    zone = ZoneInfo(trigger.timezone)
    local = due.astimezone(zone)
    wall = local.replace(tzinfo=None)
    offset = local.utcoffset()
    before = (due - _SECOND).astimezone(zone).utcoffset()
    if before is not None and offset is not None and before < offset:
        # ``due`` is the first instant after a forward shift: the wall times the clock jumped
        # over are [due at the old offset, due at the new one).
        if trigger.gap_policy != "shift":
            return None
        skipped, _ = matched_walls(trigger, wall - (offset - before), wall, 1)
        own, _ = matched_walls(trigger, wall, wall + timedelta(minutes=1), 1)
        return "gap_shift" if skipped and not own else None
    if (
        wall.replace(tzinfo=zone, fold=0).utcoffset()
        == wall.replace(tzinfo=zone, fold=1).utcoffset()
    ):
        return None
    # A real instant whose wall time has two offsets: a pass of a repeated time.
    return _RULE_OF_REPEAT[trigger.repeat_policy]
