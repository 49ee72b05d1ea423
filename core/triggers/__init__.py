"""Due-time arithmetic: cron, interval and one-shot triggers, time zones, DST, validation.

Everything here is a pure function of its arguments: the current time is always passed in
(``now`` / ``after``), never read. The meaning of cron (docs/design.md, promise 1) is decided
by our own parser (:mod:`core.triggers.cron`), which also answers "which naive wall-clock
minute matches next?" from the parsed value sets, and the DST rules (promise 2) are applied
with :mod:`zoneinfo` by :mod:`core.triggers.search`. The trigger kinds, their validation and
stored form live in :mod:`core.triggers.kinds`, the English descriptions in
:mod:`core.triggers.describe`.

Cron meaning (Debian / Vixie cron):

* 5 fields ``minute hour day-of-month month day-of-week`` or an ``@macro``;
* lists, ranges, ``*/n`` and ``a-b/n`` steps, 3-letter month and weekday names;
* day-of-week 0 and 7 are Sunday; ``a-a`` is the single value ``a``; a reversed range
  (``FRI-MON``, hour ``22-2``) wraps around the end of its cycle;
* day-of-month and day-of-week both restricted: a day matches if either matches; if either
  field starts with ``*``: both must match.

DST rules, given the naive local times ``L`` the expression matches in the trigger's zone:

* ``L`` occurs once: fire at that instant;
* ``L`` occurs twice (autumn fold): by ``dst_repeat``: ``first`` fires at the first occurrence
  only, ``last`` at the second only, ``both`` at both;
* ``L`` does not occur (spring gap): by ``dst_gap``: ``shift`` fires at the first instant
  after the gap, ``skip`` does not fire for it;
* the fire times are a set of instants: several times shifted to one instant fire once.

Without a policy of its own a trigger follows the contract: a fixed-time job ``shift`` and
``first``, a wildcard job (minute or hour field starting with ``*``) ``skip`` and ``both``.
``dst_rule`` says afterwards which of these rules decided a due time.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from itertools import islice
from zoneinfo import ZoneInfo

from agentcron.core.triggers.cron import is_wildcard_job
from agentcron.core.triggers.describe import clock_time, describe, offset_label
from agentcron.core.triggers.kinds import (
    KIND_KEYS,
    MAX_INTERVAL_SECONDS,
    CronTrigger,
    IntervalTrigger,
    OneShotTrigger,
    Trigger,
    parse_trigger,
    require_aware,
    restated,
    trigger_from_dict,
    trigger_to_dict,
)
from agentcron.core.triggers.search import dst_rule as _cron_dst_rule
from agentcron.core.triggers.search import next_cron

__all__ = [
    "KIND_KEYS",
    "MAX_INTERVAL_SECONDS",
    "CronTrigger",
    "IntervalTrigger",
    "OneShotTrigger",
    "Trigger",
    "clock_time",
    "describe",
    "dst_rule",
    "fire_times",
    "in_zone",
    "is_wildcard_job",
    "next_fire",
    "offset_label",
    "parse_trigger",
    "preview",
    "restated",
    "trigger_from_dict",
    "trigger_to_dict",
]


def next_fire(trigger: Trigger, after: datetime) -> datetime | None:
    """The smallest fire instant strictly after ``after``, in UTC, or ``None`` if there is none.

    ``after`` is an aware datetime in any zone (``ValueError`` if naive). The result is a pure
    function of the instant ``after``: asking from inside the second pass of a repeated hour
    never returns a first-pass instant, and never anything at or before ``after``.

    * cron: the instants the DST rules of the module docstring give in the trigger's zone;
    * interval: the smallest ``start_at + k * every_seconds`` (k >= 0) after ``after``, so a
      future ``start_at`` is itself the first fire;
    * one-shot: ``at`` if it lies after ``after``, else ``None``.

    Every answer is UTC, so callers compare and store instants without converting; to show one
    in the trigger's own zone, ``in_zone``.
    """
    moment = require_aware(after, "after")
    if isinstance(trigger, CronTrigger):
        if trigger.start_at is not None and moment < trigger.start_at:
            moment = trigger.start_at - timedelta(microseconds=1)  # start_at itself may fire
        found = next_cron(trigger, moment)
        if found is None or (trigger.end_at is not None and found > trigger.end_at):
            return None
        return found.astimezone(UTC)
    if isinstance(trigger, IntervalTrigger):
        start = trigger.start_at.astimezone(UTC)
        if start > moment:
            fire = start
        else:
            every = timedelta(seconds=trigger.every_seconds)
            try:
                fire = start + ((moment - start) // every + 1) * every
            except OverflowError:
                return None
        return None if trigger.end_at is not None and fire > trigger.end_at else fire
    at = trigger.at.astimezone(UTC)
    return at if at > moment else None


def fire_times(
    trigger: Trigger, after: datetime, until: datetime | None = None
) -> Iterator[datetime]:
    """Successive fire instants (UTC) strictly after ``after`` and, given ``until``, before it.

    The one loop over due times: previews, plans, gaps and warnings take from it what they
    need (``itertools.islice`` for a count)."""
    due = next_fire(trigger, after)
    while due is not None and (until is None or due < until):
        yield due
        due = next_fire(trigger, due)


def in_zone(trigger: Trigger, instant: datetime) -> datetime:
    """``instant`` as the trigger's own clock shows it: a cron trigger's zone, else UTC."""
    zone = ZoneInfo(trigger.timezone) if isinstance(trigger, CronTrigger) else UTC
    return instant.astimezone(zone)


def dst_rule(trigger: Trigger, due: datetime) -> str | None:
    """Which DST rule decided the fire instant ``due`` of ``trigger``: ``gap_shift``,
    ``repeat_first``, ``repeat_last``, ``repeat_both``, or ``None`` for an ordinary instant
    (and always for interval and one-shot triggers). ``ValueError`` if ``due`` is naive.
    Costs a few microseconds unless ``due`` is at a UTC-offset transition."""
    moment = require_aware(due, "due")
    if not isinstance(trigger, CronTrigger):
        return None
    return _cron_dst_rule(trigger, moment)


def preview(trigger: Trigger, after: datetime, count: int) -> list[datetime]:
    """Up to ``count`` successive fire instants (UTC) strictly after ``after``."""
    return list(islice(fire_times(trigger, after), count))
