"""The run ledger: claim due runs, start and finish attempts, leases, run now, replay, history.

Engine contract points (DESIGN.md) enforced here:
- one run per due time: runs are inserted with ON CONFLICT DO NOTHING on
  UNIQUE(schedule_id, due_at), never read-then-write (3);
- lateness is judged at claim time against ``misfire_grace_seconds`` (4);
- every attempt is admitted under the caller's lease and the schedule's row lock, so overlap
  policies hold across replicas (5, 6, 7);
- pause is visible at once: a scheduled run of a paused schedule that was claimed before the
  pause is skipped when it would start (9).
"""

from __future__ import annotations

import asyncio
import os
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any, Protocol

from sqlalchemy import func, insert, select, update
from sqlalchemy.ext.asyncio import AsyncSession

from core import triggers
from core.clock import Clock, utcnow
from core.errors import Conflict, NotFound
from core.keys import check_owner
from core.logging import get_logger
from core.notify.delivery import TRIPPED, applicable_channels
from core.pagination import Page, check_limit, decode_cursor, encode_cursor
from core.schedules import announce_change, load_schedule, parse_id
from core.storage import Database, Delivery, Run, Schedule, Task
from core.storage import queries as q
from core.timeline import (
    QUEUED_ORIGINS,
    Gap,
    find_gap,
    gap_rows,
    jitter_delay,
    last_fire_before,
    promote_next,
    run_payload,
    utc,
)

log = get_logger(__name__)

YIELD_EVERY = 50  # schedules planned between two yields to the event loop
MAX_DUE_PER_CLAIM = 100  # due times of one schedule handled per claim; the rest stay due
OUTPUT_EXCERPT_CHARS = 64 * 1024
ERROR_CHARS = 8 * 1024
TERMINAL = ("succeeded", "failed", "skipped", "timed_out", "cancelled")


def legacy_task_directories(tasks_dir: Path) -> set[uuid.UUID]:
    """Schedule ids with a directory straight under ``tasks_dir`` (the layout before
    per-owner roots); an already moved one is a symbolic link, and is left out."""
    found: set[uuid.UUID] = set()
    try:
        entries = list(os.scandir(tasks_dir))
    except FileNotFoundError:
        return found
    for entry in entries:
        try:
            schedule_id = uuid.UUID(entry.name)
        except ValueError:
            continue  # an owner's root
        if str(schedule_id) == entry.name and entry.is_dir(follow_symlinks=False):
            found.add(schedule_id)
    return found


def adopt_legacy_directory(tasks_dir: Path, owner: str, schedule_id: uuid.UUID) -> None:
    """Move ``tasks/<schedule id>`` to ``tasks/<owner>/<schedule id>`` unless that exists,
    and leave a relative symbolic link in its place.

    One rename, atomic on one filesystem, so files an agent kept there are never half moved;
    the link keeps the stored workdir of every task saved before the move (``Task.workdir``)
    leading to the same directory.
    """
    legacy = tasks_dir / str(schedule_id)
    workdir = tasks_dir / owner / str(schedule_id)
    if os.path.lexists(workdir) or not legacy.is_dir() or legacy.is_symlink():
        return
    try:
        workdir.parent.mkdir(parents=True, exist_ok=True)
        os.rename(legacy, workdir)
        os.symlink(os.path.join(owner, str(schedule_id)), legacy)
    except OSError as exc:
        log.warning("task_directory_not_moved", schedule_id=str(schedule_id), error=str(exc))
        return
    log.info("task_directory_moved", schedule_id=str(schedule_id), to=str(workdir))


def output_excerpt(text: str | None) -> str | None:
    """What a run keeps of an agent's output: its tail, where the outcome usually is."""
    return text[-OUTPUT_EXCERPT_CHARS:] if text else text


def error_excerpt(text: str | None) -> str | None:
    """What a run (and its schedule's ``last_error``) keeps of an error: its tail."""
    return text[-ERROR_CHARS:] if text else text


@dataclass(frozen=True)
class DuePlan:
    """What a claim does with one due schedule: the due times that get a run, the gap of those
    that do not (each accounted for by a ``skipped`` row, see ``core.timeline``), how many were
    missed, and the schedule's next ``next_run``."""

    run_at: list[datetime]
    missed: int
    next_run: datetime | None
    gap: Gap = field(default_factory=lambda: Gap([]))
    gap_reason: str = "missed"
    caught_up: datetime | None = None  # the missed due time catch-up ``latest`` runs
    # The DST rule that decided each due time of ``run_at`` that one decided (cron only).
    dst_rules: dict[datetime, str] = field(default_factory=dict)


