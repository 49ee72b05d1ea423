"""Planning a claim: pure, no database, no clock.

``plan_due_times`` decides, for one due schedule, which due times get a run, which were missed
and how they are accounted for (``core.timeline``), and the schedule's next ``next_run``
(docs/design.md, promise 4). ``plan_claim`` turns the due schedules of a claim into the rows it
writes, the same for every run store.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from agentcron.core import triggers
from agentcron.core.keys import check_owner
from agentcron.core.logging import get_logger
from agentcron.core.states import RunReason, RunStatus
from agentcron.core.storage.models import Schedule
from agentcron.core.timeline import (
    Gap,
    find_gap,
    gap_rows,
    jitter_delay,
    last_fire_before,
    run_payload,
)
from agentcron.core.transitions import admitted, leased

log = get_logger(__name__)

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


# Every column of a run a claim writes, with the value of those a row leaves out.
_RUN_DEFAULTS: dict[str, Any] = {
    "reason": None,
    "attempt": 0,
    "started_at": None,
    "task_id": None,
    "finished_at": None,
    "lease_owner": None,
    "lease_expires_at": None,
    "claimed_at": None,
    "dst_rule": None,
    "covers": None,
    "covers_until": None,
}


@dataclass
class ClaimPlan:
    """What a claim writes: ``runs`` (rows of every column ``core.storage.sql.runs`` inserts:
    the runs of due times and the skipped rows accounting for the others), ``tasks`` (the fresh
    task of each independent run, by run id), ``advances`` (each schedule's next due time), and
    which runs it admits itself (``starting``)."""

    runs: list[dict[str, Any]] = field(default_factory=list)
    tasks: dict[uuid.UUID, dict[str, Any]] = field(default_factory=dict)
    advances: list[dict[str, Any]] = field(default_factory=list)
    starting: set[uuid.UUID] = field(default_factory=set)


def plan_claim(
    schedules: Sequence[Schedule],
    now: datetime,
    *,
    owner: str,
    until: datetime,
    start: int,
    workdir: Callable[[str, uuid.UUID], str],
) -> ClaimPlan:
    """The rows a claim at ``now`` by engine ``owner`` (leases to ``until``) writes for the due
    ``schedules``. A run that needs no look at other runs (isolated, overlap ``allow``, no
    jitter ahead of it) gets its fresh task now (``workdir`` names its directory), and up to
    ``start`` of them are admitted by the claim itself (``transitions.admitted``). A schedule
    that cannot be planned is taken off the timetable (``next_run`` None) and logged: one
    unreadable schedule must not block every claim after it."""
    plan = ClaimPlan()
    for schedule in schedules:
        try:
            due = plan_due_times(schedule, now)
            check_owner(schedule.owner)  # its task directories are named after it
        except Exception:
            log.exception("schedule_unplannable", schedule_id=str(schedule.id))
            plan.advances.append(
                {"id": schedule.id, "next_run": None, "scheduled_runs": schedule.scheduled_runs}
            )
            continue
        if due.missed:
            log.info(
                "due_times_missed",
                schedule_id=str(schedule.id),
                missed=due.missed,
                catchup=schedule.catchup,
            )
        payload = run_payload(schedule)
        if due.gap:
            for row in gap_rows(schedule, due.gap, due.gap_reason, now, payload):
                plan.runs.append({**_RUN_DEFAULTS, **row})
        independent = schedule.overlap == "allow" and schedule.mode == "isolated"
        schedule_id, schedule_owner = schedule.id, schedule.owner
        for at in due.run_at:
            row = _planned(schedule, at, now, owner, until, payload, due)
            plan.runs.append(row)
            if not independent:
                continue
            row["task_id"] = task_id = uuid.uuid4()
            directory = workdir(schedule_owner, schedule_id)
            plan.tasks[row["id"]] = new_task(task_id, schedule_id, schedule_owner, directory, now)
            if row["available_at"] <= now and len(plan.starting) < start:
                row.update(admitted(now, until, 0, None))
                plan.starting.add(row["id"])
        plan.advances.append(
            {
                "id": schedule.id,
                "next_run": due.next_run,
                "scheduled_runs": (schedule.scheduled_runs or 0) + len(due.run_at),
            }
        )
    return plan


def new_task(
    task_id: uuid.UUID, schedule_id: uuid.UUID, owner: str, workdir: str, now: datetime
) -> dict[str, Any]:
    """A fresh task of a schedule, empty and unlocked, as a row."""
    return {
        "id": task_id,
        "schedule_id": schedule_id,
        "owner": owner,
        "workdir": workdir,
        "conversation": [],
        "created_at": now,
        "updated_at": now,
    }


def _planned(
    schedule: Schedule,
    at: datetime,
    now: datetime,
    owner: str,
    until: datetime,
    payload: dict[str, Any],
    due: DuePlan,
) -> dict[str, Any]:
    """The pending run of due time ``at``, leased to ``owner``; a jittered one is available
    later."""
    jitter = schedule.jitter_seconds
    available_at = max(now, at + jitter_delay(schedule.id, at, jitter)) if jitter else now
    return {
        **_RUN_DEFAULTS,
        "id": uuid.uuid4(),
        "schedule_id": schedule.id,
        "trigger": "schedule",
        "due_at": at,
        "origin": "catchup" if at == due.caught_up else "schedule",
        "status": RunStatus.PENDING.value,
        "payload": payload,
        "created_at": now,
        "available_at": available_at,
        **leased(owner, until, now, None),  # claimed now, as a queued run is when taken
        "cancel_requested": False,
        "dst_rule": due.dst_rules.get(at),
    }
