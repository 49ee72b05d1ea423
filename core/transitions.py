"""Each state change of a run, and the pause of a schedule, defined once.

A transition is the set of columns it writes. The one-by-one path applies it to an ORM row
(``apply``); the batched statements of ``core.storage.queries`` are built from the same
function with bind parameters in place of values, so the two paths cannot drift apart; and
the ledger applies it to the caller's in-memory run after a batch, so the loop gets back what
was written instead of rebuilding it.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from agentcron.core.states import RunReason, RunStatus

Values = dict[str, Any]


def admitted(now: Any, until: Any) -> Values:
    """An attempt starts: ``running`` under a lease to ``until`` (the attempt count and the
    first ``started_at`` are the caller's: +1, and kept if set)."""
    return {"status": RunStatus.RUNNING.value, "reason": None, "lease_expires_at": until}


def finished(status: Any, now: Any, reason: Any = None) -> Values:
    """The run ends with ``status`` (a terminal one) and ``reason``; its lease ends with it."""
    return {
        "status": status,
        "reason": reason,
        "finished_at": now,
        "lease_owner": None,
        "lease_expires_at": None,
    }


# A cancelled run says why in ``error`` too, the same whichever path ends it: the API's cancel
# of a pending run, the check before an attempt starts, or the attempt stopping on request.
CANCEL_ERRORS = {
    RunReason.CANCEL_REQUESTED: "cancelled on request",
    RunReason.SCHEDULE_DELETED: "its schedule was deleted",
}


def cancelled(now: Any, reason: RunReason = RunReason.CANCEL_REQUESTED) -> Values:
    """The run ends ``cancelled`` with ``reason`` and the error that goes with it."""
    return {**finished(RunStatus.CANCELLED, now, reason.value), "error": CANCEL_ERRORS[reason]}


def attempt_ended(status: Any, now: Any, *, asked: bool, schedule_deleted: bool) -> Values:
    """An attempt ends with ``status``. A cancelled one was asked to stop: on request
    (``asked``: the run's ``cancel_requested``), or else by its schedule's deletion, which
    its lease renewal reported."""
    if status != RunStatus.CANCELLED:
        return finished(status, now)
    deleted = schedule_deleted and not asked
    return cancelled(now, RunReason.SCHEDULE_DELETED if deleted else RunReason.CANCEL_REQUESTED)


def retry_at(when: datetime) -> Values:
    """A transient failure: back to ``pending`` until ``when``, for any replica to retry."""
    return {
        "status": RunStatus.PENDING.value,
        "reason": RunReason.RETRY.value,
        "available_at": when,
        "lease_owner": None,
        "lease_expires_at": None,
    }


def released(now: datetime) -> Values:
    """Stopped without an outcome (shutdown, an unconfirmed lease): any replica goes on now."""
    return {
        "status": RunStatus.PENDING.value,
        "reason": RunReason.RELEASED.value,
        "available_at": now,
        "lease_owner": None,
        "lease_expires_at": None,
    }


def delivering(until: Any, owner: Any) -> Values:
    """A finished run's deliveries are leased to engine ``owner`` until ``until``; both None:
    nothing (more) to deliver."""
    return {"deliver_until": until, "deliverer": owner}


def paused(now: datetime, note: str | None, since: datetime | None = None) -> Values:
    """A schedule stops taking due times (a user, the circuit breaker, a runner gone);
    ``since``: when it was paused first, for a pause that only changes its note."""
    return {
        "enabled": False,
        "next_run": None,
        "paused_at": since or now,
        "paused_note": note,
        "updated_at": now,
    }


def apply(row: Any, values: Values) -> None:
    """Write a transition onto an ORM row (or any object with those attributes)."""
    for name, value in values.items():
        setattr(row, name, value)


def apply_held(run: Any, values: Values) -> None:
    """Write a transition onto the engine's own copy of a run, one no session tracks (built
    by a claim, or read by a session since closed): straight into its attribute dict, as the
    ORM's loader fills it. ``apply``'s attribute events cost about 3 us per run recorded."""
    run.__dict__.update(values)
