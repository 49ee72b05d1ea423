"""Every state change of a run, and the follow-up of its schedule, each defined once.

A transition is the columns it writes, as a function of its inputs. Given Python values it
returns the values to store (the rows a claim inserts, the memory store's runs); given column
expressions and bind parameters it returns what a batched statement writes
(``core.storage.sql``: ``runs``, ``leases``, ``schedules``). Every writer (the claim, an
admission, a record, a release, a take-over, a promotion, a cancel) writes what one of these
functions says, so no two paths can drift apart. docs/design.md lists each transition with
its writer.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

from sqlalchemy import ColumnElement, case, func

from agentcron.core.states import FAILURES, RunReason, RunStatus

Values = dict[str, Any]


def _first(value: Any, otherwise: Any) -> Any:
    """``value`` unless it is NULL: SQL's ``coalesce`` for a column, Python's for a value."""
    if isinstance(value, ColumnElement):
        return func.coalesce(value, otherwise)
    return otherwise if value is None else value


# -- a run -------------------------------------------------------------------------------------


def admitted(now: Any, until: Any, attempt: Any, started_at: Any) -> Values:
    """pending -> running: an attempt starts under a lease to ``until``. ``attempt`` and
    ``started_at`` are the run's (a column, or the values of a row being inserted): the attempt
    count goes up by one, and the first start is kept."""
    return {
        "status": RunStatus.RUNNING.value,
        "reason": None,
        "lease_expires_at": until,
        "attempt": attempt + 1,
        "started_at": _first(started_at, now),
    }


def leased(owner: Any, until: Any, now: Any, claimed_at: Any) -> Values:
    """A claim takes a run (queued, or a lease that ran out) at ``now``: it is ``owner``'s
    until ``until``; its status stays what it was. ``claimed_at`` is the run's (a column, or a
    value): the first claim is kept."""
    return {"lease_owner": owner, "lease_expires_at": until, "claimed_at": _first(claimed_at, now)}


def finished(status: Any, now: Any, reason: Any = None) -> Values:
    """The run ends with ``status`` (a terminal one) and ``reason``; its lease ends with it."""
    return {
        "status": status,
        "reason": reason,
        "finished_at": now,
        "lease_owner": None,
        "lease_expires_at": None,
    }


def skipped(now: Any, reason: RunReason, error: str | None = None) -> Values:
    """The run ends ``skipped`` without an attempt (paused, overlap), saying why."""
    return {**finished(RunStatus.SKIPPED.value, now, reason.value), "error": error}


# A cancelled run says why in ``error`` too, the same whichever path ends it: the API's cancel
# of a pending run, an admission, or the attempt stopping on request.
CANCEL_ERRORS = {
    RunReason.CANCEL_REQUESTED: "cancelled on request",
    RunReason.SCHEDULE_DELETED: "its schedule was deleted",
}


def cancelled(now: Any, reason: RunReason = RunReason.CANCEL_REQUESTED) -> Values:
    """The run ends ``cancelled`` with ``reason`` and the error that goes with it."""
    return {
        **finished(RunStatus.CANCELLED.value, now, reason.value),
        "error": CANCEL_ERRORS[reason],
    }


def attempt_ended(status: str, now: datetime, *, asked: bool, schedule_deleted: bool) -> Values:
    """An attempt ends with ``status``. A cancelled one was asked to stop: on request
    (``asked``: the run's ``cancel_requested``), or else by its schedule's deletion, which
    its lease renewal reported."""
    if status != RunStatus.CANCELLED:
        return finished(status, now)
    deleted = schedule_deleted and not asked
    return cancelled(now, RunReason.SCHEDULE_DELETED if deleted else RunReason.CANCEL_REQUESTED)


def retry_at(when: Any) -> Values:
    """A transient failure: back to ``pending`` until ``when``, for any replica to retry."""
    return {
        "status": RunStatus.PENDING.value,
        "reason": RunReason.RETRY.value,
        "available_at": when,
        "finished_at": None,
        "lease_owner": None,
        "lease_expires_at": None,
    }


def released(now: Any) -> Values:
    """Stopped without an outcome (shutdown, an unconfirmed lease, a queued run given back):
    ``pending`` again, unleased, and any replica goes on now."""
    return {
        "status": RunStatus.PENDING.value,
        "reason": RunReason.RELEASED.value,
        "available_at": now,
        "lease_owner": None,
        "lease_expires_at": None,
    }


def promoted(now: Any) -> Values:
    """The oldest queued run of a schedule (catch-up, backfill) becomes claimable, now that the
    one before it ended."""
    return {"reason": None, "available_at": now}


def delivering(until: Any, owner: Any) -> Values:
    """A finished run's deliveries are leased to engine ``owner`` until ``until``; both None:
    nothing (more) to deliver."""
    return {"deliver_until": until, "deliverer": owner}


# -- its schedule ------------------------------------------------------------------------------


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


def streak_of(statuses: Sequence[str]) -> tuple[bool, int]:
    """What runs ending with ``statuses`` (in the order they ended) do to their schedule's
    failure streak: (``reset``, ``failures``). ``reset``: one of them succeeded, and the
    streak restarts from the failures after the last success; else ``failures`` add to it."""
    if RunStatus.SUCCEEDED not in statuses:
        return False, len(statuses)
    last_success = len(statuses) - 1 - list(statuses)[::-1].index(RunStatus.SUCCEEDED)
    return True, len(statuses) - 1 - last_success


def streak(current: Any, reset: Any, failures: Any) -> Any:
    """The failure streak after ``streak_of``'s (``reset``, ``failures``) on a schedule whose
    streak was ``current``."""
    if isinstance(current, ColumnElement):
        return case((reset, failures), else_=current + failures)
    return failures if reset else current + failures


def followed(now: Any, status: Any, error: Any, run_id: Any, failures: Any) -> Values:
    """A schedule follows the last of its runs that ended: its ``last_*`` fields and its
    failure streak (``streak``)."""
    return {
        "last_run_at": now,
        "last_status": status,
        "last_error": error,
        "last_run_id": run_id,
        "consecutive_failures": failures,
    }


def trips(status: str, streak: int, limit: int | None, enabled: bool) -> bool:
    """Whether a schedule's circuit breaker trips: its last run failed, and the streak reached
    ``pause_after_failures`` while it was enabled."""
    return status in FAILURES and limit is not None and streak >= limit and enabled


def breaker_note(streak: int, limit: int, error: str | None) -> str:
    """The pause note of a schedule whose circuit breaker tripped."""
    return (
        f"paused by agentcron after {streak} failed runs in a row"
        f" (pause_after_failures={limit}); last error: {error}"
    )


def apply(row: Any, values: Values) -> None:
    """Write a transition onto an ORM row (or any object with those attributes)."""
    for name, value in values.items():
        setattr(row, name, value)


def apply_held(run: Any, values: Values) -> None:
    """Write a transition onto the engine's own copy of a run, one no session tracks (built
    by a claim, or read by a session since closed): straight into its attribute dict, as the
    ORM's loader fills it. ``apply``'s attribute events cost about 3 us per run recorded."""
    run.__dict__.update(values)
