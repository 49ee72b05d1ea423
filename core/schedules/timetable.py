"""Pause, resume, backfill, skip: the schedule verbs that change which due times run.

``TimetableVerbs`` is one of the three parts ``ScheduleService`` offers the verbs of. It needs
nothing of the others; CRUD needs one thing of it, ``account_pause``, when an edit enables a
paused schedule, so that step is a function here that both call.
"""

from __future__ import annotations

import uuid
from datetime import datetime

from sqlalchemy.ext.asyncio import AsyncSession

from agentcron.core import triggers
from agentcron.core.errors import Conflict
from agentcron.core.schedules.context import ScheduleContext
from agentcron.core.schedules.plans import (
    REDOABLE,
    BackfillPlan,
    ResumePlan,
    backfill_range,
    due_times_between,
    exhausted,
    next_run_after,
    resume_plan,
    trim_summaries,
    upcoming_due_time,
)
from agentcron.core.schedules.views import load_schedule
from agentcron.core.specs import BackfillRequest
from agentcron.core.states import RunReason, RunStatus
from agentcron.core.storage.database import Database
from agentcron.core.storage.models import Run, Schedule
from agentcron.core.storage.sql.runs import queue_under_way
from agentcron.core.storage.sql.timeline import (
    delete_skipped_occurrence,
    insert_runs,
    run_due_at,
    runs_due_between,
)
from agentcron.core.timeline import Gap, gap_rows, queued_rows
from agentcron.core.transitions import apply, paused


async def account_pause(
    db: Database, session: AsyncSession, schedule: Schedule, now: datetime
) -> None:
    """Write the due times the pause of ``schedule`` covered as ``skipped`` runs with reason
    ``paused`` (bounded, see ``core.timeline``), on the timetable as it was while paused: what
    a resume with catch-up ``skip`` and an edit that enables it both write."""
    await _write_resume(db, session, schedule, resume_plan(schedule, now, "skip"), now, None)


async def _write_resume(
    db: Database,
    session: AsyncSession,
    schedule: Schedule,
    plan: ResumePlan,
    now: datetime,
    by: str | None,
) -> None:
    dialect = db.capabilities.dialect
    if plan.skipped:
        rows = gap_rows(schedule, plan.skipped, RunReason.PAUSED, now)
        await session.execute(insert_runs(dialect), rows)
    if plan.run:
        busy = bool(await session.scalar(queue_under_way(schedule.id)))
        rows = queued_rows(schedule, plan.run, "catchup", now, by=by, head_free=not busy)
        await session.execute(insert_runs(dialect), rows)


