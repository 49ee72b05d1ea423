"""The run store on SQL (SQLite or PostgreSQL): ``RunStore``'s contract over the database.

One path for every run: a run alone and a run in a batch go through the same statements
(``core.storage.sql``: ``runs``, ``leases``, ``schedules``, ``tasks``), on both databases. An
admission is decided by ``core.admission``, a claim planned by ``core.planning``, and every
value written is one of ``core.transitions``: this class only reads what they need under the
right locks and writes what they say.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any, NamedTuple, cast

from sqlalchemy.ext.asyncio import AsyncConnection

from agentcron.core.admission import Candidate, Going, Rules, decide
from agentcron.core.clock import Clock, utcnow
from agentcron.core.ledger.deliveries import SqlDeliveries
from agentcron.core.ledger.follow import follow
from agentcron.core.ledger.outcomes import written
from agentcron.core.ledger.store import Claim, Outcome, RunStore, StartDecision, Wakeup
from agentcron.core.ledger.tasks import SqlTasks
from agentcron.core.planning import ClaimPlan, plan_claim
from agentcron.core.states import ACTIVE, QUEUED_ORIGINS, RunStatus
from agentcron.core.storage.database import Database
from agentcron.core.storage.models import Run, Schedule, built
from agentcron.core.storage.sql import leases as lease_sql
from agentcron.core.storage.sql import runs as sql
from agentcron.core.storage.sql import schedules as schedule_sql
from agentcron.core.storage.sql import wakeups as wakeup_sql
from agentcron.core.storage.sql.rows import IDS, rows_params, split
from agentcron.core.timeline import promote_next
from agentcron.core.transitions import Values, apply_held, released
from agentcron.core.transitions import admitted as admitted_values
from agentcron.core.workdirs import TaskDirectories

PLAN_EVERY = 50  # schedules planned between two yields to the event loop
_NEITHER = (False, False)  # a cancel neither asked for nor by a deletion: no cancel at all


class Held(NamedTuple):
    """A run an admission holds: what it read of the row under its lock (``status``,
    ``reason``, ``cancel_requested``: what others may change) and the rest as the engine's copy
    has it (only this store's verbs write a run it leases)."""

    id: uuid.UUID
    status: str
    reason: str | None
    cancel_requested: bool
    schedule_id: uuid.UUID
    trigger: str
    origin: str | None
    task_id: uuid.UUID | None
    attempt: int
    started_at: datetime | None

    @classmethod
    def of(cls, row: Any, run: Run) -> Held:
        return cls(
            row.id,
            row.status,
            row.reason,
            row.cancel_requested,
            run.schedule_id,
            run.trigger,
            run.origin,
            run.task_id,
            run.attempt,
            run.started_at,
        )


@dataclass
class SqlRunStore:
    """The runs of engine instance ``owner`` over ``db``.

    ``clock`` tells every "now" the store writes (leases, ``available_at``, timestamps); the
    caller's ``now`` decides what is due and which leases ran out. On PostgreSQL both are the
    database's time (``core.clock.DatabaseClock``): leases written by one replica are judged
    by another, and only a shared clock keeps a fast host from taking over a live run.
    ``on_change`` wakes the loop after a commit that made work claimable (a queued run
    promoted)."""

    db: Database
    owner: str
    lease_seconds: float = 30.0
    data_dir: Path = Path("./var")
    clock: Clock = utcnow
    on_change: Any = None
    deliveries: SqlDeliveries = field(init=False)
    tasks: SqlTasks = field(init=False)
    _dirs: TaskDirectories = field(init=False)

    def __post_init__(self) -> None:
        self._dirs = TaskDirectories(self.data_dir)
        self.deliveries = SqlDeliveries(self.db, self.owner, self._until, self._dirs.workdir)
        self.tasks = SqlTasks(self.db, self._dirs)
        self._dialect = self.db.capabilities.dialect

    def _until(self, now: datetime) -> datetime:
        return now + timedelta(seconds=self.lease_seconds)

    def _ids(self, name: str, ids: Iterable[uuid.UUID]) -> Any:
        """The parameters of the list of ids ``name`` (``core.storage.sql.rows.id_rows``)."""
        return self._rows(IDS, name, [{"id": id} for id in ids])

    def _shared_rows(
        self, columns: Any, name: str, rows: Sequence[Mapping[str, Any]], shared: Any
    ) -> Any:
        """``_rows``, the ``shared`` columns sent once, as the first row has them."""
        each, once = split(columns, frozenset(shared))
        first, dialect = rows[0], self.db.engine.dialect
        return rows_params(each, name, rows, dialect, {key: first[key] for key in once})

    def _rows(self, columns: Any, name: str, rows: Sequence[Mapping[str, Any]]) -> Any:
        return rows_params(columns, name, rows, self.db.engine.dialect)

    # -- waking and claiming ----------------------------------------------------------------

    async def next_wakeup(self, liveness: bool = False) -> Wakeup:
        statement = wakeup_sql.next_wakeup(self.owner if liveness else None, self.db.schema)
        async with self.db.session(write=False) as session:
            row = (await session.execute(statement)).one()
        *work, deliveries = row[:4]
        candidates = [value for value in work if value is not None]
        first, leased = (min(candidates) if candidates else None), row[2] is not None
        if not liveness:
            return Wakeup(first, deliveries, leased)
        lockless = frozenset(row[5] or ())
        return Wakeup(first, deliveries, leased, watching=bool(row[4]), lockless=lockless)

    async def claim_due_jobs(
        self,
        now: datetime,
        limit: int = 500,
        start: int = 0,
        dead: Collection[str] = (),
        predecessors: bool = False,
    ) -> Claim:
        until = self._until(now)
        async with self.db.session() as session:
            # Rows, read as the ``Schedule`` they are (``schedule_sql.due_schedules``).
            due = await session.execute(schedule_sql.due_schedules(now, limit))
            schedules = cast(list[Schedule], list(due))
            plan = ClaimPlan()
            for first in range(0, len(schedules), PLAN_EVERY):
                if first:
                    # Planning a full batch is tens of milliseconds of CPU: let the loop's
                    # other work (runs finishing, heartbeats) in between.
                    await asyncio.sleep(0)
                part = plan_claim(
                    schedules[first : first + PLAN_EVERY],
                    now,
                    owner=self.owner,
                    until=until,
                    start=start - len(plan.starting),
                    workdir=self._dirs.workdir,
                )
                plan.runs += part.runs
                plan.tasks.update(part.tasks)
                plan.advances += part.advances
                plan.starting |= part.starting
            connection = await session.connection()
            inserted = await self._write_claim(connection, plan)
            claimed = [
                built(Run, row)
                for row in plan.runs
                if row["id"] in inserted and row["status"] != RunStatus.SKIPPED
            ]
            room, recovered, full = limit - len(schedules), 0, True
            if room > 0:
                adopt = None
                if predecessors:
                    adopt = lease_sql.predecessor_runs(
                        self.owner, self.db.capabilities.multi_process
                    )
                statement = lease_sql.claimable_runs(
                    now, room, sorted(dead), adopt, schema=self.db.schema
                )
                found = (await session.execute(statement)).all()
                if found:
                    ids = [row.id for row in found]
                    taken = lease_sql.take_runs(ids, self.owner, until, self.clock())
                    claimed.extend((await session.execute(taken)).scalars())
                    # A run that had another replica's lease: this is a takeover.
                    recovered = sum(
                        1
                        for row in found
                        if row.lease_owner is not None
                        and (predecessors or row.lease_owner != self.owner)
                    )
                full = len(found) >= room
        made = {id: task["workdir"] for id, task in plan.tasks.items() if id in inserted}
        return Claim(
            runs=claimed,
            full=full or len(schedules) >= limit,
            recovered=recovered,
            prepared={id: dir for id, dir in made.items() if id not in plan.starting},
            started={id: dir for id, dir in made.items() if id in plan.starting},
        )

    async def _write_claim(self, connection: AsyncConnection, plan: ClaimPlan) -> set[uuid.UUID]:
        """Insert the planned runs and the tasks of those inserted, advance the schedules;
        returns the ids of the runs inserted (a due time already present is not)."""
        inserted: set[uuid.UUID] = set()
        # The runs of due times are leased to us; the skipped rows of missed ones to nobody.
        skipped = [row for row in plan.runs if row["status"] == RunStatus.SKIPPED]
        due = [row for row in plan.runs if row["status"] != RunStatus.SKIPPED]
        for rows, shared in ((due, sql.DUE_SHARED), (skipped, sql.SKIPPED_SHARED)):
            if rows:
                params = self._shared_rows(sql.CLAIMED_RUN, "r", rows, shared)
                statement = sql.insert_claimed(self._dialect, shared)
                inserted.update((await connection.execute(statement, params)).scalars())
        tasks = [task for id, task in plan.tasks.items() if id in inserted]
        if tasks:
            await self.tasks.insert(connection, tasks)
        if plan.advances:
            params = self._rows(schedule_sql.ADVANCE, "a", plan.advances)
            await connection.execute(schedule_sql.advance_schedules(self._dialect), params)
        return inserted

    # -- admitting ----------------------------------------------------------------------------

    async def admit(self, runs: Sequence[Run]) -> list[StartDecision]:
        now = self.clock()
        by_id = {run.id: run for run in runs}
        decisions: dict[uuid.UUID, StartDecision] = {}
        promote: set[uuid.UUID] = set()
        async with self.db.connection() as connection:
            params = {**self._ids("i", by_id), "b_owner": self.owner}
            locked = await connection.execute(sql.lock_admittable(self._dialect), params)
            held = [Held.of(row, by_id[row.id]) for row in locked]
            schedule_ids = sorted({row.schedule_id for row in held})
            locking = schedule_sql.lock_schedules(self._dialect)
            found = (await connection.execute(locking, self._ids("j", schedule_ids))).all()
            schedules = {row.id: row for row in found}
            going = await self._going(connection, held, schedules)
            admitted: list[tuple[Any, Any]] = []
            ended: list[dict[str, Any]] = []
            waits: list[dict[str, Any]] = []
            stops: list[uuid.UUID] = []
            order = {id: index for index, id in enumerate(by_id)}
            for row in sorted(held, key=lambda row: order[row.id]):
                run, schedule = by_id[row.id], schedules[row.schedule_id]
                going_on = going.setdefault(row.schedule_id, Going())
                verdict = decide(Candidate.of(row, run.payload), Rules.of(schedule), going_on, now)
                if verdict.action == "run":
                    admitted.append((row, schedule))
                elif verdict.action == "done":
                    ended.append({"id": row.id, "error": None, **verdict.values})
                    apply_held(run, verdict.values)
                    decisions[row.id] = StartDecision("done", run)
                    if row.origin in QUEUED_ORIGINS:
                        promote.add(row.schedule_id)
                else:
                    if verdict.values:
                        waits.append({"b_id": row.id, "b_reason": verdict.values["reason"]})
                    stops.extend(verdict.stop)
                    decisions[row.id] = StartDecision("wait", run)
            tasks = await self.tasks.admitted(connection, admitted, now, going)
            started = [row for row, _ in admitted if row.id in tasks]
            for row, _ in admitted:
                if row.id not in tasks:
                    decisions[row.id] = StartDecision("wait", by_id[row.id])
            if started:
                until = self._until(now)
                ids = [{"id": row.id, "task_id": tasks[row.id].id} for row in started]
                params = {**self._rows(sql.ADMISSION, "s", ids), "b_now": now, "b_until": until}
                await connection.execute(sql.admit(self._dialect), params)
                for row in started:
                    # What the statement wrote (the rows are locked), as the same transition.
                    written = admitted_values(now, until, row.attempt, row.started_at)
                    run = by_id[row.id]
                    apply_held(run, {**written, "task_id": tasks[row.id].id})
                    decisions[row.id] = StartDecision("run", run, tasks[row.id])
            if ended:
                params = self._rows(sql.ENDING, "e", ended)
                await connection.execute(sql.end_unstarted(self._dialect), params)
            if waits:
                await connection.execute(sql.SET_REASON, waits)
            if stops:
                await connection.execute(sql.ask_to_stop(sorted(set(stops))))
            promoted = await promote_next(connection, promote, now)
        if promoted:
            self._changed()
        return [decisions.get(run.id, StartDecision("lost")) for run in runs]

    async def _going(
        self, connection: AsyncConnection, held: Sequence[Any], schedules: Mapping[uuid.UUID, Any]
    ) -> dict[uuid.UUID, Going]:
        """The other runs each schedule has going, for the schedules whose admission looks at
        them (overlap other than ``allow``, or a queued run)."""
        looking = sorted(
            {
                row.schedule_id
                for row in held
                if row.status == RunStatus.PENDING
                and (schedules[row.schedule_id].overlap != "allow" or row.origin in QUEUED_ORIGINS)
            }
        )
        going: dict[uuid.UUID, Going] = {}
        if not looking:
            return going
        deciding = {row.id for row in held}
        for row in await connection.execute(sql.going(self._dialect), self._ids("j", looking)):
            seen = going.setdefault(row.schedule_id, Going())
            if row.status == RunStatus.RUNNING and row.id not in deciding:
                seen.running.append(row.id)
            elif row.status == RunStatus.PENDING and row.id not in deciding:
                seen.buffered = True
        return going

    # -- recording ----------------------------------------------------------------------------

    async def record(self, outcomes: Sequence[Outcome]) -> list[Run | None]:
        now, until = self.clock(), self._until(self.clock())
        async with self.db.connection() as connection:
            cancels = [o.run.id for o in outcomes if o.status == RunStatus.CANCELLED]
            why: dict[uuid.UUID, tuple[bool, bool]] = {}
            if cancels:
                context = sql.cancel_context(self._dialect)
                found = await connection.execute(context, self._ids("h", cancels))
                why = {id: (asked, deleted) for id, asked, deleted in found}
            ends: dict[tuple[str, bool, bool], Values] = {}
            values = []
            for outcome in outcomes:
                asked, deleted = why.get(outcome.run.id, _NEITHER) if why else _NEITHER
                values.append(
                    written(
                        outcome,
                        now,
                        asked=asked,
                        deleted=deleted,
                        until=until,
                        owner=self.owner,
                        ends=ends,
                    )
                )
            params = {**self._rows(sql.OUTCOME, "o", values), "b_owner": self.owner}
            statement = sql.record_runs(self._dialect)
            ours = {row.id for row in await connection.execute(statement, params)}
            mine = [(o, v) for o, v in zip(outcomes, values, strict=True) if v["id"] in ours]
            for outcome, value in mine:
                apply_held(outcome.run, value)
            ended = [(outcome, value) for outcome, value in mine if outcome.retry_at is None]
            queued = await follow(self.db, connection, ended, now, until, self.owner)
            await self.tasks.after_record(connection, mine, now)
            promoted = await promote_next(connection, queued, now) if queued else False
        if promoted:
            self._changed()
        return [
            outcome.run if value["id"] in ours else None
            for outcome, value in zip(outcomes, values, strict=True)
        ]

    # -- leases -------------------------------------------------------------------------------

    async def release(self, run_ids: Sequence[uuid.UUID], *, started: bool = False) -> None:
        if not run_ids:
            return
        now = self.clock()
        statuses = ACTIVE if started else (RunStatus.PENDING.value,)
        async with self.db.connection() as connection:
            statement = lease_sql.release(self.owner, sorted(run_ids), statuses, released(now))
            released_runs = await connection.execute(statement)
            if started:
                held = [(task, run) for run, task in released_runs if task is not None]
                await self.tasks.free(connection, held, now)

    async def renew_leases(
        self, now: datetime, run_ids: Sequence[uuid.UUID] | None = None
    ) -> dict[uuid.UUID, bool]:
        until = self._until(now)
        async with self.db.connection() as connection:
            if run_ids is None:
                rows = list(await connection.execute(lease_sql.renew_leases(self.owner, until)))
            else:
                # Sorted across the chunks too, not only within each (``lease_sql.renew_leases``):
                # chunks in a random order would lock rows out of id order, and deadlock with
                # a batched write locking the same rows in order.
                ids, rows = sorted(run_ids), []
                for first in range(0, len(ids), 1000):
                    batch = lease_sql.renew_leases(self.owner, until, ids[first : first + 1000])
                    rows.extend(await connection.execute(batch))
        return {row[0]: bool(row[1]) for row in rows}

    def _changed(self) -> None:
        if self.on_change is not None:
            self.on_change()


def _is_a_run_store(store: SqlRunStore) -> RunStore:
    return store  # mypy checks here that the SQL store keeps the contract
