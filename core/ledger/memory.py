"""An in-memory ``RunStore``: the run ledger's contract kept in a dict, for engine tests.

The engine (``web.engine.loop``, ``web.engine.run``, ``web.engine.leases``) depends on
``RunStore`` only, so its logic (admission, timeouts, retries, cancel, lease loss, drain, the
breaker) can be tested against this store without a database or a wall-clock timetable: a
test queues runs and they are due at once. Every state change is the same
``core.transitions`` the SQL ledger writes, and a finished run updates its schedule with the
same ``schedule_result``.

What it leaves out, on purpose (the SQL ledger's own tests cover them): triggers and planning
(nothing becomes due but what a test queues), overlap policies other than ``allow``, persistent
tasks and their conversations, and notify channels (no run gets a delivery lease).

A test steers it as other replicas and users would: ``request_cancel`` (the API's cancel),
``take_over`` (another replica's claim after the lease ran out), ``pause``, ``fail_next``
(the database refusing one verb). ``latency`` makes every verb yield for that long first, as a
round trip would, so races between the engine's tasks can happen here too.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Callable, Collection, Mapping, Sequence
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from sqlalchemy import inspect as sa_inspect

from agentcron.core.clock import Clock, utcnow
from agentcron.core.ledger.attempts import schedule_result
from agentcron.core.ledger.store import RunStore
from agentcron.core.ledger.types import Claim, Outcome, PreparedTask, StartDecision, Wakeup
from agentcron.core.states import ACTIVE, RunReason, RunStatus
from agentcron.core.storage.database import Database
from agentcron.core.storage.models import Run, Schedule
from agentcron.core.timeline import run_payload
from agentcron.core.transitions import (
    admitted,
    apply,
    attempt_ended,
    cancelled,
    delivering,
    finished,
    paused,
    released,
    retry_at,
)

_RUN_COLUMNS = tuple(column.key for column in sa_inspect(Run).columns)


def _copy(run: Run) -> Run:
    """A detached copy, as a fresh ORM object read from the database would be: what the
    engine changes on its copy is not written until a verb writes it."""
    return Run(**{name: getattr(run, name) for name in _RUN_COLUMNS})


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
        self.calls: dict[str, int] = {}  # verb -> times called, for assertions on batching
        self._failures: dict[str, list[Exception]] = {}

    # -- what tests do --------------------------------------------------------------------

    def add_schedule(self, runner: Mapping[str, Any], **fields: Any) -> Schedule:
        """A schedule as the API would store it (isolated, overlap ``allow``); ``fields``
        override ``timeout_seconds``, ``max_attempts``, ``pause_after_failures``..."""
        now = self.clock()
        values: dict[str, Any] = {
            "id": uuid.uuid4(),
            "owner": "local",
            "name": "memory test",
            "prompt": "do the thing",
            "trigger": {"every_seconds": 3600},
            "enabled": True,
            "mode": "isolated",
            "overlap": "allow",
            "catchup": "skip",
            "catchup_window_seconds": 0,
            "misfire_grace_seconds": 60,
            "timeout_seconds": 30,
            "max_attempts": 1,
            "runner": dict(runner),
            "notify": [],
            "consecutive_failures": 0,
            "pause_after_failures": None,
            "created_at": now,
            "updated_at": now,
            **fields,
        }
        schedule = Schedule(**values)
        self.schedules[schedule.id] = schedule
        return schedule

    def queue(self, schedule: Schedule, *, trigger: str = "manual", delay: float = 0.0) -> Run:
        """A run of ``schedule`` nobody holds, claimable ``delay`` seconds from now."""
        now = self.clock()
        run = Run(
            id=uuid.uuid4(),
            schedule_id=schedule.id,
            trigger=trigger,
            origin=trigger,
            status=RunStatus.PENDING.value,
            attempt=0,
            payload=run_payload(schedule),
            created_at=now,
            available_at=now + timedelta(seconds=delay),
            cancel_requested=False,
        )
        self.runs[run.id] = run
        self._changed()
        return run

    def request_cancel(self, run_id: uuid.UUID) -> None:
        self.runs[run_id].cancel_requested = True

    def take_over(self, run_id: uuid.UUID, owner: str = "another-replica") -> None:
        """Another replica's claim took the run over (its lease ran out there)."""
        run = self.runs[run_id]
        run.lease_owner = owner
        run.lease_expires_at = self.clock() + timedelta(seconds=self.lease_seconds)

    def pause(self, schedule_id: uuid.UUID, note: str | None = None) -> None:
        apply(self.schedules[schedule_id], paused(self.clock(), note))

    def fail_next(self, verb: str, error: Exception) -> None:
        """The next call of ``verb`` raises ``error`` (a database that refused it)."""
        self._failures.setdefault(verb, []).append(error)

    def run(self, run_id: uuid.UUID) -> Run:
        """The run as stored (a copy: tests read, they do not write behind the store)."""
        return _copy(self.runs[run_id])

    # -- the RunStore verbs ---------------------------------------------------------------

    async def _enter(self, verb: str) -> datetime:
        self.calls[verb] = self.calls.get(verb, 0) + 1
        await asyncio.sleep(self.latency)
        failures = self._failures.get(verb)
        if failures:
            raise failures.pop(0)
        return self.clock()

    async def next_wakeup(self, liveness: bool = False) -> Wakeup:
        await self._enter("next_wakeup")
        times = [self._claimable_at(run) for run in self.runs.values()]
        due = [at for at in times if at is not None]
        return Wakeup(min(due) if due else None, None)

    async def claim_due_jobs(
        self,
        now: datetime,
        limit: int = 500,
        start: int = 0,
        dead: Collection[str] = (),
        predecessors: bool = False,
    ) -> Claim:
        # One process's store: no other owner to find dead, no predecessor to adopt.
        await self._enter("claim_due_jobs")
        due = [
            run
            for run in self.runs.values()
            if (at := self._claimable_at(run)) is not None and at <= now
        ]
        due.sort(key=lambda run: run.available_at)
        claimed, recovered = due[:limit], 0
        result = Claim(runs=[], full=len(due) > limit)
        for run in claimed:
            recovered += run.lease_owner is not None
            run.lease_owner = self.owner
            run.lease_expires_at = self._lease_until()
            fresh = run.status == RunStatus.PENDING and run.attempt == 0 and run.task_id is None
            if fresh:
                run.task_id = uuid.uuid4()
                workdir = str(self.data_dir / "tasks" / "local" / str(run.schedule_id))
                if len(result.started) < start and not run.cancel_requested:
                    self._admit(run, now)
                    result.started[run.id] = workdir
                else:
                    result.prepared[run.id] = workdir
            result.runs.append(_copy(run))
        result.recovered = recovered
        return result

    async def start_attempt(self, run_id: uuid.UUID) -> StartDecision:
        now = await self._enter("start_attempt")
        run = self.runs.get(run_id)
        if run is None or run.lease_owner != self.owner or run.status not in ACTIVE:
            return StartDecision("lost")
        schedule = self.schedules[run.schedule_id]
        if run.cancel_requested:
            apply(run, cancelled(now))
            return StartDecision("done", _copy(run))
        if schedule.deleted_at is not None:
            apply(run, cancelled(now, RunReason.SCHEDULE_DELETED))
            return StartDecision("done", _copy(run))
        if run.trigger == "schedule" and not schedule.enabled:
            apply(run, finished(RunStatus.SKIPPED, now, RunReason.PAUSED))
            return StartDecision("done", _copy(run))
        run.task_id = run.task_id or uuid.uuid4()
        self._admit(run, now)
        return StartDecision("run", _copy(run), self._task(run), schedule.enabled)

    async def admit_batch(self, runs: Sequence[tuple[Run, str]]) -> list[StartDecision | None]:
        now = await self._enter("admit_batch")
        decisions: list[StartDecision | None] = []
        for caller_run, workdir in runs:
            run = self.runs.get(caller_run.id)
            schedule = self.schedules[caller_run.schedule_id]
            if (
                run is None
                or run.lease_owner != self.owner
                or run.status != RunStatus.PENDING
                or run.cancel_requested
                or not schedule.enabled
                or schedule.deleted_at is not None
                or run.task_id is None
            ):
                decisions.append(None)
                continue
            self._admit(run, now)
            self._write_back(caller_run, run)
            decisions.append(StartDecision("run", caller_run, PreparedTask(run.task_id, workdir)))
        return decisions

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
        now = await self._enter("finish_attempt")
        run = self._running(run_id)
        if run is None:
            return None
        run.output = output if output is not None else run.output
        run.error = error
        if result is not None:
            run.result = dict(result)
        if retry_when is not None:
            apply(run, retry_at(retry_when))
            return _copy(run)
        self._end(run, status, now, pause_schedule=pause_schedule)
        return _copy(run)

    async def record_batch(self, outcomes: Sequence[Outcome]) -> list[Run | None]:
        now = await self._enter("record_batch")
        written: list[Run | None] = []
        for outcome in outcomes:
            run = self._running(outcome.run.id)
            if run is None:
                written.append(None)
                continue
            run.output, run.error = outcome.output, outcome.error
            self._end(run, outcome.status, now)
            self._write_back(outcome.run, run)
            written.append(outcome.run)
        return written

    async def release_for_takeover(self, run_id: uuid.UUID) -> None:
        now = await self._enter("release_for_takeover")
        run = self.runs.get(run_id)
        if run is not None and run.lease_owner == self.owner and run.status in ACTIVE:
            apply(run, released(now))

    async def renew_leases(
        self, now: datetime, run_ids: Sequence[uuid.UUID] | None = None
    ) -> dict[uuid.UUID, bool]:
        await self._enter("renew_leases")
        asked = set(run_ids) if run_ids is not None else set(self.runs)
        renewed: dict[uuid.UUID, bool] = {}
        for run_id in asked:
            run = self.runs.get(run_id)
            if run is not None and run.lease_owner == self.owner and run.status in ACTIVE:
                run.lease_expires_at = now + timedelta(seconds=self.lease_seconds)
                deleted = self.schedules[run.schedule_id].deleted_at is not None
                renewed[run_id] = bool(run.cancel_requested) or deleted
        return renewed

    async def release(self, run_ids: Sequence[uuid.UUID]) -> None:
        now = await self._enter("release")
        for run_id in run_ids:
            run = self.runs.get(run_id)
            if run is not None and run.lease_owner == self.owner and run.status in ACTIVE:
                apply(run, released(now))

    def delivery_lease(
        self,
        notify: Sequence[Mapping[str, Any]],
        status: str,
        now: datetime,
        reason: str | None = None,
    ) -> dict[str, Any]:
        return delivering(None, None)  # no channels here: delivery is the SQL ledger's

    async def renew_deliveries(self, now: datetime, run_ids: Sequence[uuid.UUID]) -> None:
        await self._enter("renew_deliveries")

    async def end_deliveries(self, run_ids: Sequence[uuid.UUID]) -> None:
        await self._enter("end_deliveries")

    async def take_over_deliveries(
        self,
        now: datetime,
        limit: int,
        dead: Collection[str] = (),
        predecessors: bool = False,
    ) -> list[tuple[Run, str]]:
        await self._enter("take_over_deliveries")
        return []

    # -- shared steps ---------------------------------------------------------------------

    def _lease_until(self) -> datetime:
        return self.clock() + timedelta(seconds=self.lease_seconds)

    def _changed(self) -> None:
        if self.on_change is not None:
            self.on_change()

    def _claimable_at(self, run: Run) -> datetime | None:
        """When a claim may take ``run``: queued and unheld, or held under a lease that ran
        out (None: never, as things stand)."""
        if run.status not in ACTIVE:
            return None
        if run.lease_owner is None:
            return run.available_at if run.status == RunStatus.PENDING else None
        if run.lease_owner == self.owner:
            return None
        return run.lease_expires_at

    def _admit(self, run: Run, now: datetime) -> None:
        apply(run, admitted(now, self._lease_until()))
        run.attempt += 1
        run.started_at = run.started_at or now

    def _task(self, run: Run) -> PreparedTask:
        assert run.task_id is not None
        workdir = self.data_dir / "tasks" / "local" / str(run.schedule_id)
        return PreparedTask(run.task_id, str(workdir))

    def _running(self, run_id: uuid.UUID) -> Run | None:
        run = self.runs.get(run_id)
        if run is None or run.lease_owner != self.owner or run.status != RunStatus.RUNNING:
            return None
        return run

    def _end(self, run: Run, status: str, now: datetime, *, pause_schedule: bool = False) -> None:
        schedule = self.schedules[run.schedule_id]
        deleted = schedule.deleted_at is not None
        apply(run, attempt_ended(status, now, asked=run.cancel_requested, schedule_deleted=deleted))
        note = schedule_result(schedule, run, now)
        if note is None and pause_schedule and schedule.enabled:
            note = f"paused by agentcron: {run.error}"
        if note is not None:
            apply(schedule, paused(now, note))

    @staticmethod
    def _write_back(caller: Run, stored: Run) -> None:
        """A batched verb updates the caller's run to what it wrote, as the SQL one does."""
        for name in _RUN_COLUMNS:
            setattr(caller, name, getattr(stored, name))


def _is_a_run_store(store: MemoryRunStore) -> RunStore:
    return store  # mypy checks here that the memory store keeps the same contract