class TimetableVerbs:
    """Pause, resume, backfill and skip: the verbs that change which due times run, over the
    shared ``ScheduleContext``. ``owner`` None is an administrator, as in every verb."""

    def __init__(self, context: ScheduleContext) -> None:
        self.context = context

    async def pause(
        self, schedule_id: str | uuid.UUID, note: str | None, owner: str | None
    ) -> Schedule:
        """Stop new scheduled runs: clears ``next_run``; runs already started finish."""
        now = self.context.clock()
        async with self.context.db.session() as session:
            schedule = await load_schedule(session, schedule_id, owner, lock=True)
            apply(schedule, paused(now, note, since=schedule.paused_at))
            await self.context.announce(session)
        self.context.changed()
        return schedule

    async def resume(
        self,
        schedule_id: str | uuid.UUID,
        owner: str | None,
        catchup: str = "skip",
        *,
        by: str | None = None,
    ) -> Schedule:
        """Re-enable; the next due time is the first one strictly after now. The due times
        the pause covered are accounted for by ``catchup`` (see ``resume_plan``): ``skip``
        writes them all as ``paused`` rows; ``latest`` queues the latest one and skips the
        rest; ``all`` queues every one (at most RESUME_ALL_CAP), one at a time, oldest first."""
        now = self.context.clock()
        async with self.context.db.session() as session:
            await self.context.hold_capacity(session)  # before the row (CAPACITY_LOCK)
            schedule = await load_schedule(session, schedule_id, owner, lock=True)
            if not schedule.enabled:
                await self.context.check_capacity(session)
                plan = resume_plan(schedule, now, catchup)
                await _write_resume(self.context.db, session, schedule, plan, now, by)
            schedule.enabled = True
            schedule.paused_at = None
            schedule.paused_note = None
            schedule.next_run = (
                None
                if exhausted(schedule)
                else next_run_after(triggers.trigger_from_dict(schedule.trigger), now)
            )
            schedule.updated_at = now
            await self.context.announce(session)
        self.context.changed()
        return schedule

    async def plan_resume(
        self, schedule_id: str | uuid.UUID, owner: str | None, catchup: str = "skip"
    ) -> ResumePlan:
        """What ``resume`` with ``catchup`` would do now, without doing it (a dry run)."""
        async with self.context.db.session(write=False) as session:
            schedule = await load_schedule(session, schedule_id, owner)
        if schedule.enabled:
            return ResumePlan(catchup, [], Gap([]))
        return resume_plan(schedule, self.context.clock(), catchup)

    async def backfill(
        self,
        schedule_id: str | uuid.UUID,
        spec: BackfillRequest,
        owner: str | None,
        *,
        by: str | None = None,
    ) -> BackfillPlan:
        """Queue one run per past due time in ``[start, end)`` that has not run: no row yet, or
        a row that accounts for a due time that did not run (missed, paused, coalesced,
        overlap), which the new run replaces. Due times that ran, are running, or were skipped
        on purpose (``occurrence_skipped``) are left alone, so backfilling a range twice runs
        nothing twice. One at a time, oldest first, unless ``overlap`` is ``allow``. With
        ``dry_run`` nothing is written."""
        now = self.context.clock()
        start, end = backfill_range(spec, now)
        async with self.context.db.session(write=not spec.dry_run) as session:
            schedule = await load_schedule(session, schedule_id, owner, lock=not spec.dry_run)
            trigger = triggers.trigger_from_dict(schedule.trigger)
            due_times = due_times_between(trigger, start, end)
            existing = {
                run.due_at: run
                for run in await session.scalars(runs_due_between(schedule.id, start, end))
            }
            redo = [
                run
                for run in existing.values()
                if run.status == RunStatus.SKIPPED and run.reason in REDOABLE
            ]
            wanted = sorted(
                [due for due in due_times if due not in existing]
                + [run.due_at for run in redo if run.due_at is not None]
            )
            plan = BackfillPlan(
                due_times=wanted, kept=len(due_times) - len(wanted), overlap=spec.overlap
            )
            if spec.dry_run or not wanted:
                return plan
            await trim_summaries(self.context.db, session, schedule, trigger, start, end, redo)
            for run in redo:
                await session.delete(run)
            await session.flush()
            busy = bool(await session.scalar(queue_under_way(schedule.id)))
            rows = queued_rows(
                schedule,
                wanted,
                "backfill",
                now,
                by=by,
                one_at_a_time=spec.overlap == "buffer_all",
                head_free=not busy,
            )
            await session.execute(insert_runs(self.context.db.capabilities.dialect), rows)
            await self.context.announce(session)
        self.context.changed()
        return plan

    async def skip_occurrence(
        self, schedule_id: str | uuid.UUID, due_at: str, owner: str | None, by: str | None = None
    ) -> Run:
        """Skip one upcoming due time: its row is written now, ``skipped`` with reason
        ``occurrence_skipped``, and the claim's ON CONFLICT DO NOTHING then never runs it.
        Idempotent; ``Conflict`` if that due time already has a run of another kind."""
        now = self.context.clock()
        async with self.context.db.session() as session:
            schedule = await load_schedule(session, schedule_id, owner)
            due = upcoming_due_time(schedule, due_at, now)
            row = gap_rows(schedule, Gap([due]), RunReason.OCCURRENCE_SKIPPED, now)[0]
            row["started_by"] = by
            await session.execute(insert_runs(self.context.db.capabilities.dialect), [row])
            run = await session.scalar(run_due_at(schedule.id, due))
            assert run is not None
            if (run.status, run.reason) != (RunStatus.SKIPPED, RunReason.OCCURRENCE_SKIPPED):
                raise Conflict(f"the due time {due.isoformat()} already has a {run.status} run")
        return run

    async def unskip_occurrence(
        self, schedule_id: str | uuid.UUID, due_at: str, owner: str | None
    ) -> bool:
        """Undo ``skip_occurrence`` while the due time is still ahead; False when it was not
        skipped (nothing to undo)."""
        now = self.context.clock()
        async with self.context.db.session() as session:
            schedule = await load_schedule(session, schedule_id, owner)
            due = upcoming_due_time(schedule, due_at, now)
            result = await session.execute(delete_skipped_occurrence(schedule.id, due))
            undone = bool(getattr(result, "rowcount", 0))
        return undone
