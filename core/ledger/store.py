"""The run store's contract: what the engine may rely on after each verb, and what they take
and give back.

Two stores keep it: ``core.ledger.sql.SqlRunStore`` (SQLite or PostgreSQL) and
``core.ledger.memory.MemoryRunStore`` (dicts, for tests of the engine's logic); one contract
suite (``tests/contract``) runs against both, the SQL one on both databases. The loop
(``web.engine.loop``), the run engine (``web.engine.run``), the lease keeper
(``web.engine.leases``) and deliveries (``web.engine.delivery``) depend on this protocol
only. Every verb is one transaction. "Ours" means leased to this instance (``lease_owner`` is
its id); a verb never touches a run that is not ours, except a claim taking over a lease that
ran out. Rows are locked in one order by every verb that locks several: runs in id order, then
their schedules in id order, then tasks.
"""

from __future__ import annotations

import uuid
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Protocol

from agentcron.core.storage.database import Database
from agentcron.core.storage.models import Run

OUTPUT_EXCERPT_CHARS = 64 * 1024
ERROR_CHARS = 8 * 1024


def output_excerpt(text: str | None) -> str | None:
    """What a run keeps of an agent's output: its tail, where the outcome usually is."""
    return text[-OUTPUT_EXCERPT_CHARS:] if text else text


def error_excerpt(text: str | None) -> str | None:
    """What a run (and its schedule's ``last_error``) keeps of an error: its tail."""
    return text[-ERROR_CHARS:] if text else text


