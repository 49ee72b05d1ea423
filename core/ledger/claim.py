"""Claiming: due schedules become leased runs, and runs nobody holds are leased again."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Collection
from datetime import datetime
from typing import Any

from sqlalchemy.ext.asyncio import AsyncSession

from agentcron.core.keys import check_owner
from agentcron.core.ledger.base import LedgerBase
from agentcron.core.ledger.types import Claim, Wakeup
from agentcron.core.logging import get_logger
from agentcron.core.planning import plan_due_times
from agentcron.core.states import RunStatus
from agentcron.core.storage import queries as q
from agentcron.core.storage.claim_sql import CLAIM_WRITES, claim_params
from agentcron.core.storage.models import Run, built
from agentcron.core.timeline import gap_rows, jitter_delay, run_payload

log = get_logger(__name__)

YIELD_EVERY = 50  # schedules planned between two yields to the event loop


class Claiming(LedgerBase):
    async def claim_due_jobs(
        self,
        now: datetime,
        limit: int = 500,
        start: int = 0,
        dead: Collection[str] = (),
        predecessors: bool = False,
    ) -> Claim:
        """Take due work in one transaction and lease it to this instance.

        Eligible: enabled, undeleted schedules with ``next_run <= now`` (row-locked, skipping
        rows another replica holds), plus runs nobody leases whose ``available_at <= now``
        (manual, replay, retries) and runs whose lease expired. For each due schedule, the
        runs of ``plan_due_times`` are inserted in one multi-row INSERT ... ON CONFLICT DO
        NOTHING and ``next_run`` is advanced in one executemany UPDATE. Returns the leased
        runs; ``full`` says the limit was reached and more may be due.

        The claim admits: up to ``start`` runs (the caller's free slots) that can start now
        without a look at other runs (isolated, overlap ``allow``, no jitter) are inserted
        ``running``, attempt 1, with their fresh task (``Claim.started``), so they start with no
        round trip of their own. Pause stays visible at once: the schedule rows are locked by
        this transaction, and a pause committed before it finds nothing due.

        ``dead``: owners the loop saw without a liveness lock twice (``core.storage.liveness``):
        their active runs are taken over now if their lock is still free. ``predecessors``: the
        first claim of a started engine, which holds no run yet: on SQLite (one engine per
        file, under its file lock) every active run leased by anyone is a dead engine's; on
        PostgreSQL those leased under this very id (its liveness lock is ours now).
        """
        until = self._lease_until(now)
        async with self.db.session() as session:
            schedules = list((await session.execute(q.due_schedules(now, limit))).scalars())
            rows: list[dict[str, Any]] = []
            tasks: dict[uuid.UUID, dict[str, Any]] = {}  # run id -> its prepared task
            advances: list[dict[str, Any]] = []
            accounted: list[dict[str, Any]] = []  # skipped rows of due times that do not run
            starting: set[uuid.UUID] = set()  # runs admitted by the claim itself
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
                            "b_id": schedule.id,
                            "b_next_run": None,
                            "b_scheduled_runs": schedule.scheduled_runs,
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
                    available_at = (
                        max(now, due + jitter_delay(schedule.id, due, schedule.jitter_seconds))
                        if schedule.jitter_seconds
                        else now
                    )
                    starts = independent and available_at <= now and len(starting) < start
                    row = {
                        "id": run_id,
                        "schedule_id": schedule.id,
                        "trigger": "schedule",
                        "due_at": due,
                        "origin": "catchup" if due == plan.caught_up else "schedule",
                        "status": (RunStatus.RUNNING if starts else RunStatus.PENDING).value,
                        "attempt": 1 if starts else 0,
                        "started_at": now if starts else None,
                        # An independent run gets its fresh task now, with the claim, so it
                        # can start without a transaction of its own (``admit_batch``).
                        "task_id": task_id if independent else None,
                        "payload": payload,
                        "created_at": now,
                        "available_at": available_at,
                        "lease_owner": self.owner,
                        "lease_expires_at": until,
                        "cancel_requested": False,
                        # Every row of the claim has this key: they share one executemany.
                        "dst_rule": plan.dst_rules.get(due),
                    }
                    rows.append(row)
                    if starts:
                        starting.add(run_id)
                    if independent:
                        tasks[run_id] = self._new_task_row(task_id, schedule, now)
                advances.append(
                    {
                        "b_id": schedule.id,
                        "b_next_run": plan.next_run,
                        "b_scheduled_runs": (schedule.scheduled_runs or 0) + len(plan.run_at),
                    }
                )
            inserted = await self._write_claim(session, rows, tasks, advances)
            if accounted:
                await session.execute(q.insert_runs(self.db.capabilities.dialect), accounted)
            prepared = [tasks[run_id] for run_id in inserted if run_id in tasks]
            claimed = [built(Run, row) for row in rows if row["id"] in inserted]
            workdirs = {task["id"]: task["workdir"] for task in prepared}

            room = limit - len(schedules)
            recovered = 0
            if room > 0:
                adopt = None
                if predecessors:
                    adopt = (
                        Run.lease_owner == self.owner
                        if self.db.capabilities.multi_process
                        else Run.lease_owner.is_not(None)
                    )
                statement = q.claimable_runs(now, room, sorted(dead), adopt, schema=self.db.schema)
                found = (await session.execute(statement)).all()
                if found:
                    ids = [row.id for row in found]
                    taken = (await session.execute(q.lease_runs(ids, self.owner, until))).scalars()
                    claimed.extend(taken)
                    # A run that had another replica's lease: this is a takeover.
                    recovered = sum(
                        1
                        for row in found
                        if row.lease_owner is not None
                        and (predecessors or row.lease_owner != self.owner)
                    )
                full = len(found) >= room
            else:
                full = True
        ready = {run.id: workdirs[run.task_id] for run in claimed if run.task_id in workdirs}
        return Claim(
            runs=claimed,
            full=full or len(schedules) >= limit,
            recovered=recovered,
            prepared={id: workdir for id, workdir in ready.items() if id not in starting},
            started={id: workdir for id, workdir in ready.items() if id in starting},
        )

    async def _write_claim(
        self,
        session: AsyncSession,
        rows: list[dict[str, Any]],
        tasks: dict[uuid.UUID, dict[str, Any]],
        advances: list[dict[str, Any]],
    ) -> set[uuid.UUID]:
        """Insert the planned runs and the tasks of those inserted, advance the schedules;
        returns the ids of the runs inserted (a due time already present is not). One
        statement on PostgreSQL (``claim_sql.CLAIM_WRITES``), three on SQLite."""
        if self.db.capabilities.dialect == "postgresql":
            if not rows and not advances:
                return set()
            params = claim_params(rows, list(tasks.values()), advances)
            return set((await session.execute(CLAIM_WRITES, params)).scalars())
        inserted: set[uuid.UUID] = set()
        if rows:
            statement = q.insert_runs(self.db.capabilities.dialect)
            inserted.update((await session.execute(statement, rows)).scalars())
        prepared = [tasks[run_id] for run_id in inserted if run_id in tasks]
        if prepared:
            await session.execute(q.INSERT_TASKS, prepared)
        if advances:
            await session.execute(q.ADVANCE_SCHEDULES, advances)
        return inserted

    async def next_wakeup(self, liveness: bool = False) -> Wakeup:
        """The earliest instant a claim could find new work, and the earliest delivery lease
        to run out, in one statement (the idle loop's only one). ``liveness`` (PostgreSQL):
        the same statement also says which other owners hold active runs without their
        liveness lock."""
        statement = q.next_wakeup(self.owner if liveness else None, self.db.schema)
        async with self.db.session(write=False) as session:
            row = (await session.execute(statement)).one()
        *work, deliveries = row[:4]
        candidates = [value for value in work if value is not None]
        first, leased = (min(candidates) if candidates else None), row[2] is not None
        if not liveness:
            return Wakeup(first, deliveries, leased)
        lockless = frozenset(row[5] or ())
        return Wakeup(first, deliveries, leased, watching=bool(row[4]), lockless=lockless)
