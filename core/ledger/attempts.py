"""Attempts: admitting a run this instance leases, and recording what its attempt did.

Every state change goes through ``core.transitions``, one by one or batched, and the caller
gets back the run as written: the loop never rebuilds what the database holds.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from sqlalchemy import update
from sqlalchemy.ext.asyncio import AsyncSession

from agentcron.core.ledger.leases import Leases
from agentcron.core.ledger.types import (
    PreparedTask,
    StartDecision,
    error_excerpt,
    output_excerpt,
)
from agentcron.core.states import ACTIVE, FAILURES, RunReason, RunStatus
from agentcron.core.storage import queries as q
from agentcron.core.storage.models import Run, Schedule, Task
from agentcron.core.storage.wakeups import announce_change
from agentcron.core.timeline import QUEUED_ORIGINS, promote_next
from agentcron.core.transitions import (
    admitted,
    apply,
    attempt_ended,
    cancelled,
    finished,
    paused,
    released,
    retry_at,
)


def breaker_note(streak: int, limit: int, error: str | None) -> str:
    """The pause note of a schedule whose circuit breaker tripped."""
    return (
        f"paused by agentcron after {streak} failed runs in a row"
        f" (pause_after_failures={limit}); last error: {error}"
    )


def schedule_result(schedule: Schedule, run: Run, now: datetime) -> str | None:
    """Write a finished run onto its schedule (``last_*``, the failure streak); returns the
    breaker's pause note if this failure trips it (the run's reason then says so)."""
    schedule.last_run_at = now
    schedule.last_status = run.status
    schedule.last_error = run.error
    schedule.last_run_id = run.id
    succeeded = run.status == RunStatus.SUCCEEDED
    schedule.consecutive_failures = 0 if succeeded else schedule.consecutive_failures + 1
    limit = schedule.pause_after_failures
    streak = schedule.consecutive_failures
    if run.status not in FAILURES or limit is None or streak < limit or not schedule.enabled:
        return None
    run.reason = RunReason.CIRCUIT_BREAKER.value
    return breaker_note(streak, limit, run.error or run.status)


class Attempts(Leases):
    # -- admission ------------------------------------------------------------------------

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
        if run is None or run.lease_owner != self.owner or run.status not in ACTIVE:
            return StartDecision("lost")
        if run.cancel_requested:
            apply(run, cancelled(now))
            return StartDecision("done", run)
        schedule = await session.get(Schedule, run.schedule_id, with_for_update=True)
        assert schedule is not None
        if schedule.deleted_at is not None:
            apply(run, cancelled(now, RunReason.SCHEDULE_DELETED))
            return StartDecision("done", run)
        if run.trigger == "schedule" and not schedule.enabled:
            apply(run, finished(RunStatus.SKIPPED, now, RunReason.PAUSED))
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
            and run.status == RunStatus.PENDING
            and run.reason != RunReason.BUFFERED
            and await session.scalar(q.buffered_siblings(schedule.id, run.id))
        ):
            apply(run, finished(RunStatus.SKIPPED, now, RunReason.OVERLAP))
            run.error = "one run of this schedule was already waiting"
            return StartDecision("done", run)
        if siblings and run.status == RunStatus.PENDING:
            if policy == "wait":
                return StartDecision("wait", run)
            if policy == "skip":
                apply(run, finished(RunStatus.SKIPPED, now, RunReason.OVERLAP))
                run.error = f"run {siblings[0]} of this schedule was still going"
                return StartDecision("done", run)
            if policy == "buffer_one":
                run.reason = RunReason.BUFFERED.value
                return StartDecision("wait", run)
            if policy == "cancel_other":
                await session.execute(q.ask_to_stop(siblings))
                run.reason = RunReason.CANCELLING_OTHER.value
                return StartDecision("wait", run)

        task = await self._resolve_task(session, run, schedule, now)
        if task.lock_run_id not in (None, run.id):
            holder = await session.get(Run, task.lock_run_id)
            if holder is not None and holder.status == RunStatus.RUNNING:
                return StartDecision("wait", run)
        task.lock_run_id = run.id
        task.updated_at = now
        self._admit(run, now)
        return StartDecision("run", run, task, schedule.enabled)

    def _admit(self, run: Run, now: datetime) -> None:
        apply(run, admitted(now, self._lease_until(now)))
        run.attempt += 1
        run.started_at = run.started_at or now

    async def admit_batch(self, runs: Sequence[tuple[Run, str]]) -> list[StartDecision | None]:
        """Admit prepared runs (``Claim.prepared``), given as (run, task working directory),
        in one transaction: what ``start_attempt`` does for each, minus the look at sibling
        runs and the task, which their schedule does not need (overlap ``allow``, a task
        created with the claim). Returns, per run, the decision to run it (the run as now
        written), or None: the run then goes through ``start_attempt``, which records why it
        does not run (paused, cancelled, lost) or admits it the long way (its schedule changed
        since the claim).
        """
        now = self.clock()
        params = {
            "b_ids": [run.id for run, _ in runs],
            "b_schedule_ids": sorted({run.schedule_id for run, _ in runs}),
            "b_owner": self.owner,
            "b_now": now,
            "b_until": self._lease_until(now),
        }
        async with self.db.connection() as connection:
            # The runs first, in id order; then the statement share-locks their schedules.
            await connection.execute(q.LOCK_ADMITTABLE, params)
            started = set((await connection.execute(q.ADMIT_RUNS, params)).scalars())
        decisions: list[StartDecision | None] = []
        for run, workdir in runs:
            if run.id not in started or run.task_id is None:
                decisions.append(None)
                continue
            self._admit(run, now)
            decisions.append(StartDecision("run", run, PreparedTask(run.task_id, workdir)))
        return decisions

    async def _resolve_task(
        self, session: AsyncSession, run: Run, schedule: Schedule, now: datetime
    ) -> Task:
        # A saved task is reused, so a resumed run continues in the same task (promise 6).
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

    # -- recording ------------------------------------------------------------------------

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
        """Record the outcome of the attempt this instance ran, on its own.

        ``retry_when`` set: the run goes back to ``pending`` (lease released) until then, for
        any replica to retry. Otherwise the run ends with ``status`` and the schedule's
        ``last_*`` fields and ``consecutive_failures`` are updated, and the circuit breaker
        trips if this failure ends a streak of ``pause_after_failures``. ``turns`` (a
        successful chat turn) are appended to the task's conversation in the same transaction,
        except those of a run id already there, so a resumed run never adds its turn twice.
        ``pause_schedule`` pauses the schedule with ``error`` as its note (its runner can no
        longer work). ``result``, a JSON object ``checked_outcome`` let through, is kept on the
        run. A run that ends gets its delivery lease (``deliver_until``) if a notify
        channel applies. Returns None if the lease was lost meanwhile.
        """
        now = self.clock()
        promoted = False
        async with self.db.session() as session:
            run = await session.get(Run, run_id, with_for_update=True)
            if run is None or run.lease_owner != self.owner or run.status != RunStatus.RUNNING:
                return None
            # Lock the schedule before writing the run: a second UPDATE of the run in this
            # transaction fires its foreign-key check (FOR KEY SHARE on the schedule row), and
            # two runs of one schedule finishing at once then deadlock upgrading that lock.
            schedule = await session.get(Schedule, run.schedule_id, with_for_update=True)
            run.output = output_excerpt(output) if output is not None else run.output
            run.error = error_excerpt(error)
            if result is not None:  # else left NULL, not a JSON null
                run.result = dict(result)
            if run.task_id is not None:
                await session.execute(
                    update(Task)
                    .where(Task.id == run.task_id, Task.lock_run_id == run.id)
                    .values(lock_run_id=None, updated_at=now)
                )
                if turns and retry_when is None:
                    await _append_turns(session, run.task_id, run.id, turns, now)
            if retry_when is not None:
                apply(run, retry_at(retry_when))
                return run
            deleted = schedule is not None and schedule.deleted_at is not None
            ended = attempt_ended(status, now, asked=run.cancel_requested, schedule_deleted=deleted)
            apply(run, ended)
            if run.origin in QUEUED_ORIGINS:
                promoted = await promote_next(session, run.schedule_id, now)
            if schedule is not None:
                note = schedule_result(schedule, run, now)
                if note is None and pause_schedule and schedule.enabled:
                    note = f"paused by agentcron: {run.error}"
                if note is not None:
                    apply(schedule, paused(now, note))
                    await announce_change(self.db, session)
            # Recorded with the outcome, in its transaction: if this process dies before its
            # deliveries are made, another takes them over once this lease runs out.
            apply(
                run, self.delivery_lease(run.payload.get("notify") or (), status, now, run.reason)
            )
        if promoted:
            self._changed()  # after the commit, so the loop's claim sees the next queued run
        return run

    async def release_for_takeover(self, run_id: uuid.UUID) -> None:
        """Stop a running attempt without an outcome (shutdown): any replica continues it."""
        now = self.clock()
        async with self.db.session() as session:
            run = await session.get(Run, run_id, with_for_update=True)
            if run is None or run.lease_owner != self.owner or run.status not in ACTIVE:
                return
            if run.task_id is not None:
                await session.execute(
                    update(Task)
                    .where(Task.id == run.task_id, Task.lock_run_id == run.id)
                    .values(lock_run_id=None)
                )
            apply(run, released(now))


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
