"""Whether a claimed run starts now, waits, or ends without an attempt: pure, decided once.

Both run stores (``core.ledger.sql``, ``core.ledger.memory``) decide an admission here, from
what they read under their locks, and write what it says through ``core.transitions``. The
rules are the engine contract's (docs/design.md, promises 5 and 9): a cancelled run, a run of a
deleted schedule and a scheduled run of a paused one end at once; otherwise the schedule's
overlap policy is judged against its runs still going.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from agentcron.core.states import QUEUED_ORIGINS, RunReason, RunStatus
from agentcron.core.transitions import Values, cancelled, skipped


@dataclass(frozen=True)
class Candidate:
    """What an admission reads of a run it leases."""

    id: uuid.UUID
    status: str
    reason: str | None
    trigger: str
    origin: str | None
    cancel_requested: bool
    payload: dict[str, Any]  # as saved with the run: a queued run's ``overlap`` is read there

    @classmethod
    def of(cls, run: Any, payload: dict[str, Any]) -> Candidate:
        """What an admission reads of ``run`` (a run, or a row of its columns)."""
        return cls(
            run.id, run.status, run.reason, run.trigger, run.origin, run.cancel_requested, payload
        )


@dataclass(frozen=True)
class Rules:
    """What an admission reads of the run's schedule."""

    enabled: bool
    deleted: bool
    overlap: str

    @classmethod
    def of(cls, schedule: Any) -> Rules:
        """What an admission reads of ``schedule`` (a schedule, or a row of its columns)."""
        return cls(schedule.enabled, schedule.deleted_at is not None, schedule.overlap)


@dataclass
class Going:
    """A schedule's other runs, as an admission sees them and as its decisions change them:
    those executing, and whether one already waits under ``buffer_one``."""

    running: list[uuid.UUID] = field(default_factory=list)
    buffered: bool = False


@dataclass(frozen=True)
class Verdict:
    """An admission's decision: ``run`` (admit it), ``wait`` (look again shortly; ``values``
    may set its reason, ``stop`` lists the runs asked to stop for it), or ``done`` (it ends
    with ``values``)."""

    action: str
    values: Values = field(default_factory=dict)
    stop: tuple[uuid.UUID, ...] = ()


RUN = Verdict("run")


def decide(run: Candidate, rules: Rules, going: Going, now: datetime) -> Verdict:
    """Decide one admission, and update ``going`` with it (an admitted run is going now, a
    buffered one waits), so the next run of the same schedule in a batch sees it.

    Order: a cancel asked for, a deleted schedule, a paused schedule (scheduled runs only),
    then overlap. Queued runs (catch-up, backfill) wait their turn behind a running sibling,
    unless queued with overlap ``allow``. Under ``buffer_one`` the run already waiting goes
    next: a newer one is a second waiter, and is skipped. A run already ``running`` (taken
    over after its lease ran out) is admitted again, whatever its siblings."""
    if run.cancel_requested:
        return Verdict("done", cancelled(now))
    if rules.deleted:
        return Verdict("done", cancelled(now, RunReason.SCHEDULE_DELETED))
    if run.trigger == "schedule" and not rules.enabled:
        return Verdict("done", skipped(now, RunReason.PAUSED))
    policy = rules.overlap
    if run.origin in QUEUED_ORIGINS:
        policy = "allow" if run.payload.get("overlap") == "allow" else "wait"
    pending = run.status == RunStatus.PENDING
    if policy == "allow" or not pending:
        going.running.append(run.id)
        return RUN
    if policy == "buffer_one" and run.reason != RunReason.BUFFERED and going.buffered:
        return Verdict("done", skipped(now, RunReason.OVERLAP, _ALREADY_WAITING))
    if not going.running:
        going.running.append(run.id)
        if run.reason == RunReason.BUFFERED:
            going.buffered = False  # the one waiting goes: a newer run may wait in its place
        return RUN
    sibling = going.running[0]
    if policy == "skip":
        error = f"run {sibling} of this schedule was still going"
        return Verdict("done", skipped(now, RunReason.OVERLAP, error))
    if policy == "buffer_one":
        going.buffered = True
        return Verdict("wait", {"reason": RunReason.BUFFERED.value})
    if policy == "cancel_other":
        reason = {"reason": RunReason.CANCELLING_OTHER.value}
        return Verdict("wait", reason, tuple(going.running))
    return Verdict("wait")  # "wait": a queued run behind its running sibling


_ALREADY_WAITING = "one run of this schedule was already waiting"
