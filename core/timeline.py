"""The schedule's timeline: every due time gets a run row, including those that did not run.

"Why did my 08:00 run not happen?" is answered by the ledger itself. A due time that does not
run is written as a run with status ``skipped`` and a machine-readable ``reason``:

- ``missed``: no process was running at the time (catch-up ``skip``);
- ``coalesced``: folded into a later run by catch-up ``latest``;
- ``paused``: the schedule was paused then;
- ``overlap``: the task was busy (written by the engine when the run would start).

A gap is written one row per due time up to ``MAX_ROWS``; the rest of it is one summary row
whose ``covers`` says how many due times it stands for (up to ``COUNT_CAP``; null beyond) and
``covers_until`` the last of them, so a year-long outage writes a dozen rows, not a year of
them, and costs a bounded amount of trigger arithmetic.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from core import triggers
from core.storage import Schedule

MAX_ROWS = 10  # due times of one gap written one row each
COUNT_CAP = 30  # a summary row counts its due times up to this many (cron: ~0.1 ms each)
_TICK = timedelta(microseconds=1)


@dataclass(frozen=True)
class Gap:
    """The due times in ``[start, end)`` that do not run: ``times`` one row each, then
    (when there are more) one summary from ``rest_first`` to ``rest_last``."""

    times: list[datetime]
    rest_first: datetime | None = None
    rest_last: datetime | None = None
    rest_count: int | None = None  # None: more than COUNT_CAP (or unknown)

    def __bool__(self) -> bool:
        return bool(self.times) or self.rest_first is not None


def utc(value: datetime | None) -> datetime | None:
    return None if value is None else value.astimezone(UTC)


def find_gap(trigger: triggers.Trigger, start: datetime, end: datetime) -> Gap:
    """The due times ``d`` of ``trigger`` with ``start <= d < end``, bounded (module doc)."""
    times: list[datetime] = []
    due = utc(triggers.next_fire(trigger, start - _TICK))
    while due is not None and due < end and len(times) < MAX_ROWS:
        times.append(due)
        due = utc(triggers.next_fire(trigger, due))
    if due is None or due >= end:
        return Gap(times)
    first = last = due
    count: int | None = 1
    while True:
        if count is not None and count >= COUNT_CAP:
            count = None
            last = last_fire_before(trigger, end, last) or last
            break
        later = utc(triggers.next_fire(trigger, last))
        if later is None or later >= end:
            break
        last = later
        if count is not None:
            count += 1
    return Gap(times, first, last, count)


def last_fire_before(
    trigger: triggers.Trigger, before: datetime, floor: datetime
) -> datetime | None:
    """The latest fire time in ``[floor, before)``, or None. Probes back from ``before`` in
    doubling steps, so the cost grows with log(distance), not with the fire times skipped."""
    step = timedelta(seconds=1)
    while True:
        probe = max(before - step, floor)
        found = utc(triggers.next_fire(trigger, probe - _TICK))
        if found is not None and found < before:
            later = utc(triggers.next_fire(trigger, found))
            while later is not None and later < before:
                found, later = later, utc(triggers.next_fire(trigger, later))
            return found
        if probe <= floor:
            return None
        step *= 2


def run_payload(schedule: Schedule) -> dict[str, Any]:
    """The snapshot a run keeps of its schedule, so replays re-run exactly what ran."""
    return {
        "name": schedule.name,
        "prompt": schedule.prompt,
        "runner": schedule.runner,
        "notify": schedule.notify,
        "timeout_seconds": schedule.timeout_seconds,
        "max_attempts": schedule.max_attempts,
        "mode": schedule.mode,
    }


def gap_rows(
    schedule: Schedule, gap: Gap, reason: str, now: datetime, payload: dict[str, Any] | None = None
) -> list[dict[str, Any]]:
    """The run rows that account for ``gap``: finished, ``skipped`` with ``reason``. Inserted
    with ON CONFLICT DO NOTHING, so a due time that has a run already keeps it."""
    payload = payload if payload is not None else run_payload(schedule)

    def row(due: datetime, covers: int | None, until: datetime | None) -> dict[str, Any]:
        return {
            "id": uuid.uuid4(),
            "schedule_id": schedule.id,
            "trigger": "schedule",
            "origin": "schedule",
            "due_at": due,
            "status": "skipped",
            "reason": reason,
            "attempt": 0,
            "payload": payload,
            "created_at": now,
            "available_at": now,
            "finished_at": now,
            "cancel_requested": False,
            "covers": covers,
            "covers_until": until,
        }

    rows = [row(due, 1, due) for due in gap.times]
    if gap.rest_first is not None:
        rows.append(row(gap.rest_first, gap.rest_count, gap.rest_last))
    return rows
