"""The states a run goes through, and why it is in one: defined here once, used everywhere.

A run is ``pending`` (claimed, waiting for its start, a retry, a lock or its turn), then
``running`` (an attempt admitted under a lease), then one of the terminal statuses. ``reason``
says why a run is where it is when its status alone does not (``skipped`` by ``overlap`` or
``paused``, ``pending`` for a ``retry``...). Both are stored as plain strings, so the values
are the API's and the database's; ``StrEnum`` members compare equal to those strings.
"""

from __future__ import annotations

from enum import StrEnum


class RunStatus(StrEnum):
    PENDING = "pending"
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    TIMED_OUT = "timed_out"
    CANCELLED = "cancelled"
    SKIPPED = "skipped"


class RunReason(StrEnum):
    # pending
    RETRY = "retry"  # a transient failure: tried again at ``available_at``
    RELEASED = "released"  # given back at shutdown (or an unconfirmed lease): any replica goes on
    BUFFERED = "buffered"  # overlap ``buffer_one``: the one run waiting for the running one
    CANCELLING_OTHER = "cancelling_other"  # overlap ``cancel_other``: waiting for it to stop
    QUEUED = "queued"  # catch-up or backfill: waits for the run before it to end
    # skipped
    MISSED = "missed"  # due while the engine was down, past its grace, catch-up ``skip``
    COALESCED = "coalesced"  # folded into the one catch-up ``latest`` run
    PAUSED = "paused"  # due while its schedule was paused
    OVERLAP = "overlap"  # overlap ``skip`` or a second ``buffer_one`` waiter
    OCCURRENCE_SKIPPED = "occurrence_skipped"  # skipped ahead of time on request
    # cancelled
    CANCEL_REQUESTED = "cancel_requested"  # cancelled before it started
    SCHEDULE_DELETED = "schedule_deleted"
    # failed
    CIRCUIT_BREAKER = "circuit_breaker"  # the failure that paused its schedule


# Tuples of plain strings: they go into SQL ``IN`` lists as they are.
ACTIVE: tuple[str, ...] = (RunStatus.PENDING.value, RunStatus.RUNNING.value)
TERMINAL: tuple[str, ...] = tuple(status.value for status in RunStatus if status not in ACTIVE)
FAILURES: tuple[str, ...] = (RunStatus.FAILED.value, RunStatus.TIMED_OUT.value)
# Origins of runs queued for past due times (catch-up on resume, backfill): unless asked
# otherwise they run one at a time, oldest first (``core.timeline``).
QUEUED_ORIGINS: tuple[str, ...] = ("catchup", "backfill")
