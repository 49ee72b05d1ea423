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

import hashlib
import uuid
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from itertools import islice
from typing import Any

from sqlalchemy.ext.asyncio import AsyncConnection, AsyncSession

from agentcron.core import triggers
from agentcron.core.states import RunReason, RunStatus
from agentcron.core.storage.models import Run, Schedule
from agentcron.core.storage.sql import runs as sql

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

    @property
    def count(self) -> int | None:
        """How many due times the gap holds; None when it stopped counting."""
        if self.rest_first is None:
            return len(self.times)
        return None if self.rest_count is None else len(self.times) + self.rest_count

    @property
    def first(self) -> datetime | None:
        return self.times[0] if self.times else self.rest_first

    @property
    def last(self) -> datetime | None:
        if self.rest_first is not None:
            return self.rest_last
        return self.times[-1] if self.times else None


def find_gap(trigger: triggers.Trigger, start: datetime, end: datetime) -> Gap:
    """The due times ``d`` of ``trigger`` with ``start <= d < end``, bounded (module doc)."""
    upcoming = triggers.fire_times(trigger, start - _TICK, until=end)
    times = list(islice(upcoming, MAX_ROWS))
    due = next(upcoming, None)
    if due is None:
        return Gap(times)
    first = last = due
    count: int | None = 1
    while True:
        if count is not None and count >= COUNT_CAP:
            count = None
            last = last_fire_before(trigger, end, last) or last
            break
        later = next(upcoming, None)
        if later is None:
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
        last = deque(triggers.fire_times(trigger, probe - _TICK, until=before), maxlen=1)
        if last:
            return last[0]
        if probe <= floor:
            return None
        step *= 2


def jitter_delay(schedule_id: uuid.UUID, due: datetime, jitter_seconds: int) -> timedelta:
    """How long after ``due`` the run of ``schedule_id`` starts: a hash of both, in
    ``[0, jitter_seconds]`` to the millisecond. Deterministic, so every replica (and a replica
    taking a run over) agrees, and different schedules due at one instant spread out."""
    digest = hashlib.sha256(f"{schedule_id}/{due.isoformat()}".encode()).digest()
    spread = jitter_seconds * 1000 + 1
    return timedelta(milliseconds=int.from_bytes(digest[:8], "big") % spread)


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
        "owner": schedule.owner,  # named in the run's trace (core.otel)
        # What the run's output must be (core.expectations); absent when nothing is expected.
        **({"expect": schedule.expect} if schedule.expect else {}),
        # The host's key, for its handler (``HandlerContext.key``); absent when there is none.
        **({"key": schedule.key} if schedule.key is not None else {}),
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
            "status": RunStatus.SKIPPED.value,
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


# -- queued runs: catch-up on resume and backfill --------------------------------------------

# Origins of runs queued for past due times. Unless asked otherwise (``overlap: allow``), they
# run one at a time, oldest first: only the head of a schedule's queue is claimable; the rest
# wait with reason QUEUED and no availability until the run before them ends (``promote_next``).
QUEUED = RunReason.QUEUED.value
NEVER = datetime(2999, 1, 1, tzinfo=UTC)  # available_at of a queued run: only promotion frees it


def queued_run(
    schedule_id: uuid.UUID, trigger: str, payload: dict[str, Any], now: datetime, by: str | None
) -> Run:
    """A run asked for now (``manual``, ``replay``): pending, nobody's, claimable now; ``by``
    is who asked."""
    return Run(
        id=uuid.uuid4(),
        schedule_id=schedule_id,
        trigger=trigger,
        origin=trigger,
        started_by=by,
        due_at=None,
        status=RunStatus.PENDING.value,
        attempt=0,
        payload=payload,
        created_at=now,
        available_at=now,
        cancel_requested=False,
    )


def queued_rows(
    schedule: Schedule,
    due_times: list[datetime],
    origin: str,
    now: datetime,
    *,
    by: str | None = None,
    one_at_a_time: bool = True,
    head_free: bool = True,
) -> list[dict[str, Any]]:
    """Pending runs for past ``due_times`` (ascending). One at a time: the first is claimable
    now when ``head_free`` (no queue of this schedule is under way), the others wait."""
    payload = run_payload(schedule)
    if not one_at_a_time:
        payload["overlap"] = "allow"  # read by the engine: these do not wait for each other
    rows = []
    for index, due in enumerate(due_times):
        waiting = one_at_a_time and (index > 0 or not head_free)
        rows.append(
            {
                "id": uuid.uuid4(),
                "schedule_id": schedule.id,
                "trigger": "schedule",
                "origin": origin,
                "started_by": by,
                "due_at": due,
                "status": RunStatus.PENDING.value,
                "reason": QUEUED if waiting else None,
                "attempt": 0,
                "payload": payload,
                "created_at": now,
                "available_at": NEVER if waiting else now,
                "cancel_requested": False,
            }
        )
    return rows


async def promote_next(
    connection: AsyncConnection | AsyncSession, schedule_ids: Iterable[uuid.UUID], now: datetime
) -> bool:
    """After a queued run of each schedule ended (its schedule's row held by the caller, so a
    backfill or a resume queueing runs at once waits for it): the schedule's oldest waiting
    run becomes claimable (``transitions.promoted``), unless another queued run of it is still
    under way (a retry pending, say). True when one was (wake the loop)."""
    promoted = False
    for schedule_id in sorted(schedule_ids):
        if await connection.scalar(sql.queue_busy(schedule_id)):
            continue
        head = await connection.scalar(sql.queue_head(schedule_id))
        if head is not None:
            await connection.execute(sql.promote(head, now))
            promoted = True
    return promoted
