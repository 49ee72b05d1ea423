"""What a record writes, decided once for every run store: the values of each outcome, and
what each schedule does when its runs end (its ``last_*`` fields, its failure streak, its
circuit breaker). Pure: the stores read and write, these functions decide."""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from agentcron.core.ledger.deliveries import delivery_lease
from agentcron.core.ledger.store import Outcome, error_excerpt, output_excerpt
from agentcron.core.states import QUEUED_ORIGINS, RunReason, RunStatus
from agentcron.core.transitions import (
    Values,
    attempt_ended,
    breaker_note,
    delivering,
    retry_at,
    streak_of,
    trips,
)

_UNLEASED = delivering(None, None)


def written(
    outcome: Outcome,
    now: datetime,
    *,
    asked: bool,
    deleted: bool,
    until: datetime,
    owner: str,
    ends: dict[tuple[str, bool, bool], Values],
) -> Values:
    """What a record writes onto the outcome's run (``id`` included): its end
    (``attempt_ended``; ``asked`` and ``deleted`` say why a cancelled one stopped) with its
    delivery lease to ``until``, or its retry (``retry_at``). An output, result or
    availability it does not give is left out: the run keeps the one it has. ``ends`` keeps
    the ends of one batch, which most of its runs share."""
    run = outcome.run
    values: Values = {"id": run.id, "error": error_excerpt(outcome.error)}
    if outcome.output is not None:
        values["output"] = output_excerpt(outcome.output)
    if outcome.output_at is not None:
        values["output_at"] = outcome.output_at
    if outcome.result is not None:
        values["result"] = outcome.result
    if outcome.retry_at is not None:
        values.update(retry_at(outcome.retry_at))
        values.update(_UNLEASED)
        return values
    key = (outcome.status, asked, deleted)
    end = ends.get(key)
    if end is None:
        end = ends[key] = attempt_ended(outcome.status, now, asked=asked, schedule_deleted=deleted)
    values.update(end)
    notify = run.payload.get("notify")
    lease = delivery_lease(notify, end["status"], end["reason"], until, owner) if notify else None
    values.update(lease or _UNLEASED)
    return values


@dataclass(slots=True)
class FollowUp:
    """What a schedule follows after some of its runs ended: the last one (``last``, what was
    written of it) and ``streak_of`` all of them."""

    last: Outcome
    values: Values
    reset: bool
    failures: int

    def row(self, schedule_id: uuid.UUID) -> dict[str, Any]:
        """The schedule's row of ``core.storage.sql.schedules.FOLLOW_UP``."""
        return {
            "id": schedule_id,
            "status": self.values["status"],
            "error": self.values["error"],
            "run_id": self.values["id"],
            "reset": self.reset,
            "failures": self.failures,
        }


def follow_ups(
    ended: Sequence[tuple[Outcome, Values]],
) -> tuple[dict[uuid.UUID, FollowUp], set[uuid.UUID]]:
    """For each schedule of the runs ``ended`` (an outcome and what was written, in the order
    given), what it follows; and the schedules whose queued run (catch-up, backfill) ended."""
    runs: dict[uuid.UUID, list[tuple[Outcome, Values]]] = {}
    queued: set[uuid.UUID] = set()
    for outcome, values in ended:
        run = outcome.run
        schedule_id = run.schedule_id
        runs.setdefault(schedule_id, []).append((outcome, values))
        if run.origin in QUEUED_ORIGINS:
            queued.add(schedule_id)
    follow = {}
    for schedule_id, done in runs.items():
        last, values = done[-1]
        if len(done) == 1:  # the usual case: one run of the schedule in the batch
            status = values["status"]
            reset, failures = (True, 0) if status == RunStatus.SUCCEEDED else (False, 1)
        else:
            reset, failures = streak_of([values["status"] for _, values in done])
        follow[schedule_id] = FollowUp(last, values, reset, failures)
    return follow, queued


def pause_after(
    follow: FollowUp,
    streak: int,
    limit: int | None,
    enabled: bool,
    *,
    until: datetime,
    owner: str,
) -> tuple[str | None, Values]:
    """Whether the schedule ``follow`` is about, with the failure streak ``streak`` the
    record left, is paused, and why (its pause note, else None); and what its last run says
    of it: the run that trips the circuit breaker has reason ``circuit_breaker`` and is
    delivered to every channel. A runner that can no longer work (``pause_schedule``) pauses
    it too."""
    run = follow.last.run
    status = follow.values["status"]
    if trips(status, streak, limit, enabled):
        assert limit is not None
        reason = RunReason.CIRCUIT_BREAKER.value
        notify: Sequence[Mapping[str, Any]] = run.payload.get("notify") or ()
        lease = delivery_lease(notify, status, reason, until, owner)
        note = breaker_note(streak, limit, follow.values["error"] or status)
        return note, {"reason": reason, **lease}
    if follow.last.pause_schedule and enabled:
        return f"paused by agentcron: {follow.values['error']}", {}
    return None, {}
