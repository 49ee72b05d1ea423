"""The tasks runs run in, on SQL: found or made at an admission, given back after a record.

An isolated run has a task of its own (made with the claim, or at its admission). A
persistent schedule's runs share its one task and its conversation, one at a time: the run
admitted on it holds its run lock until its outcome is recorded or it is given back.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy.ext.asyncio import AsyncConnection

from agentcron.core.admission import Going
from agentcron.core.ledger.store import Outcome, PreparedTask
from agentcron.core.planning import new_task
from agentcron.core.states import RunStatus
from agentcron.core.storage.database import Database
from agentcron.core.storage.sql import runs as sql
from agentcron.core.storage.sql import schedules as schedule_sql
from agentcron.core.storage.sql import tasks as task_sql
from agentcron.core.storage.sql.rows import IDS, rows_params
from agentcron.core.transitions import Values
from agentcron.core.workdirs import TaskDirectories


@dataclass
class SqlTasks:
    """The tasks of one SQL store over ``db``; ``dirs`` names their directories."""

    db: Database
    dirs: TaskDirectories

    @property
    def dialect(self) -> str:
        return self.db.capabilities.dialect

    def _ids(self, name: str, ids: Iterable[uuid.UUID]) -> dict[str, Any]:
        return rows_params(IDS, name, [{"id": id} for id in ids], self.db.engine.dialect)

    async def admitted(
        self,
        connection: AsyncConnection,
        admitted: Sequence[tuple[Any, Any]],
        now: datetime,
        going: dict[uuid.UUID, Going],
    ) -> dict[uuid.UUID, PreparedTask]:
        """The task each admitted run runs in, found or made now. An isolated run keeps the
        task it has (a resumed run goes on in the same task, promise 6), or gets a fresh one.
        A persistent run runs in its schedule's one task, read with its conversation and
        locked to the run; one whose lock another running run holds leaves the run out: it
        waits."""
        tasks: dict[uuid.UUID, PreparedTask] = {}
        shared: dict[uuid.UUID, uuid.UUID] = {}  # persistent run -> the task it runs in
        for row, schedule in admitted:
            if schedule.mode == "persistent" and (row.task_id or schedule.task_id):
                shared[row.id] = row.task_id or schedule.task_id
            elif row.task_id is not None:
                workdir = self.dirs.workdir(schedule.owner, schedule.id)
                tasks[row.id] = PreparedTask(row.task_id, workdir)
        found: dict[uuid.UUID, Any] = {}
        busy: set[uuid.UUID] = set()
        if shared:
            ids = self._ids("k", sorted(set(shared.values())))
            locked = await connection.execute(task_sql.lock_tasks(self.dialect), ids)
            found = {task.id: task for task in locked}
            holders = sorted({task.lock_run_id for task in found.values()} - {None})
            if holders:
                ids = self._ids("h", holders)
                rows = await connection.execute(sql.statuses(self.dialect), ids)
                busy = {id for id, status in rows if status == RunStatus.RUNNING}
        made, binds, locks = [], [], []
        for row, schedule in admitted:
            persistent = schedule.mode == "persistent"
            task = found.get(shared.get(row.id))  # type: ignore[arg-type]
            if row.id in tasks:
                continue
            if (
                task is not None
                and task.lock_run_id not in (None, row.id)
                and task.lock_run_id in busy
            ):
                going[row.schedule_id].running.remove(row.id)
                continue
            if task is not None:
                history = list(task.conversation) if persistent else []
                tasks[row.id] = PreparedTask(task.id, task.workdir, history)
            else:
                task_id = row.task_id or uuid.uuid4()
                workdir = self.dirs.workdir(schedule.owner, schedule.id)
                made.append(new_task(task_id, schedule.id, schedule.owner, workdir, now))
                if persistent:
                    binds.append({"b_id": schedule.id, "b_task": task_id})
                tasks[row.id] = PreparedTask(task_id, workdir)
            if persistent:
                locks.append({"b_id": tasks[row.id].id, "b_run": row.id, "b_now": now})
        if made:
            await self.insert(connection, made)
        if binds:
            await connection.execute(schedule_sql.BIND_TASK, binds)
        if locks:
            await connection.execute(task_sql.TAKE_TASK_LOCK, locks)
        return tasks

    async def after_record(
        self,
        connection: AsyncConnection,
        mine: Sequence[tuple[Outcome, Values]],
        now: datetime,
    ) -> None:
        """Persistent runs give their task's run lock back, and a success's chat turns join
        the task's conversation, once per run id (a resumed run never adds its turn twice)."""
        persistent = [
            (outcome, value, outcome.run.task_id)
            for outcome, value in mine
            if outcome.run.task_id is not None and outcome.run.payload.get("mode") == "persistent"
        ]
        await self.free(connection, [(task, o.run.id) for o, _, task in persistent], now)
        for outcome, value, task_id in persistent:
            if not outcome.turns or value["status"] != RunStatus.SUCCEEDED:
                continue
            held = await connection.scalar(task_sql.conversation(task_id))
            if held is None or any(turn.get("run_id") == str(outcome.run.id) for turn in held):
                continue
            turns = [{**turn, "run_id": str(outcome.run.id)} for turn in outcome.turns]
            values = {"conversation": [*held, *turns], "updated_at": now}
            await connection.execute(task_sql.update_task(task_id, values))

    async def insert(self, connection: AsyncConnection, tasks: Sequence[Mapping[str, Any]]) -> None:
        """Insert fresh tasks (``planning.new_task``'s rows), made at one instant."""
        first = tasks[0]
        shared = {key: first[key] for key in task_sql.TASK_SHARED}
        params = rows_params(task_sql.NEW_TASK, "t", tasks, self.db.engine.dialect, shared)
        await connection.execute(task_sql.insert_tasks(self.dialect), params)

    async def free(
        self,
        connection: AsyncConnection,
        held: Sequence[tuple[uuid.UUID, uuid.UUID]],
        now: datetime,
    ) -> None:
        """Each (task, run): the task gives up its run lock if the run holds it."""
        frees = [{"b_id": task, "b_run": run, "b_now": now} for task, run in sorted(held)]
        if frees:
            await connection.execute(task_sql.FREE_TASK_LOCK, frees)
