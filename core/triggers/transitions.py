"""Where a cron trigger meets a UTC-offset transition of its zone, within a bounded window.

``dst_events`` lists, for each transition of the trigger's zone in a window, the local times the
expression matches that the clock jumps over (a spring gap) or reads twice (an autumn repeated
hour). What then fires is the trigger's policy (``CronTrigger.gap_policy`` and
``repeat_policy``); this module only finds the places where a policy applies, for warnings.
zoneinfo does not expose its transition table, so transitions are found by probing the offset
once a day and bisecting to the second where it changed (every current zone keeps an offset
for weeks; two changes within one day that cancel out would go unseen).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta
from typing import Final
from zoneinfo import ZoneInfo

from agentcron.core.triggers.kinds import CronTrigger
from agentcron.core.triggers.search import matched_walls

_PROBE: Final = timedelta(days=1)
_SECOND: Final = timedelta(seconds=1)


@dataclass(frozen=True)
class Transition:
    """The zone's offset changes from ``before`` to ``after`` at the instant ``at`` (UTC)."""

    at: datetime
    before: timedelta
    after: timedelta

    @property
    def forward(self) -> bool:
        """Clocks go forward (a gap of local times) rather than back (a repeated span)."""
        return self.after > self.before

    @property
    def wall_before(self) -> datetime:
        """The naive local time the clock showed as the transition began."""
        return (self.at + self.before).replace(tzinfo=None)

    @property
    def wall_after(self) -> datetime:
        """The naive local time the clock shows right after the transition."""
        return (self.at + self.after).replace(tzinfo=None)


@dataclass(frozen=True)
class DstEvent:
    """Matched local times that a transition skips (``kind`` "gap") or repeats ("repeat")."""

    kind: str
    transition: Transition
    walls: list[datetime]  # naive local times, ascending
    more: bool  # the expression matches more times in the span than ``walls`` lists

    @property
    def local_date(self) -> date:
        """The local date of the change (of the wall clock just before it)."""
        return self.transition.wall_before.date()


def _offset(zone: ZoneInfo, instant: datetime) -> timedelta:
    offset = instant.astimezone(zone).utcoffset()
    assert offset is not None  # a ZoneInfo always has one
    return offset


def transitions(zone: ZoneInfo, start: datetime, end: datetime) -> list[Transition]:
    """The offset changes of ``zone`` in ``(start, end]`` (aware instants), in order."""
    found: list[Transition] = []
    low, low_offset = start.astimezone(UTC), _offset(zone, start)
    while low < end:
        high = min(low + _PROBE, end.astimezone(UTC))
        high_offset = _offset(zone, high)
        if high_offset != low_offset:
            # Bisect to the first second with the new offset; tzdata changes on whole seconds.
            lo, hi = int(low.timestamp()), int(high.timestamp()) + 1
            while hi - lo > 1:
                mid = (lo + hi) // 2
                if _offset(zone, datetime.fromtimestamp(mid, UTC)) == low_offset:
                    lo = mid
                else:
                    hi = mid
            at = datetime.fromtimestamp(hi, UTC)
            found.append(Transition(at, _offset(zone, at - _SECOND), _offset(zone, at)))
        low, low_offset = high, high_offset
    return found


def dst_events(
    trigger: CronTrigger, start: datetime, end: datetime, limit: int = 12
) -> list[DstEvent]:
    """The transitions in ``(start, end]`` at which the expression matches a skipped or a
    repeated local time, with up to ``limit`` of those times each. The cost is about one
    offset look-up per day of the window plus one cron search per transition."""
    events: list[DstEvent] = []
    for change in transitions(ZoneInfo(trigger.timezone), start, end):
        # Skipped: [wall_before, wall_after); repeated: [wall_after, wall_before).
        low = min(change.wall_before, change.wall_after)
        high = max(change.wall_before, change.wall_after)
        walls, more = matched_walls(trigger, low, high, limit)
        if walls:
            events.append(DstEvent("gap" if change.forward else "repeat", change, walls, more))
    return events