def plan_due_times(schedule: Schedule, now: datetime) -> DuePlan:
    """Decide the runs of one due schedule at ``now`` (pure; contract point 4).

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
        due = utc(triggers.next_fire(trigger, boundary - timedelta(microseconds=1)))
    on_time: list[datetime] = []
    while due is not None and due <= now and len(on_time) < MAX_DUE_PER_CLAIM:
        on_time.append(due)
        due = utc(triggers.next_fire(trigger, due))
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
        gap_reason="coalesced" if schedule.catchup == "latest" and run_at else "missed",
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


@dataclass
class Claim:
    """The result of one ``claim_due_jobs``: runs now leased to the caller."""

    runs: list[Run]
    full: bool  # the batch limit was reached: claim again at once
    recovered: int = 0  # runs taken over from an expired lease
    # Runs whose task was created with the claim and whose schedule lets them start without
    # looking at its other runs (overlap ``allow``, isolated): run id -> task working directory.
    # They may be admitted in batches (``admit_batch``); every other run goes one by one.
    prepared: dict[uuid.UUID, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Outcome:
    """A plain outcome of one attempt, for ``Ledger.record_batch``."""

    run_id: uuid.UUID
    schedule_id: uuid.UUID
    status: str  # succeeded | failed | timed_out
    output: str | None = None
    error: str | None = None
    # The run's notify channels (its payload's), so the record says whether it has deliveries
    # to make; empty (the common case in a burst) costs nothing.
    notify: Sequence[Mapping[str, Any]] = ()


class TaskRef(Protocol):
    """What an attempt needs of its task: a ``Task`` row, or a ``PreparedTask``."""

    @property
    def id(self) -> uuid.UUID: ...
    @property
    def workdir(self) -> str: ...
    @property
    def conversation(self) -> list[dict[str, Any]]: ...


@dataclass(frozen=True, slots=True)
class PreparedTask:
    """The fresh task a prepared run got with its claim (``Claim.prepared``), known without
    reading it back (and cheaper than an ORM object, made thousands of times in a burst)."""

    id: uuid.UUID
    workdir: str
    conversation: list[dict[str, Any]] = field(default_factory=list)


@dataclass(frozen=True)
class StartDecision:
    """What ``start_attempt`` decided for a run this instance leases."""

    action: str  # "run" | "wait" | "done" | "lost"
    run: Run | None = None
    task: TaskRef | None = None
    schedule_enabled: bool = True


@dataclass(frozen=True)
class Wakeup:
    """What ``Ledger.next_wakeup`` found: the earliest instant a claim could find work, and
    the earliest delivery lease to run out (None: nothing of that kind)."""

    work: datetime | None
    deliveries: datetime | None

    @property
    def at(self) -> datetime | None:
        """The earliest of the two: when the loop has something to look at."""
        times = [value for value in (self.work, self.deliveries) if value is not None]
        return min(times) if times else None


@dataclass
class Ledger:
    """The service layer of the engine over one database. ``owner`` is this instance's id.

    ``clock`` tells every "now" the ledger writes (leases, ``available_at``, timestamps); the
    caller's ``now`` decides what is due and which leases ran out. On PostgreSQL both are the
    database's time (``core.clock.DatabaseClock``): leases written by one replica are judged
    by another, and only a shared clock keeps a fast host from taking over a live run.
    """

    db: Database
    owner: str
    lease_seconds: float = 30.0
    data_dir: Path = Path("./var")
    clock: Clock = utcnow
    on_change: Callable[[], None] | None = None
    # Stops an attempt of the given run if it executes in this process (the loop's
    # cancel_local); other replicas hear of a cancel through their heartbeat.
    on_cancel: Callable[[uuid.UUID], None] | None = None
    _tasks_dir: Path = field(init=False)
    # Schedules with a directory of the layout before owners had roots of their own
    # (tasks/<schedule id>), found at start; each moves with the schedule's next new task.
    _legacy: set[uuid.UUID] = field(init=False)

    def __post_init__(self) -> None:
        self._tasks_dir = (self.data_dir / "tasks").resolve()
        self._legacy = legacy_task_directories(self._tasks_dir)

    def _lease_until(self, now: datetime) -> datetime:
        return now + timedelta(seconds=self.lease_seconds)

    # -- claiming -------------------------------------------------------------------------

    async def claim_due_jobs(self, now: datetime, limit: int = 500) -> Claim:
        """Take due work in one transaction and lease it to this instance.

        Eligible: enabled, undeleted schedules with ``next_run <= now`` (row-locked, skipping
        rows another replica holds), plus runs nobody leases whose ``available_at <= now``
        (manual, replay, retries) and runs whose lease expired. For each due schedule, the
        runs of ``plan_due_times`` are inserted in one multi-row INSERT ... ON CONFLICT DO
        NOTHING and ``next_run`` is advanced in one executemany UPDATE. Returns the leased
        runs; ``full`` says the limit was reached and more may be due.
        """
        until = self._lease_until(now)
        async with self.db.session() as session:
            schedules = list((await session.execute(q.due_schedules(now, limit))).scalars())
            rows: list[dict[str, Any]] = []
            tasks: dict[uuid.UUID, dict[str, Any]] = {}  # run id -> its prepared task
            advances: list[dict[str, Any]] = []
            accounted: list[dict[str, Any]] = []  # skipped rows of due times that do not run
            for index, schedule in enumerate(schedules):
                if index and index % YIELD_EVERY == 0:
                    # Planning a full batch is tens of milliseconds of CPU: let the loop's
                    # other work (runs finishing, heartbeats) in between.
                    await asyncio.sleep(0)
                try:
                    plan = plan_due_times(schedule, now)
                    check_owner(schedule.owner)  # its task directories are named after it
                except Exception:
                    # One unreadable schedule must not block every claim after it (a poison
                    # pill): take it off the timetable and say why.
                    log.exception("schedule_unplannable", schedule_id=str(schedule.id))
                    advances.append(
                        {
                            "id": schedule.id,
                            "next_run": None,
                            "scheduled_runs": schedule.scheduled_runs,
                        }
                    )
                    continue
                if plan.missed:
                    log.info(
                        "due_times_missed",
                        schedule_id=str(schedule.id),
                        missed=plan.missed,
                        catchup=schedule.catchup,
                    )
                payload = run_payload(schedule)
                if plan.gap:
                    accounted.extend(gap_rows(schedule, plan.gap, plan.gap_reason, now, payload))
                independent = schedule.overlap == "allow" and schedule.mode == "isolated"
                for due in plan.run_at:
                    run_id, task_id = uuid.uuid4(), uuid.uuid4()
                    row = {
                        "id": run_id,
                        "schedule_id": schedule.id,
                        "trigger": "schedule",
                        "due_at": due,
                        "origin": "catchup" if due == plan.caught_up else "schedule",
                        "status": "pending",
                        "attempt": 0,
                        # An independent run gets its fresh task now, with the claim, so it
                        # can start without a transaction of its own (``admit_batch``).
                        "task_id": task_id if independent else None,
                        "payload": payload,
                        "created_at": now,
                        "available_at": (
                            max(now, due + jitter_delay(schedule.id, due, schedule.jitter_seconds))
                            if schedule.jitter_seconds
                            else now
                        ),
                        "lease_owner": self.owner,
                        "lease_expires_at": until,
                        "cancel_requested": False,
                        # Every row of the claim has this key: they share one executemany.
                        "dst_rule": plan.dst_rules.get(due),
                    }
                    rows.append(row)
                    if independent:
                        tasks[run_id] = self._new_task_row(task_id, schedule, now)
                advances.append(
                    {
                        "id": schedule.id,
                        "next_run": plan.next_run,
                        "scheduled_runs": (schedule.scheduled_runs or 0) + len(plan.run_at),
                    }
                )
            inserted: set[uuid.UUID] = set()
            if rows:
                statement = q.insert_runs(self.db.capabilities.dialect)
                inserted.update((await session.execute(statement, rows)).scalars())
            if accounted:
                await session.execute(q.insert_runs(self.db.capabilities.dialect), accounted)
            prepared = [tasks[run_id] for run_id in inserted if run_id in tasks]
            if prepared:
                await session.execute(insert(Task), prepared)
            if advances:
                await session.execute(update(Schedule), advances)
            claimed = [_run_from_row(row) for row in rows if row["id"] in inserted]
            workdirs = {task["id"]: task["workdir"] for task in prepared}

            room = limit - len(schedules)
            recovered = 0
            if room > 0:
                found = (await session.execute(q.claimable_runs(now, room))).all()
                if found:
                    ids = [row.id for row in found]
                    taken = (await session.execute(q.lease_runs(ids, self.owner, until))).scalars()
                    claimed.extend(taken)
                    # A run that had another replica's lease: this is a takeover.
                    recovered = sum(1 for row in found if row.lease_owner not in (None, self.owner))
                full = len(found) >= room
            else:
                full = True
        return Claim(
            runs=claimed,
            full=full or len(schedules) >= limit,
            recovered=recovered,
            prepared={run.id: workdirs[run.task_id] for run in claimed if run.task_id in workdirs},
        )

    def _workdir(self, owner: str, schedule_id: uuid.UUID) -> str:
        """``tasks/<owner>/<schedule id>``: one root per owner, so a sandbox can hide every
        other owner's files at once. Stable per schedule: files an agent keeps survive even
        when each run starts a fresh conversation (isolated mode)."""
        # check_owner's names cannot be "..", contain "/" or start with "." (ValueError if
        # one got in): the owner is one path component, never a way out of tasks/.
        workdir = self._tasks_dir / check_owner(owner) / str(schedule_id)
        if schedule_id in self._legacy:
            self._legacy.discard(schedule_id)
            adopt_legacy_directory(self._tasks_dir, owner, schedule_id)
        return str(workdir)

    def _new_task_row(
        self, task_id: uuid.UUID, schedule: Schedule, now: datetime
    ) -> dict[str, Any]:
        return {
            "id": task_id,
            "schedule_id": schedule.id,
            "owner": schedule.owner,
            "workdir": self._workdir(schedule.owner, schedule.id),
            "conversation": [],
            "lock_run_id": None,
            "created_at": now,
            "updated_at": now,
        }

    async def next_wakeup(self) -> Wakeup:
        """The earliest instant a claim could find new work, and the earliest delivery lease
        to run out, in one statement (the idle loop's only one)."""
        async with self.db.session(write=False) as session:
            *work, deliveries = (await session.execute(q.next_wakeup())).one()
        candidates = [value for value in work if value is not None]
        return Wakeup(min(candidates) if candidates else None, deliveries)

    # -- leases ---------------------------------------------------------------------------

    async def renew_leases(
        self, now: datetime, run_ids: Sequence[uuid.UUID] | None = None
    ) -> dict[uuid.UUID, bool]:
        """Extend the leases this instance holds: only on ``run_ids`` when given (the runs the
        engine still works on, so the lease of a run whose attempt died lapses and the run is
        taken over). Returns ``{run_id: cancel_requested}``; a run missing from it is no longer
        ours (its lease was lost to another replica)."""
        until = self._lease_until(now)
        async with self.db.session() as session:
            if run_ids is None:
                rows = list((await session.execute(q.renew_leases(self.owner, until))).all())
            else:
                ids, rows = list(run_ids), []
                for start in range(0, len(ids), 1000):
                    batch = q.renew_leases(self.owner, until, ids[start : start + 1000])
                    rows.extend((await session.execute(batch)).all())
        return {row[0]: bool(row[1]) for row in rows}

    async def release(self, run_ids: Sequence[uuid.UUID]) -> None:
        """Give leased runs back so any replica can continue them at once (shutdown)."""
        if not run_ids:
            return
        async with self.db.session() as session:
            await session.execute(q.release_leases(self.owner, list(run_ids), self.clock()))

    # -- delivery leases (``Run.deliver_until``) ------------------------------------------

    def delivery_deadline(
        self,
        notify: Sequence[Mapping[str, Any]],
        status: str,
        now: datetime,
        reason: str | None = None,
    ) -> datetime | None:
        """``deliver_until`` for a run finishing ``now`` with ``status``: a lease from now if a
        channel applies (the recorder then delivers, renewing it), else None (nothing to do)."""
        return self._lease_until(now) if applicable_channels(notify, status, reason) else None

    async def renew_deliveries(self, now: datetime, run_ids: Sequence[uuid.UUID]) -> None:
        """Extend the delivery leases of runs this process is delivering now."""
        until, ids = self._lease_until(now), list(run_ids)
        async with self.db.connection() as connection:
            for start in range(0, len(ids), 1000):
                await connection.execute(q.renew_deliveries(ids[start : start + 1000], until))

    async def end_deliveries(self, run_ids: Sequence[uuid.UUID]) -> None:
        """Clear the delivery lease: every channel of these runs is delivered or failed."""
        async with self.db.connection(single=True) as connection:
            await connection.execute(q.end_deliveries(list(run_ids)))

    async def take_over_deliveries(self, now: datetime, limit: int) -> list[tuple[Run, str]]:
        """Lease to this instance up to ``limit`` finished runs whose delivery lease ran out,
        each with the working directory of its task (file channels write there), or of its
        schedule if the task is gone."""
        async with self.db.session() as session:
            statement = q.take_over_deliveries(now, self._lease_until(now), limit)
            runs = list((await session.execute(statement)).scalars())
            task_ids = {run.task_id for run in runs if run.task_id is not None}
            workdirs: dict[uuid.UUID | None, str] = {}
            if task_ids:
                found = await session.execute(
                    select(Task.id, Task.workdir).where(Task.id.in_(task_ids))
                )
                workdirs.update((row.id, row.workdir) for row in found)
            orphans = {run.schedule_id for run in runs if run.task_id not in workdirs}
            owners: dict[uuid.UUID, str] = {}
            if orphans:
                found = await session.execute(
                    select(Schedule.id, Schedule.owner).where(Schedule.id.in_(orphans))
                )
                owners.update((row.id, row.owner) for row in found)
        return [
            (
                run,
                workdirs.get(run.task_id)
                or self._workdir(owners[run.schedule_id], run.schedule_id),
            )
            for run in runs
        ]

    # -- one attempt ----------------------------------------------------------------------

    async def start_attempt(self, run_id: uuid.UUID) -> StartDecision:
        """Admit one attempt of a run this instance leases, or decide it does not run.

        In one transaction, under the schedule's row lock: check the lease; skip a scheduled
        run of a paused or deleted schedule; apply the overlap policy against the schedule's
        other running runs; resolve and save the task (reusing a saved one: dispatch is
        idempotent by run id); take the task's run lock; mark the run running and count the
        attempt. ``wait`` means try again shortly (buffered or waiting for a lock).
        """
        now = self.clock()
        async with self.db.session() as session:
            decision = await self._decide_start(session, run_id, now)
            ended = decision.run if decision.action == "done" else None
            promoted = ended is not None and ended.origin in QUEUED_ORIGINS
            if ended is not None and promoted:
                promoted = await promote_next(session, ended.schedule_id, now)
        if promoted:
            self._changed()
        return decision

    async def _decide_start(
        self, session: AsyncSession, run_id: uuid.UUID, now: datetime
    ) -> StartDecision:
        run = await session.get(Run, run_id, with_for_update=True)
        if run is None or run.lease_owner != self.owner or run.status not in q.ACTIVE:
            return StartDecision("lost")
        if run.cancel_requested:
            self._finish(run, "cancelled", now, reason="cancel_requested")
            return StartDecision("done", run)
        schedule = await session.get(Schedule, run.schedule_id, with_for_update=True)
        assert schedule is not None
        if schedule.deleted_at is not None:
            self._finish(run, "cancelled", now, reason="schedule_deleted")
            return StartDecision("done", run)
        if run.trigger == "schedule" and not schedule.enabled:
            self._finish(run, "skipped", now, reason="paused")
            return StartDecision("done", run)

        siblings = list((await session.execute(q.running_siblings(schedule.id, run.id))).scalars())
        policy = schedule.overlap
        if run.origin in QUEUED_ORIGINS:
            # Catch-up and backfill runs never skip for overlap: they wait their turn behind
            # a running sibling, or, queued with overlap allow, do not look at siblings.
            policy = "allow" if run.payload.get("overlap") == "allow" else "wait"
        # Under buffer_one the run already waiting goes next, even between two of its
        # looks: a newer one would be a second waiter.
        if (
            policy == "buffer_one"
            and run.status == "pending"
            and run.reason != "buffered"
            and await session.scalar(q.buffered_siblings(schedule.id, run.id))
        ):
            self._finish(run, "skipped", now, reason="overlap")
            run.error = "one run of this schedule was already waiting"
            return StartDecision("done", run)
        if siblings and run.status == "pending":
            if policy == "wait":
                return StartDecision("wait", run)
            if policy == "skip":
                self._finish(run, "skipped", now, reason="overlap")
                run.error = f"run {siblings[0]} of this schedule was still going"
                return StartDecision("done", run)
            if policy == "buffer_one":
                run.reason = "buffered"
                return StartDecision("wait", run)
            if policy == "cancel_other":
                await session.execute(
                    update(Run).where(Run.id.in_(siblings)).values(cancel_requested=True)
                )
                run.reason = "cancelling_other"
                return StartDecision("wait", run)

        task = await self._resolve_task(session, run, schedule, now)
        if task.lock_run_id not in (None, run.id):
            holder = await session.get(Run, task.lock_run_id)
            if holder is not None and holder.status == "running":
                return StartDecision("wait", run)
        task.lock_run_id = run.id
        task.updated_at = now
        run.status = "running"
        run.reason = None
        run.attempt += 1
        run.started_at = run.started_at or now
        run.lease_expires_at = self._lease_until(now)
        return StartDecision("run", run, task, schedule.enabled)

    async def admit_batch(
        self, runs: Sequence[tuple[uuid.UUID, uuid.UUID]]
    ) -> list[datetime | None]:
        """Admit prepared runs (``Claim.prepared``), given as (run id, schedule id), in one
        transaction: what ``start_attempt`` does for each, minus the look at sibling runs and
        the task, which their schedule does not need (overlap ``allow``, a task created with
        the claim). Returns, per run, its start time if admitted, else None: the run then goes
        through ``start_attempt``, which records why it does not run (paused, cancelled, lost)
        or admits it the long way (its schedule changed since the claim).
        """
        now = self.clock()
        params = {
            "b_ids": [run_id for run_id, _ in runs],
            "b_schedule_ids": sorted({schedule_id for _, schedule_id in runs}),
            "b_owner": self.owner,
            "b_now": now,
            "b_until": self._lease_until(now),
        }
        async with self.db.connection(single=True) as connection:
            admitted = set((await connection.execute(q.ADMIT_RUNS, params)).scalars())
        return [now if run_id in admitted else None for run_id, _ in runs]

    async def _resolve_task(
        self, session: AsyncSession, run: Run, schedule: Schedule, now: datetime
    ) -> Task:
        # A saved task is reused, so a resumed run continues in the same task (contract 6).
        if run.task_id is not None:
            task = await session.get(Task, run.task_id, with_for_update=True)
            if task is not None:
                return task
        if schedule.mode == "persistent" and schedule.task_id is not None and run.task_id is None:
            task = await session.get(Task, schedule.task_id, with_for_update=True)
            if task is not None:
                run.task_id = task.id
                return task
        task = Task(**self._new_task_row(run.task_id or uuid.uuid4(), schedule, now))
        session.add(task)
        await session.flush()
        run.task_id = task.id
        if schedule.mode == "persistent":
            schedule.task_id = task.id
        return task

    async def finish_attempt(
        self,
        run_id: uuid.UUID,
        status: str,
        *,
        output: str | None = None,
        error: str | None = None,
        retry_at: datetime | None = None,
        turns: Sequence[Mapping[str, Any]] = (),
        pause_schedule: bool = False,
    ) -> Run | None:
        """Record the outcome of the attempt this instance ran.

        ``retry_at`` set: the run goes back to ``pending`` (lease released) until then, for any
        replica to retry. Otherwise the run ends with ``status`` and the schedule's ``last_*``
        fields and ``consecutive_failures`` are updated. ``turns`` (a successful chat turn)
        are appended to the task's conversation in the same transaction, except those of a run
        id already there, so a resumed run never adds its turn twice. ``pause_schedule``
        pauses the schedule with ``error`` as its note (its runner can no longer work). A run
        that ends gets its delivery lease (``deliver_until``) if a notify channel applies.
        Returns None if the lease was lost meanwhile (another replica owns the run now).
        """
        now = self.clock()
        promoted = False
        async with self.db.session() as session:
            run = await session.get(Run, run_id, with_for_update=True)
            if run is None or run.lease_owner != self.owner or run.status != "running":
                return None
            # Lock the schedule before writing the run: a second UPDATE of the run in this
            # transaction fires its foreign-key check (FOR KEY SHARE on the schedule row), and
            # two runs of one schedule finishing at once then deadlock upgrading that lock.
            schedule = await session.get(Schedule, run.schedule_id, with_for_update=True)
            run.output = output_excerpt(output) if output is not None else run.output
            run.error = error_excerpt(error)
            if run.task_id is not None:
                await session.execute(
                    update(Task)
                    .where(Task.id == run.task_id, Task.lock_run_id == run.id)
                    .values(lock_run_id=None, updated_at=now)
                )
                if turns and retry_at is None:
                    await _append_turns(session, run.task_id, run.id, turns, now)
            if retry_at is not None:
                run.status = "pending"
                run.reason = "retry"
                run.available_at = retry_at
                run.lease_owner = None
                run.lease_expires_at = None
                return run
            self._finish(run, status, now)
            if run.origin in QUEUED_ORIGINS:
                promoted = await promote_next(session, run.schedule_id, now)
            if schedule is not None and status in ("failed", "timed_out"):
                # The circuit breaker: this failure ends a streak long enough to pause on.
                limit = schedule.pause_after_failures
                streak = schedule.consecutive_failures + 1
                if limit is not None and streak >= limit and schedule.enabled:
                    run.reason = TRIPPED
                    schedule.enabled = False
                    schedule.next_run = None
                    schedule.paused_at = now
                    schedule.paused_note = (
                        f"paused by agentcron after {streak} failed runs in a row"
                        f" (pause_after_failures={limit}); last error: {run.error or status}"
                    )
                    await announce_change(self.db, session)
            # Recorded with the outcome, in its transaction: if this process dies before its
            # deliveries are made, another takes them over once this lease runs out.
            run.deliver_until = self.delivery_deadline(
                run.payload.get("notify") or (), status, now, run.reason
            )
            if schedule is not None and pause_schedule and schedule.enabled:
                schedule.enabled = False
                schedule.next_run = None
                schedule.paused_at = now
                schedule.paused_note = f"paused by agentcron: {run.error}"
                await announce_change(self.db, session)
            if schedule is not None:
                schedule.last_run_at = now
                schedule.last_status = status
                schedule.last_error = run.error
                schedule.last_run_id = run.id
                schedule.consecutive_failures = (
                    0 if status == "succeeded" else schedule.consecutive_failures + 1
                )
        if promoted:
            self._changed()  # after the commit, so the loop's claim sees the next queued run
        return run

    async def record_batch(self, outcomes: Sequence[Outcome]) -> list[datetime | None]:
        """Record plain outcomes of attempts this instance ran, in one transaction: each run
        ends with its status (and its delivery lease, if a channel applies), and each
        schedule's ``last_*`` fields and failure streak follow its runs in the order given.
        For outcomes that need more (a retry, chat turns, pausing the schedule, a cancel) use
        ``finish_attempt``. Returns, per outcome, its finish time, or None if the lease was
        lost meanwhile (another replica owns the run now).
        """
        now = self.clock()
        async with self.db.connection() as connection:
            ids = [outcome.run_id for outcome in outcomes]
            params = {"b_ids": ids, "b_owner": self.owner}
            ours = set((await connection.execute(q.LOCK_RUNNING, params)).scalars())
            mine = [outcome for outcome in outcomes if outcome.run_id in ours]
            if mine:
                await connection.execute(
                    q.FINISH_RUN,
                    [
                        {
                            "b_id": o.run_id,
                            "b_status": o.status,
                            "b_output": output_excerpt(o.output),
                            "b_error": error_excerpt(o.error),
                            "b_now": now,
                            "b_deliver_until": self.delivery_deadline(o.notify, o.status, now),
                        }
                        for o in mine
                    ],
                )
                await connection.execute(q.SCHEDULE_RESULT, _schedule_results(mine, now))
        return [now if outcome.run_id in ours else None for outcome in outcomes]

    async def release_for_takeover(self, run_id: uuid.UUID) -> None:
        """Stop a running attempt without an outcome (shutdown): any replica continues it."""
        now = self.clock()
        async with self.db.session() as session:
            run = await session.get(Run, run_id, with_for_update=True)
            if run is None or run.lease_owner != self.owner or run.status not in q.ACTIVE:
                return
            if run.task_id is not None:
                await session.execute(
                    update(Task)
                    .where(Task.id == run.task_id, Task.lock_run_id == run.id)
                    .values(lock_run_id=None)
                )
            run.status = "pending"
            run.reason = "released"
            run.lease_owner = None
            run.lease_expires_at = None
            run.available_at = now

    @staticmethod
    def _finish(run: Run, status: str, now: datetime, reason: str | None = None) -> None:
        run.status = status
        run.reason = reason
        run.finished_at = now
        run.lease_owner = None
        run.lease_expires_at = None

    # -- run now, replay, cancel, history -------------------------------------------------

    async def _announce(self, session: AsyncSession) -> None:
        await announce_change(self.db, session)

    def _changed(self) -> None:
        if self.on_change is not None:
            self.on_change()

    async def run_now(
        self, schedule_id: str | uuid.UUID, owner: str | None, by: str | None = None
    ) -> Run:
        """Queue a manual run of the schedule as it is now; ``next_run`` does not move.
        ``by`` is who asked (the API key's owner), kept as the run's provenance."""
        now = self.clock()
        async with self.db.session() as session:
            schedule = await load_schedule(session, schedule_id, owner)
            run = _queued_run(schedule.id, "manual", run_payload(schedule), now, by)
            session.add(run)
            await self._announce(session)
        self._changed()
        return run

    async def replay(
        self, run_id: str | uuid.UUID, owner: str | None, by: str | None = None
    ) -> Run:
        """Queue a re-run of an earlier run's saved payload (prompt and runner as they were);
        ``by`` is who asked, kept as the run's provenance."""
        now = self.clock()
        async with self.db.session() as session:
            original, schedule = await _visible_run(session, run_id, owner)
            if schedule.deleted_at is not None:
                raise Conflict("the schedule of this run was deleted; it cannot be replayed")
            run = _queued_run(schedule.id, "replay", dict(original.payload), now, by)
            run.replay_of = original.id
            session.add(run)
            await self._announce(session)
        self._changed()
        return run

    async def cancel(self, run_id: str | uuid.UUID, owner: str | None) -> Run:
        """Cancel a pending run at once, or ask a running one to stop (cooperatively).

        Raises ``Conflict`` if the run already finished.
        """
        now = self.clock()
        async with self.db.session() as session:
            run, _ = await _visible_run(session, run_id, owner, lock=True)
            if run.status in TERMINAL:
                raise Conflict(f"run {run.id} already finished ({run.status})")
            run.cancel_requested = True
            if run.status == "pending":
                self._finish(run, "cancelled", now, reason="cancel_requested")
                if run.origin in QUEUED_ORIGINS:
                    await promote_next(session, run.schedule_id, now)  # woken just below
        self._changed()
        if self.on_cancel is not None:
            self.on_cancel(run.id)
        return run

    async def get_run(
        self, run_id: str | uuid.UUID, owner: str | None
    ) -> tuple[Run, list[Delivery]]:
        """A run (also of a deleted schedule) with its deliveries."""
        async with self.db.session(write=False) as session:
            run, _ = await _visible_run(session, run_id, owner)
            deliveries = await _deliveries(session, [run.id])
        return run, deliveries.get(run.id, [])

    async def list_runs(
        self,
        schedule_id: str | uuid.UUID,
        owner: str | None,
        limit: int = 50,
        cursor: str | None = None,
    ) -> Page[tuple[Run, list[Delivery]]]:
        """Runs of a schedule newest first (ties by id) across every trigger."""
        check_limit(limit)
        async with self.db.session(write=False) as session:
            schedule = await load_schedule(session, schedule_id, owner)
            query = select(Run).where(Run.schedule_id == schedule.id)
            if cursor is not None:
                created, id = decode_cursor(cursor)
                query = query.where(
                    (Run.created_at < created) | ((Run.created_at == created) & (Run.id < id))
                )
            query = query.order_by(Run.created_at.desc(), Run.id.desc()).limit(limit + 1)
            runs = list((await session.execute(query)).scalars())
            more = len(runs) > limit
            runs = runs[:limit]
            deliveries = await _deliveries(session, [run.id for run in runs])
        next_cursor = encode_cursor(runs[-1].created_at, runs[-1].id) if more else None
        return Page([(run, deliveries.get(run.id, [])) for run in runs], next_cursor)

    async def count_runs(self, schedule_id: uuid.UUID) -> dict[str, int]:
        """Runs of a schedule by status (diagnostics and tests)."""
        async with self.db.session(write=False) as session:
            rows = await session.execute(
                select(Run.status, func.count())
                .where(Run.schedule_id == schedule_id)
                .group_by(Run.status)
            )
            return {status: int(count) for status, count in rows.all()}


def _schedule_results(outcomes: Sequence[Outcome], now: datetime) -> list[dict[str, Any]]:
    """One parameter set of ``q.SCHEDULE_RESULT`` per schedule, in id order (a fixed lock
    order, so two replicas recording at once cannot deadlock on schedule rows)."""
    by_schedule: dict[uuid.UUID, list[Outcome]] = {}
    for outcome in outcomes:
        by_schedule.setdefault(outcome.schedule_id, []).append(outcome)
    params = []
    for schedule_id in sorted(by_schedule):
        runs = by_schedule[schedule_id]
        statuses = [run.status for run in runs]
        reset = "succeeded" in statuses
        if reset:  # the streak restarts after the batch's last success
            last_success = len(statuses) - 1 - statuses[::-1].index("succeeded")
            failures = len(statuses) - 1 - last_success
        else:
            failures = len(statuses)
        last = runs[-1]
        params.append(
            {
                "b_id": schedule_id,
                "b_now": now,
                "b_status": last.status,
                "b_error": error_excerpt(last.error),
                "b_run_id": last.run_id,
                "b_reset": reset,
                "b_failures": failures,
            }
        )
    return params


async def _append_turns(
    session: AsyncSession,
    task_id: uuid.UUID,
    run_id: uuid.UUID,
    turns: Sequence[Mapping[str, Any]],
    now: datetime,
) -> None:
    task = await session.get(Task, task_id, with_for_update=True)
    if task is None:
        return
    if any(turn.get("run_id") == str(run_id) for turn in task.conversation):
        return  # this run's turn is already part of the conversation
    # A new list (not an in-place append) so the JSON column is seen as changed.
    task.conversation = [*task.conversation, *({**turn, "run_id": str(run_id)} for turn in turns)]
    task.updated_at = now


def _run_from_row(row: dict[str, Any]) -> Run:
    return Run(**row)


def _queued_run(
    schedule_id: uuid.UUID, trigger: str, payload: dict[str, Any], now: datetime, by: str | None
) -> Run:
    return Run(
        id=uuid.uuid4(),
        schedule_id=schedule_id,
        trigger=trigger,
        origin=trigger,
        started_by=by,
        due_at=None,
        status="pending",
        attempt=0,
        payload=payload,
        created_at=now,
        available_at=now,
        cancel_requested=False,
    )


async def _visible_run(
    session: AsyncSession, run_id: str | uuid.UUID, owner: str | None, *, lock: bool = False
) -> tuple[Run, Schedule]:
    id = parse_id(run_id, "run")
    query = select(Run, Schedule).join(Schedule, Run.schedule_id == Schedule.id).where(Run.id == id)
    if owner is not None:
        query = query.where(Schedule.owner == owner)
    if lock:
        query = query.with_for_update(of=Run)
    row = (await session.execute(query)).one_or_none()
    if row is None:
        raise NotFound("run", str(run_id))
    return row[0], row[1]


async def _deliveries(
    session: AsyncSession, run_ids: list[uuid.UUID]
) -> dict[uuid.UUID, list[Delivery]]:
    if not run_ids:
        return {}
    rows = await session.execute(
        select(Delivery)
        .where(Delivery.run_id.in_(run_ids))
        .order_by(Delivery.run_id, Delivery.index)
    )
    result: dict[uuid.UUID, list[Delivery]] = {}
    for delivery in rows.scalars():
        result.setdefault(delivery.run_id, []).append(delivery)
    return result


def run_view(run: Run, deliveries: Sequence[Delivery] = ()) -> dict[str, Any]:
    """The public shape of a run (docs/api.md)."""
    return {
        "id": run.id,
        "schedule_id": run.schedule_id,
        "trigger": run.trigger,
        "due_at": run.due_at,
        "replay_of": run.replay_of,
        # Who or what started it; runs from before provenance was kept say their trigger.
        "origin": run.origin or run.trigger,
        "started_by": run.started_by,
        "status": run.status,
        "reason": run.reason,
        # 1 for a run of its own due time; a summary row of a gap counts what it stands for,
        # or null when it stopped counting (covers_until is the last due time either way).
        "covers": 1 if run.covers_until is None else run.covers,
        "covers_until": run.covers_until,
        "dst_rule": run.dst_rule,
        "attempt": run.attempt,
        "task_id": run.task_id,
        "created_at": run.created_at,
        "started_at": run.started_at,
        "finished_at": run.finished_at,
        "error": run.error,
        "output": run.output,
        "deliveries": [
            {
                "index": d.index,
                "channel": d.channel,
                "target": d.target,
                "status": d.status,
                "attempts": d.attempts,
                "error": d.error,
            }
            for d in deliveries
        ],
    }
