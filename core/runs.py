"""Runs as users see them: run now, replay, cancel, one run with its deliveries, history."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy.ext.asyncio import AsyncSession

from agentcron.core.clock import Clock, utcnow
from agentcron.core.errors import Conflict, NotFound
from agentcron.core.pagination import Page, check_limit, decode_run_cursor, encode_cursor
from agentcron.core.schedules.views import load_schedule, parse_id
from agentcron.core.states import QUEUED_ORIGINS, TERMINAL, RunStatus
from agentcron.core.storage.database import Database
from agentcron.core.storage.models import Delivery, Run, Schedule
from agentcron.core.storage.sql.deliveries import deliveries_of
from agentcron.core.storage.sql.history import (
    history_page,
    status_counts,
    visible_run,
)
from agentcron.core.storage.sql.schedules import lock_schedule
from agentcron.core.storage.wakeups import announce_change
from agentcron.core.timeline import promote_next, queued_run, run_payload
from agentcron.core.transitions import apply, cancelled


def history_position(run: Run) -> tuple[datetime, datetime, uuid.UUID]:
    """The keys of ``HISTORY_ORDER`` (``core.storage.sql.history``) of ``run``."""
    return run.created_at, run.due_at or run.created_at, run.id


@dataclass
class RunService:
    """The run verbs of the API, the dashboard and the CLI. ``on_change`` wakes the loop (a
    run was queued); ``on_cancel`` stops an attempt of the run if it executes in this process
    (other replicas hear of a cancel through their heartbeat)."""

    db: Database
    clock: Clock = utcnow
    on_change: Callable[[], None] | None = None
    on_cancel: Callable[[uuid.UUID], None] | None = None

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
            run = queued_run(schedule.id, "manual", run_payload(schedule), now, by)
            session.add(run)
            await announce_change(self.db, session)
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
            run = queued_run(schedule.id, "replay", dict(original.payload), now, by)
            run.replay_of = original.id
            session.add(run)
            await announce_change(self.db, session)
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
            if run.status == RunStatus.PENDING:
                apply(run, cancelled(now))
                if run.origin in QUEUED_ORIGINS:
                    # Its schedule's row, as a backfill or a resume holds it while it queues
                    # runs: the next one is promoted by one of them, never by neither.
                    await session.execute(lock_schedule(run.schedule_id))
                    await promote_next(session, [run.schedule_id], now)  # woken just below
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
        *,
        status: Collection[str] | None = None,
        trigger: Collection[str] | None = None,
        origin: Collection[str] | None = None,
        skipped: bool = True,
    ) -> Page[tuple[Run, list[Delivery]]]:
        """Runs of a schedule newest first (``HISTORY_ORDER``) across every trigger, or only
        those in one of ``status``, of one of ``trigger`` / ``origin``; ``skipped`` false
        leaves the skipped rows out. A cursor pages through the same filters it was returned
        for, each run once however many share a created_at."""
        check_limit(limit)
        async with self.db.session(write=False) as session:
            schedule = await load_schedule(session, schedule_id, owner)
            query = history_page(
                schedule.id,
                limit + 1,
                status=status,
                trigger=trigger,
                origin=origin,
                skipped=skipped,
                after=None if cursor is None else decode_run_cursor(cursor),
            )
            runs = list((await session.execute(query)).scalars())
            more = len(runs) > limit
            runs = runs[:limit]
            deliveries = await _deliveries(session, [run.id for run in runs])
        next_cursor = encode_cursor(*history_position(runs[-1])) if more else None
        return Page([(run, deliveries.get(run.id, [])) for run in runs], next_cursor)

    async def count_runs(self, schedule_id: uuid.UUID) -> dict[str, int]:
        """Runs of a schedule by status (diagnostics and tests)."""
        async with self.db.session(write=False) as session:
            rows = await session.execute(status_counts(schedule_id))
            return {status: int(count) for status, count in rows.all()}


async def _visible_run(
    session: AsyncSession, run_id: str | uuid.UUID, owner: str | None, *, lock: bool = False
) -> tuple[Run, Schedule]:
    query = visible_run(parse_id(run_id, "run"), owner, lock=lock)
    row = (await session.execute(query)).one_or_none()
    if row is None:
        raise NotFound("run", str(run_id))
    return row[0], row[1]


async def _deliveries(
    session: AsyncSession, run_ids: list[uuid.UUID]
) -> dict[uuid.UUID, list[Delivery]]:
    if not run_ids:
        return {}
    rows = await session.execute(deliveries_of(run_ids))
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
        # Its stages, in the order they happen (those a run did not reach are null).
        "claimed_at": run.claimed_at,
        "started_at": run.started_at,
        "output_at": run.output_at,
        "finished_at": run.finished_at,
        "delivered_at": max(
            (d.updated_at for d in deliveries if d.status == "delivered"), default=None
        ),
        "error": run.error,
        "output": run.output,
        "result": run.result,
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
