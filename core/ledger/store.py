"""The run store's contract: what the engine may rely on after each verb.

``Ledger`` (SQL, on SQLite or PostgreSQL) is the implementation; the loop (``web.engine.loop``), the
run engine (``web.engine.run``), the lease keeper (``web.engine.leases``) and deliveries
(``web.engine.delivery``) depend on this protocol only. Every verb is one transaction. "Ours" means
leased to this instance (``lease_owner`` is its id); a verb never touches a run that is not
ours, except a claim taking over a lease that ran out.
"""

from __future__ import annotations

import uuid
from collections.abc import Collection, Mapping, Sequence
from datetime import datetime
from typing import Any, Protocol

from agentcron.core.ledger.types import Claim, Outcome, StartDecision, Wakeup
from agentcron.core.storage.database import Database
from agentcron.core.storage.models import Run


class RunStore(Protocol):
    db: Database  # where the store lives (secrets, deliveries and retention read it too)
    owner: str  # this instance's id: the lease owner of every run it holds
    lease_seconds: float

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
        ``allow``, no jitter) are admitted by the claim itself: ``running``, attempt 1, their
        task made (``Claim.started``). Locks: the due schedules' rows (``FOR UPDATE SKIP
        LOCKED`` on PostgreSQL, so replicas claim disjoint sets; SQLite's write lock).
        ``Claim.full``: ``limit`` was reached, claim again. A schedule that cannot be
        planned is taken off the timetable (``next_run`` NULL) and logged, never retried on
        every claim. ``dead``: owners seen without their liveness lock twice; their active runs
        are ours if their lock is still free. ``predecessors``: the first claim of a started
        engine also takes the active runs of the engine it replaces (SQLite: any owner's;
        PostgreSQL: this very id's)."""

    async def start_attempt(self, run_id: uuid.UUID) -> StartDecision:
        """Admit one attempt of a run of ours, under its schedule's row lock.

        ``run``: the run is ``running`` with ``attempt`` + 1, its task resolved and its run
        lock held, its lease renewed. ``wait``: nothing changed but the run's reason (overlap,
        the task's lock); look again shortly. ``done``: the run ended without an attempt
        (paused, deleted, cancelled, skipped by overlap); the next queued run, if any, is
        promoted. ``lost``: the run is not ours (any more) or not active; nothing written."""

    async def admit_batch(self, runs: Sequence[tuple[Run, str]]) -> list[StartDecision | None]:
        """Admit prepared runs (``Claim.prepared``) at once: each that is still ours,
        ``pending``, not cancelled, and whose schedule is enabled, undeleted, isolated with
        overlap ``allow`` becomes ``running`` (attempt + 1), and its decision (``run``, the
        caller's run object updated to what was written) is returned; the others get None and
        go through ``start_attempt``. Locks: the runs in id order, then their schedules ``FOR
        SHARE`` in id order (a pause waits for the admission or is seen by it)."""

    async def finish_attempt(
        self,
        run_id: uuid.UUID,
        status: str,
        *,
        output: str | None = None,
        error: str | None = None,
        retry_when: datetime | None = None,
        turns: Sequence[Mapping[str, Any]] = (),
        pause_schedule: bool = False,
        result: Mapping[str, Any] | None = None,
    ) -> Run | None:
        """Record the outcome of our ``running`` attempt, alone: the run ends with ``status``
        (or, with ``retry_when``, is ``pending`` for anyone at that time), the task's run lock
        is released, chat ``turns`` are appended once per run id, the schedule's ``last_*``
        and failure streak follow, the circuit breaker trips at ``pause_after_failures``, and
        a delivery lease is set if a channel applies; a ``result`` (checked already) is kept
        on the run. None: the run is not ours any more."""

    async def record_batch(self, outcomes: Sequence[Outcome]) -> list[Run | None]:
        """``finish_attempt`` for plain outcomes (no retry, turns or pause), many at once:
        each run still ours and ``running`` ends and its object is updated to what was
        written; schedules follow their runs in the order given, in id order of schedule rows
        (a fixed lock order). None for a run that is not ours any more."""

    async def release_for_takeover(self, run_id: uuid.UUID) -> None:
        """Our active run goes back to ``pending``, unleased, available now (``released``):
        any replica continues it at once. Not ours: nothing happens."""

    async def renew_leases(
        self, now: datetime, run_ids: Sequence[uuid.UUID] | None = None
    ) -> dict[uuid.UUID, bool]:
        """Extend our leases (only on ``run_ids`` when given) to ``now + lease_seconds``.
        Returns ``{run_id: stop}`` for each renewed run (``stop``: a cancel was requested or
        its schedule was deleted: the attempt is asked to stop); a run missing from it is not
        ours any more (taken over), and its attempt must stop at once."""

    async def release(self, run_ids: Sequence[uuid.UUID]) -> None:
        """Give back runs of ours that did not start (shutdown): unleased, available now."""

    def delivery_lease(
        self,
        notify: Sequence[Mapping[str, Any]],
        status: str,
        now: datetime,
        reason: str | None = None,
    ) -> dict[str, Any]:
        """The delivery lease a run ending ``now`` with ``status`` gets, as the columns to
        write (``transitions.delivering``): none when no channel applies (nothing to
        deliver), else ours until a lease from now."""

    async def renew_deliveries(self, now: datetime, run_ids: Sequence[uuid.UUID]) -> None:
        """Extend the delivery leases of runs whose deliveries we are making."""

    async def end_deliveries(self, run_ids: Sequence[uuid.UUID]) -> None:
        """Every channel of these runs is delivered or failed for good: clear the lease."""

    async def take_over_deliveries(
        self,
        now: datetime,
        limit: int,
        dead: Collection[str] = (),
        predecessors: bool = False,
    ) -> list[tuple[Run, str]]:
        """Lease to us up to ``limit`` finished runs whose deliveries nobody makes (``SKIP
        LOCKED``: two replicas take different runs), each with its working directory: those
        whose delivery lease ran out, those of ``dead`` deliverers (as ``claim_due_jobs``), and
        with ``predecessors`` those the engine this one replaces left."""
