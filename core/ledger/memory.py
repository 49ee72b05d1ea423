"""An in-memory ``RunStore``: the run ledger's contract kept in dicts, for the engine's tests.

It keeps the contract the SQL store keeps, and the contract suite (``tests/contract``) holds
both to it: it plans a claim with the same ``core.planning``, decides an admission with the
same ``core.admission``, and writes what the same ``core.transitions`` and
``core.ledger.outcomes`` say. What it leaves out: there is one engine per store, so ``dead``
and ``predecessors`` of a claim find nobody else's runs; and there are no locks (one event loop,
no await inside a verb after its first).

A test steers it as users and other replicas would: ``add_schedule`` (``next_run`` set: due
for the claim), ``queue`` (a manual run), ``request_cancel``, ``take_over`` (another replica's
claim after the lease ran out), ``pause``, ``fail_next`` (the database refusing one verb).
``latency`` makes every verb yield for that long first, as a round trip would.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Callable, Collection, Mapping, Sequence
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from sqlalchemy import inspect as sa_inspect

from agentcron.core.admission import Candidate, Going, Rules, decide
from agentcron.core.clock import Clock, utcnow
from agentcron.core.ledger.deliveries import MemoryDeliveries
from agentcron.core.ledger.outcomes import follow_ups, pause_after, written
from agentcron.core.ledger.store import (
    Claim,
    DeliveryStore,
    Outcome,
    PreparedTask,
    RunStore,
    StartDecision,
    Wakeup,
)
from agentcron.core.planning import plan_claim
from agentcron.core.states import ACTIVE, QUEUED_ORIGINS, RunReason, RunStatus
from agentcron.core.storage.database import Database
from agentcron.core.storage.models import Run, Schedule
from agentcron.core.timeline import queued_run, run_payload
from agentcron.core.transitions import (
    admitted,
    apply,
    followed,
    leased,
    paused,
    promoted,
    released,
    streak,
)
from agentcron.core.workdirs import TaskDirectories

_RUN_COLUMNS = tuple(column.key for column in sa_inspect(Run).columns)


def _copy(run: Run) -> Run:
    """A detached copy, as a fresh ORM object read from the database would be: what the
    engine changes on its copy is not written until a verb writes it."""
    return Run(**{name: getattr(run, name) for name in _RUN_COLUMNS})


def _write_back(caller: Run, stored: Run) -> None:
    """A verb updates the caller's run to what it wrote, as the SQL store does."""
    caller.__dict__.update({name: getattr(stored, name) for name in _RUN_COLUMNS})


