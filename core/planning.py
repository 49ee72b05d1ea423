"""Planning a due schedule's runs at a claim: pure, no database, no clock.

``plan_due_times`` decides which due times get a run, which were missed and how they are
accounted for (``core.timeline``), and the schedule's next ``next_run`` (docs/design.md,
promise 4).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta

from agentcron.core import triggers
from agentcron.core.states import RunReason
from agentcron.core.storage.models import Schedule
from agentcron.core.timeline import Gap, find_gap, last_fire_before

MAX_DUE_PER_CLAIM = 100  # due times of one schedule handled per claim; the rest stay due


@dataclass(frozen=True)
class DuePlan:
    """What a claim does with one due schedule: the due times that get a run, the gap of those
    that do not (each accounted for by a ``skipped`` row, see ``core.timeline``), how many were
    missed, and the schedule's next ``next_run``."""

    run_at: list[datetime]
    missed: int
    next_run: datetime | None
    gap: Gap = field(default_factory=lambda: Gap([]))
    gap_reason: str = RunReason.MISSED
    caught_up: datetime | None = None  # the missed due time catch-up ``latest`` runs
    # The DST rule that decided each due time of ``run_at`` that one decided (cron only).
    dst_rules: dict[datetime, str] = field(default_factory=dict)


def plan_due_times(schedule: Schedule, now: datetime) -> DuePlan:
    """Decide the runs of one due schedule at ``now`` (pure).

    A due time ``d <= now`` with ``now - d <= misfire_grace_seconds`` gets a run. Older ones
    were missed: with catch-up ``skip`` they are not run (reason ``missed``); with ``latest``
    the most recent missed one runs once, if it is within ``catchup_window_seconds`` and no
    on-time due time already runs, and the others are folded into it (reason ``coalesced``).
    Missed due times are never enumerated beyond ``core.timeline``'s bound: the plan jumps to
    the grace boundary and finds the latest missed one by probing back in doubling steps, so
    a year-long outage costs about what a minute-long one does, whatever the catch-up window.
    """
    assert schedule.next_run is not None
    trigger = triggers.trigger_from_dict(schedule.trigger)
    grace = timedelta(seconds=schedule.misfire_grace_seconds)
    window = timedelta(seconds=schedule.catchup_window_seconds)
    boundary = now - grace  # a due time at or after this is on time
    missed = 0
    latest_missed: datetime | None = None
    due: datetime | None = schedule.next_run
    late = schedule.next_run < boundary
    if late:
        missed += 1  # at least next_run itself; the rest of the jump is not counted
        if schedule.catchup == "latest":
            floor = max(schedule.next_run, now - window)
            latest_missed = last_fire_before(trigger, boundary, floor)
        due = triggers.next_fire(trigger, boundary - timedelta(microseconds=1))
    on_time: list[datetime] = []
    while due is not None and due <= now and len(on_time) < MAX_DUE_PER_CLAIM:
        on_time.append(due)
        due = triggers.next_fire(trigger, due)
    run_at = on_time
    if schedule.catchup == "latest" and not on_time and latest_missed is not None:
        run_at = [latest_missed]
        missed -= 1
    if schedule.max_runs is not None:
        # The bound is on due times the timetable takes; the last one ends it.
        room = max(0, schedule.max_runs - (schedule.scheduled_runs or 0))
        if len(run_at) >= room:
            run_at, due = run_at[:room], None
    dst_rules = _dst_rules(trigger, run_at)
    if not late:
        return DuePlan(run_at=run_at, missed=missed, next_run=due, dst_rules=dst_rules)
    # The gap ends before the caught-up run, which is the last due time before the boundary.
    gap_end = latest_missed if latest_missed is not None and run_at == [latest_missed] else boundary
    return DuePlan(
        run_at=run_at,
        missed=missed,
        next_run=due,
        gap=find_gap(trigger, schedule.next_run, gap_end),
        gap_reason=(
            RunReason.COALESCED if schedule.catchup == "latest" and run_at else RunReason.MISSED
        ),
        caught_up=gap_end if gap_end is latest_missed else None,
        dst_rules=dst_rules,
    )


def _dst_rules(trigger: triggers.Trigger, due_times: list[datetime]) -> dict[datetime, str]:
    """``triggers.dst_rule`` of each due time that has one (cron triggers only: the others
    follow real time)."""
    if not isinstance(trigger, triggers.CronTrigger):
        return {}
    rules = {due: triggers.dst_rule(trigger, due) for due in due_times}
    return {due: rule for due, rule in rules.items() if rule is not None}