@dataclass
class Claim:
    """The result of one ``claim_due_jobs``: runs now leased to the caller."""

    runs: list[Run]
    full: bool  # the batch limit was reached: claim again at once
    recovered: int = 0  # runs taken over from an expired lease
    # Runs whose task was made with the claim and whose schedule lets them start without a
    # look at its other runs (isolated, overlap ``allow``): run id -> task working directory.
    # The engine may admit them ahead of a free slot.
    prepared: dict[uuid.UUID, str] = field(default_factory=dict)
    # Runs the claim admitted (``running``, attempt 1, their task made): run id -> working
    # directory. They start at once, with no admission of their own.
    started: dict[uuid.UUID, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Outcome:
    """What one attempt came to, for ``record``: the run (which the record updates to what it
    wrote) and its ``status``: ``succeeded``, ``failed``, ``timed_out`` or ``cancelled``, or
    ``pending`` with ``retry_at`` (a transient failure, tried again then)."""

    run: Run
    status: str
    output: str | None = None  # None keeps the output the run has
    output_at: datetime | None = None  # when the agent returned it; None keeps the run's
    error: str | None = None
    result: dict[str, Any] | None = None  # a handler's JSON object (``RunOutcome.result``)
    retry_at: datetime | None = None
    turns: Sequence[Mapping[str, Any]] = ()  # chat turns of a success, kept once per run
    pause_schedule: bool = False  # its runner can no longer work: the schedule is paused


class TaskRef(Protocol):
    """What an attempt needs of its task."""

    @property
    def id(self) -> uuid.UUID: ...
    @property
    def workdir(self) -> str: ...
    @property
    def conversation(self) -> list[dict[str, Any]]: ...


@dataclass(frozen=True, slots=True)
class PreparedTask:
    """The task an admitted attempt runs in, as the admission found or made it."""

    id: uuid.UUID
    workdir: str
    conversation: list[dict[str, Any]] = field(default_factory=list)


@dataclass(frozen=True)
class StartDecision:
    """What ``admit`` decided for a run: ``run`` (its attempt is admitted: ``run`` as written,
    ``task`` to run in), ``wait`` (nothing changed but perhaps its reason: look again
    shortly), ``done`` (it ended without an attempt: ``run`` as written) or ``lost`` (not ours
    any more, or not active: nothing written)."""

    action: str
    run: Run | None = None
    task: TaskRef | None = None


@dataclass(frozen=True)
class Wakeup:
    """What ``next_wakeup`` found: the earliest instant a claim could find work, and the
    earliest delivery lease to run out (None: nothing of that kind). With liveness
    (PostgreSQL): whether other owners hold active runs (``watching``: look again soon), and
    which of them hold no liveness lock (``lockless``: perhaps dead, ``core.storage.liveness``)."""

    work: datetime | None
    deliveries: datetime | None
    leased: bool = False  # some active run is leased (by anyone): a predecessor may have some
    watching: bool = False
    lockless: frozenset[str] = frozenset()

    @property
    def at(self) -> datetime | None:
        """The earliest of the two: when the loop has something to look at."""
        times = [value for value in (self.work, self.deliveries) if value is not None]
        return min(times) if times else None


class DeliveryStore(Protocol):
    """The delivery leases of finished runs (``Run.deliver_until``): a run ``record`` ended
    with a channel to deliver to is ours to deliver until its lease runs out."""

    async def renew(self, now: datetime, run_ids: Sequence[uuid.UUID]) -> None:
        """Extend the delivery leases of runs whose deliveries we are making. One already
        cleared stays cleared."""

    async def end(self, run_ids: Sequence[uuid.UUID]) -> None:
        """Every channel of these runs is delivered or failed for good: clear the lease."""

    async def take_over(
        self, now: datetime, limit: int, dead: Collection[str] = (), predecessors: bool = False
    ) -> list[tuple[Run, str]]:
        """Lease to us up to ``limit`` finished runs whose deliveries nobody makes (``SKIP
        LOCKED``: two replicas take different runs), each with its working directory: those
        whose delivery lease ran out, those of ``dead`` deliverers (as ``claim_due_jobs``), and
        with ``predecessors`` those the engine this one replaces left."""


class RunStore(Protocol):
    db: Database  # where the store lives (secrets, deliveries and retention read it too)
    owner: str  # this instance's id: the lease owner of every run it holds
    lease_seconds: float

    @property
    def deliveries(self) -> DeliveryStore:
        """The delivery leases of the runs this store records."""

    async def next_wakeup(self, liveness: bool = False) -> Wakeup:
        """The earliest instant a claim could find work (a due ``next_run``, a queued run
        becoming available, a lease running out) and the earliest delivery lease to run out.
        One statement, no lock: what an idle replica pays per tick. ``liveness``
        (PostgreSQL): also whether other owners hold active runs, and which of them hold no
        liveness lock (``core.storage.liveness``)."""

    async def claim_due_jobs(
        self,
        now: datetime,
        limit: int = 500,
        start: int = 0,
        dead: Collection[str] = (),
        predecessors: bool = False,
    ) -> Claim:
        """Take due work and lease it to us until ``now + lease_seconds``.

        Afterwards: every due time ``<= now`` of each claimed schedule has exactly one row
        (``pending`` and ours, or ``skipped`` with its reason); ``next_run`` is past ``now``;
        runs nobody held (manual, replay, retry, released) and runs whose lease ran out are
        ours. Up to ``start`` new runs that need no look at other runs (isolated, overlap
        ``allow``, no jitter) are admitted by the claim itself (``transitions.admitted``:
        ``running``, attempt 1, their task made, ``Claim.started``). Locks: the due schedules'
        rows (``FOR UPDATE SKIP LOCKED`` on PostgreSQL, so replicas claim disjoint sets;
        SQLite's write lock). ``Claim.full``: ``limit`` was reached, claim again. A schedule
        that cannot be planned is taken off the timetable (``next_run`` NULL) and logged, never
        retried on every claim. ``dead``: owners seen without their liveness lock twice; their
        active runs are ours if their lock is still free. ``predecessors``: the first claim of
        a started engine also takes the active runs of the engine it replaces (SQLite: any
        owner's; PostgreSQL: this very id's)."""

    async def admit(self, runs: Sequence[Run]) -> list[StartDecision]:
        """Decide the admission of each run (``core.admission.decide``), in order, under the
        locks of the runs and then their schedules, and write it.

        ``run``: the run is ``running`` with ``attempt`` + 1 (``transitions.admitted``), its
        task found or made (a persistent schedule's one task, whose run lock it now holds), its
        lease renewed; the caller's run object is updated to what was written. ``wait``:
        nothing changed but the run's reason (overlap), or its task's run lock is another
        running run's; look again shortly. ``done``: the run ended without an attempt
        (cancelled, its schedule deleted or paused, skipped by overlap); the next queued run
        of its schedule, if any, is promoted. ``lost``: the run is not ours (any more) or not
        active; nothing written."""

    async def record(self, outcomes: Sequence[Outcome]) -> list[Run | None]:
        """Record what attempts of our ``running`` runs came to, in one transaction: each run
        ends with its outcome's status (a cancelled one with the reason ``attempt_ended``
        names), or goes back to ``pending`` until ``retry_at`` for any replica to retry; the
        task's run lock is released; a success's chat ``turns`` are appended once per run id;
        each schedule's ``last_*`` fields and failure streak follow its runs in the order
        given; a schedule whose streak reaches ``pause_after_failures`` is paused by its last
        failure (the circuit breaker), as is one whose outcome says ``pause_schedule``; a run
        that ends gets a delivery lease if a channel applies. Returns, per outcome, its run as
        written (the caller's object, updated), or None if it was not ours any more."""

    async def release(self, run_ids: Sequence[uuid.UUID], *, started: bool = False) -> None:
        """Give runs of ours back (``transitions.released``): ``pending``, unleased, available
        now to any replica. Only those not started yet (still ``pending``), unless ``started``:
        then running attempts too (stopped without an outcome), whose task's run lock is
        released. Runs not ours are left alone."""

    async def renew_leases(
        self, now: datetime, run_ids: Sequence[uuid.UUID] | None = None
    ) -> dict[uuid.UUID, bool]:
        """Extend our leases (only on ``run_ids`` when given) to ``now + lease_seconds``.
        Returns ``{run_id: stop}`` for each renewed run (``stop``: a cancel was requested or
        its schedule was deleted: the attempt is asked to stop); a run missing from it is not
        ours any more (taken over), and its attempt must stop at once."""