class MemoryRunStore:
    """The ``RunStore`` contract over dicts, for one engine instance ``owner``."""

    def __init__(
        self,
        *,
        owner: str = "memory",
        lease_seconds: float = 30.0,
        data_dir: Path = Path("./var"),
        clock: Clock = utcnow,
        latency: float = 0.0,
        on_change: Callable[[], None] | None = None,
    ) -> None:
        self.owner = owner
        self.lease_seconds = lease_seconds
        self.data_dir = data_dir
        self.clock = clock
        self.latency = latency
        self.on_change = on_change
        # Never connected: only a runner that refers to stored secrets would read it, and the
        # loop asks it whether LISTEN exists (SQLite: no).
        self.db = Database("sqlite+aiosqlite:///:memory:")
        self.schedules: dict[uuid.UUID, Schedule] = {}
        self.runs: dict[uuid.UUID, Run] = {}
        self.tasks: dict[uuid.UUID, dict[str, Any]] = {}  # id -> workdir, conversation, lock
        self.calls: dict[str, int] = {}  # verb -> times called, for assertions on batching
        self._failures: dict[str, list[Exception]] = {}
        self.dirs = TaskDirectories(data_dir)
        self.deliveries: DeliveryStore = MemoryDeliveries(self)

    # -- what tests do --------------------------------------------------------------------

    def add_schedule(self, runner: Mapping[str, Any], **fields: Any) -> Schedule:
        """A schedule as the API would store it (isolated, overlap ``allow``, every hour, not
        due: give ``next_run`` to make it due for the claim); ``fields`` override the rest."""
        now = self.clock()
        values: dict[str, Any] = {
            "owner": "local", "name": "memory test", "prompt": "do the thing",
            "trigger": {"every_seconds": 3600, "start_at": now.isoformat()},
            "enabled": True, "mode": "isolated", "overlap": "allow", "catchup": "skip",
            "catchup_window_seconds": 0, "misfire_grace_seconds": 60, "timeout_seconds": 30,
            "max_attempts": 1, "runner": dict(runner), "notify": [], "next_run": None,
            "consecutive_failures": 0, "pause_after_failures": None, "scheduled_runs": 0,
            "id": uuid.uuid4(), "created_at": now, "updated_at": now, **fields,
        }  # fmt: skip
        schedule = Schedule(**values)
        self.schedules[schedule.id] = schedule
        return schedule

    def queue(self, schedule: Schedule, *, trigger: str = "manual", delay: float = 0.0) -> Run:
        """A run of ``schedule`` nobody holds (as run now makes one), claimable ``delay``
        seconds from now."""
        run = queued_run(schedule.id, trigger, run_payload(schedule), self.clock(), None)
        run.available_at += timedelta(seconds=delay)
        self.runs[run.id] = run
        self._changed()
        return run

    def request_cancel(self, run_id: uuid.UUID) -> None:
        self.runs[run_id].cancel_requested = True

    def take_over(self, run_id: uuid.UUID, owner: str = "another-replica") -> None:
        """Another replica's claim took the run over (its lease ran out there)."""
        now = self.clock()
        until = now + timedelta(seconds=self.lease_seconds)
        run = self.runs[run_id]
        apply(run, leased(owner, until, now, run.claimed_at))

    def pause(self, schedule_id: uuid.UUID, note: str | None = None) -> None:
        apply(self.schedules[schedule_id], paused(self.clock(), note))

    def fail_next(self, verb: str, error: Exception) -> None:
        """The next call of ``verb`` raises ``error`` (a database that refused it)."""
        self._failures.setdefault(verb, []).append(error)

    def run(self, run_id: uuid.UUID) -> Run:
        """The run as stored (a copy: tests read, they do not write behind the store)."""
        return _copy(self.runs[run_id])

    # -- the RunStore verbs ---------------------------------------------------------------

    async def enter(self, verb: str) -> datetime:
        """Count a call of ``verb``, wait ``latency`` as a round trip would, and raise what
        ``fail_next`` asked for; the instant it is now."""
        self.calls[verb] = self.calls.get(verb, 0) + 1
        await asyncio.sleep(self.latency)
        failures = self._failures.get(verb)
        if failures:
            raise failures.pop(0)
        return self.clock()

    def lease_end(self, now: datetime) -> datetime:
        return now + timedelta(seconds=self.lease_seconds)

    async def next_wakeup(self, liveness: bool = False) -> Wakeup:
        await self.enter("next_wakeup")
        due = [at for at in map(self._claimable_at, self.runs.values()) if at is not None]
        due += [s.next_run for s in self._open() if s.next_run is not None]
        owed = [run.deliver_until for run in self.runs.values() if run.deliver_until is not None]
        leased = any(r.lease_owner is not None and r.status in ACTIVE for r in self.runs.values())
        return Wakeup(min(due, default=None), min(owed, default=None), leased)

    async def claim_due_jobs(
        self,
        now: datetime,
        limit: int = 500,
        start: int = 0,
        dead: Collection[str] = (),
        predecessors: bool = False,
    ) -> Claim:
        await self.enter("claim_due_jobs")
        until = self.lease_end(now)
        due = sorted(
            (s for s in self._open() if s.next_run is not None and s.next_run <= now),
            key=lambda schedule: schedule.next_run,  # type: ignore[arg-type, return-value]
        )[:limit]
        plan = plan_claim(
            due, now, owner=self.owner, until=until, start=start, workdir=self.dirs.workdir
        )
        taken = {(run.schedule_id, run.due_at) for run in self.runs.values()}
        claim = Claim(runs=[], full=len(due) >= limit)
        for row in plan.runs:
            if (row["schedule_id"], row["due_at"]) in taken:
                continue
            run = Run(**row)
            self.runs[run.id] = run
            task = plan.tasks.get(run.id)
            if task is not None:
                self.tasks[task["id"]] = {**task, "lock_run_id": None}
                which = claim.started if run.id in plan.starting else claim.prepared
                which[run.id] = task["workdir"]
            if run.status != RunStatus.SKIPPED:
                claim.runs.append(_copy(run))
        for advance in plan.advances:
            schedule = self.schedules[advance["id"]]
            schedule.next_run, schedule.scheduled_runs = (
                advance["next_run"],
                advance["scheduled_runs"],
            )
        room = limit - len(due)
        claimable = sorted(
            (r for r in self.runs.values() if (at := self._claimable_at(r)) and at <= now),
            key=lambda run: run.available_at,
        )
        for run in claimable[: max(0, room)]:
            claim.recovered += run.lease_owner is not None
            apply(run, leased(self.owner, until, now, run.claimed_at))
            claim.runs.append(_copy(run))
        claim.full = claim.full or len(claimable) >= room
        return claim

    async def admit(self, runs: Sequence[Run]) -> list[StartDecision]:
        now = await self.enter("admit")
        going: dict[uuid.UUID, Going] = {}
        decisions: list[StartDecision] = []
        for caller in runs:
            run = self.runs.get(caller.id)
            if run is None or run.lease_owner != self.owner or run.status not in ACTIVE:
                decisions.append(StartDecision("lost"))
                continue
            schedule = self.schedules[run.schedule_id]
            if run.schedule_id not in going:
                going[run.schedule_id] = self._going(run.schedule_id, {r.id for r in runs})
            candidate = Candidate.of(run, run.payload)
            verdict = decide(candidate, Rules.of(schedule), going[run.schedule_id], now)
            if verdict.action == "run":
                task = self._task(run, schedule, now)
                if task is None:
                    going[run.schedule_id].running.remove(run.id)
                    verdict = verdict.__class__("wait")
                else:
                    apply(run, admitted(now, self.lease_end(now), run.attempt, run.started_at))
                    run.task_id = task.id
                    _write_back(caller, run)
                    decisions.append(StartDecision("run", caller, task))
                    continue
            apply(run, verdict.values)
            for other in verdict.stop:
                self.runs[other].cancel_requested = True
            if verdict.action == "done" and run.origin in QUEUED_ORIGINS:
                self._promote(run.schedule_id, now)
            _write_back(caller, run)
            decisions.append(StartDecision(verdict.action, caller))
        return decisions

    async def record(self, outcomes: Sequence[Outcome]) -> list[Run | None]:
        now = await self.enter("record")
        until = self.lease_end(now)
        ended = []
        recorded: list[Run | None] = []
        for outcome in outcomes:
            run = self.runs.get(outcome.run.id)
            if run is None or run.lease_owner != self.owner or run.status != RunStatus.RUNNING:
                recorded.append(None)
                continue
            deleted = self.schedules[run.schedule_id].deleted_at is not None
            asked = bool(run.cancel_requested)
            values = written(
                outcome, now, asked=asked, deleted=deleted, until=until, owner=self.owner, ends={}
            )
            apply(run, values)
            task = self.tasks.get(run.task_id) if run.task_id is not None else None
            if task is not None and run.payload.get("mode") == "persistent":
                if task["lock_run_id"] == run.id:
                    task["lock_run_id"] = None
                seen = any(turn.get("run_id") == str(run.id) for turn in task["conversation"])
                if outcome.turns and values["status"] == RunStatus.SUCCEEDED and not seen:
                    task["conversation"] += [{**t, "run_id": str(run.id)} for t in outcome.turns]
            if outcome.retry_at is None:
                ended.append((outcome, values))
            _write_back(outcome.run, run)
            recorded.append(outcome.run)
        follows, queued = follow_ups(ended)
        for schedule_id, follow in follows.items():
            schedule = self.schedules[schedule_id]
            failures = streak(schedule.consecutive_failures, follow.reset, follow.failures)
            status, error = follow.values["status"], follow.values["error"]
            apply(schedule, followed(now, status, error, follow.last.run.id, failures))
            note, run_values = pause_after(
                follow,
                failures,
                schedule.pause_after_failures,
                schedule.enabled,
                until=until,
                owner=self.owner,
            )
            apply(self.runs[follow.last.run.id], run_values)
            apply(follow.last.run, run_values)
            if note is not None:
                apply(schedule, paused(now, note))
            if schedule_id in queued:
                self._promote(schedule_id, now)
        return recorded

    async def release(self, run_ids: Sequence[uuid.UUID], *, started: bool = False) -> None:
        now = await self.enter("release")
        statuses = ACTIVE if started else (RunStatus.PENDING.value,)
        for run_id in run_ids:
            run = self.runs.get(run_id)
            if run is None or run.lease_owner != self.owner or run.status not in statuses:
                continue
            apply(run, released(now))
            task = self.tasks.get(run.task_id) if run.task_id is not None else None
            if started and task is not None and task["lock_run_id"] == run.id:
                task["lock_run_id"] = None

    async def renew_leases(
        self, now: datetime, run_ids: Sequence[uuid.UUID] | None = None
    ) -> dict[uuid.UUID, bool]:
        await self.enter("renew_leases")
        asked = set(run_ids) if run_ids is not None else set(self.runs)
        renewed: dict[uuid.UUID, bool] = {}
        for run_id in asked:
            run = self.runs.get(run_id)
            if run is not None and run.lease_owner == self.owner and run.status in ACTIVE:
                run.lease_expires_at = self.lease_end(now)
                deleted = self.schedules[run.schedule_id].deleted_at is not None
                renewed[run_id] = bool(run.cancel_requested) or deleted
        return renewed

    # -- shared steps ---------------------------------------------------------------------

    def _changed(self) -> None:
        if self.on_change is not None:
            self.on_change()

    def _open(self) -> list[Schedule]:
        return [s for s in self.schedules.values() if s.enabled and s.deleted_at is None]

    def _claimable_at(self, run: Run) -> datetime | None:
        """When a claim may take ``run``: queued and unheld, or held under a lease that ran
        out (None: never, as things stand)."""
        if run.status not in ACTIVE:
            return None
        if run.lease_owner is None:
            return run.available_at if run.status == RunStatus.PENDING else None
        return run.lease_expires_at if run.lease_owner != self.owner else None

    def _going(self, schedule_id: uuid.UUID, deciding: set[uuid.UUID]) -> Going:
        going = Going()
        for run in self.runs.values():
            if run.schedule_id != schedule_id or run.id in deciding:
                continue
            if run.status == RunStatus.RUNNING:
                going.running.append(run.id)
            elif run.status == RunStatus.PENDING and run.reason == RunReason.BUFFERED:
                going.buffered = True
        return going

    def _task(self, run: Run, schedule: Schedule, now: datetime) -> PreparedTask | None:
        """The task ``run`` runs in, as the SQL store finds or makes it; None when its
        persistent task is locked to another running run."""
        persistent = schedule.mode == "persistent"
        task_id = run.task_id or (schedule.task_id if persistent else None)
        task = self.tasks.get(task_id) if task_id is not None else None
        if task is None:
            task_id = task_id or uuid.uuid4()
            workdir = self.dirs.workdir(schedule.owner, schedule.id)
            task = {"id": task_id, "workdir": workdir, "conversation": [], "lock_run_id": None}
            self.tasks[task_id] = task
            if persistent:
                schedule.task_id = task_id
        if persistent:
            holder = self.runs.get(task["lock_run_id"]) if task["lock_run_id"] else None
            if holder is not None and holder.id != run.id and holder.status == RunStatus.RUNNING:
                return None
            task["lock_run_id"] = run.id
        history = list(task["conversation"]) if persistent else []
        return PreparedTask(task["id"], task["workdir"], history)

    def _promote(self, schedule_id: uuid.UUID, now: datetime) -> None:
        queued = [r for r in self.runs.values() if r.schedule_id == schedule_id]
        busy = any(
            r.origin in QUEUED_ORIGINS and r.status in ACTIVE and r.reason != RunReason.QUEUED
            for r in queued
        )
        waiting = [
            r for r in queued if r.status == RunStatus.PENDING and r.reason == RunReason.QUEUED
        ]
        if not busy and waiting:
            apply(min(waiting, key=lambda run: run.due_at), promoted(now))  # type: ignore[arg-type, return-value]
            self._changed()


def _is_a_run_store(store: MemoryRunStore) -> RunStore:
    return store  # mypy checks here that the memory store keeps the same contract
