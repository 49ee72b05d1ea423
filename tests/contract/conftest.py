"""The run stores the contract suite holds to one contract: the memory store, and the SQL store
on SQLite and on PostgreSQL (each test runs on the three).

A ``World`` arranges and reads what a test needs the same way for every store: schedules and
runs as users and other replicas would leave them, and the rows as stored.
"""

from __future__ import annotations

import shutil
import uuid
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import insert

from agentcron.core.ledger.memory import MemoryRunStore
from agentcron.core.ledger.sql import SqlRunStore
from agentcron.core.storage.database import Database
from agentcron.core.storage.models import Run, Schedule, Task
from agentcron.core.timeline import run_payload
from tests.conftest import PgServer, clone_pg
from tests.factories import insert_schedule, schedule_values
from tests.integration.engine_kit import fetch_run, fetch_schedule, runs_of, set_row

T0 = datetime(2025, 1, 6, 0, 0, tzinfo=UTC)
DUE = T0 + timedelta(seconds=60)
NOW = DUE + timedelta(seconds=1)
LEASE = 30.0
OWNER = "replica-a"
HOURLY = {"every_seconds": 3600, "start_at": T0.isoformat()}


def run_values(schedule_id: uuid.UUID, at: datetime = NOW, **fields: Any) -> dict[str, Any]:
    """Every column of a run of ``schedule_id`` as run now leaves it at ``at``: pending,
    nobody's, claimable then; ``fields`` win."""
    return {
        "id": uuid.uuid4(),
        "schedule_id": schedule_id,
        "trigger": "manual",
        "status": "pending",
        "attempt": 0,
        "payload": {},
        "created_at": at,
        "available_at": at,
        "cancel_requested": False,
        **fields,
    }


async def add_runs(db: Database, rows: list[dict[str, Any]]) -> None:
    async with db.session() as session:
        await session.execute(insert(Run), rows)


def task_values(task_id: uuid.UUID, schedule_id: uuid.UUID, at: datetime, workdir: str) -> Task:
    """A task of ``schedule_id`` made at ``at``, with no conversation yet."""
    return Task(
        id=task_id,
        schedule_id=schedule_id,
        owner="local",
        workdir=workdir,
        conversation=[],
        created_at=at,
        updated_at=at,
    )


def _queued(schedule: Schedule, **fields: Any) -> dict[str, Any]:
    return run_values(
        schedule.id, **{"origin": "manual", "payload": run_payload(schedule), **fields}
    )


class SqlWorld:
    def __init__(self, db: Database, data_dir: Path, kind: str) -> None:
        self.db, self.kind = db, kind
        self.store = SqlRunStore(
            db, owner=OWNER, lease_seconds=LEASE, data_dir=data_dir, clock=lambda: NOW
        )

    async def schedule(self, **fields: Any) -> uuid.UUID:
        """A schedule due at ``DUE`` (``next_run``), hourly from ``T0``; ``fields`` win."""
        return await insert_schedule(self.db, T0, **{"trigger": HOURLY, "next_run": DUE, **fields})

    async def queued(self, schedule_id: uuid.UUID, **fields: Any) -> Run:
        """A run of the schedule as run now leaves it: pending, nobody's, claimable now."""
        row = _queued(await self.schedule_row(schedule_id), **fields)
        await add_runs(self.db, [row])
        return await self.run(row["id"])

    async def run(self, run_id: uuid.UUID) -> Run:
        """The run as stored."""
        return await fetch_run(self.db, run_id)

    async def schedule_row(self, schedule_id: uuid.UUID) -> Schedule:
        """The schedule as stored."""
        return await fetch_schedule(self.db, schedule_id)

    async def runs_of(self, schedule_id: uuid.UUID) -> list[Run]:
        """The schedule's runs as stored."""
        return await runs_of(self.db, schedule_id)

    async def set_run(self, run_id: uuid.UUID, **values: Any) -> None:
        """Change a run behind the store's back (another replica, the API)."""
        await set_row(self.db, Run, run_id, **values)

    async def set_schedule(self, schedule_id: uuid.UUID, **values: Any) -> None:
        """Change a schedule behind the store's back (a user's pause, a deletion)."""
        await set_row(self.db, Schedule, schedule_id, **values)

    async def task(self, task_id: uuid.UUID) -> dict[str, Any] | None:
        """The task's working directory, conversation and run lock, or None."""
        async with self.db.session(write=False) as session:
            task = await session.get(Task, task_id)
        if task is None:
            return None
        return {
            "workdir": task.workdir,
            "conversation": task.conversation,
            "lock_run_id": task.lock_run_id,
        }


class MemoryWorld:
    kind = "memory"

    def __init__(self, data_dir: Path) -> None:
        self.memory = MemoryRunStore(
            owner=OWNER, lease_seconds=LEASE, data_dir=data_dir, clock=lambda: NOW
        )
        self.store = self.memory

    async def schedule(self, **fields: Any) -> uuid.UUID:
        values = schedule_values(T0, **{"trigger": HOURLY, "next_run": DUE, **fields})
        runner = values.pop("runner")
        return self.memory.add_schedule(runner, **values).id

    async def queued(self, schedule_id: uuid.UUID, **fields: Any) -> Run:
        run = Run(**_queued(self.memory.schedules[schedule_id], **fields))
        self.memory.runs[run.id] = run
        return self.memory.run(run.id)

    async def run(self, run_id: uuid.UUID) -> Run:
        return self.memory.run(run_id)

    async def schedule_row(self, schedule_id: uuid.UUID) -> Schedule:
        return self.memory.schedules[schedule_id]

    async def runs_of(self, schedule_id: uuid.UUID) -> list[Run]:
        runs = self.memory.runs.values()
        return [self.memory.run(run.id) for run in runs if run.schedule_id == schedule_id]

    async def set_run(self, run_id: uuid.UUID, **values: Any) -> None:
        for name, value in values.items():
            setattr(self.memory.runs[run_id], name, value)

    async def set_schedule(self, schedule_id: uuid.UUID, **values: Any) -> None:
        for name, value in values.items():
            setattr(self.memory.schedules[schedule_id], name, value)

    async def task(self, task_id: uuid.UUID) -> dict[str, Any] | None:
        task = self.memory.tasks.get(task_id)
        if task is None:
            return None
        return {key: task[key] for key in ("workdir", "conversation", "lock_run_id")}


# What a test arranges and reads, the same way on every store (documented on SqlWorld).
World = SqlWorld | MemoryWorld


@pytest.fixture(params=["memory", "sqlite", "postgresql"])
def backend(request: pytest.FixtureRequest) -> str:
    kind: str = request.param
    return kind


@pytest.fixture
async def world(
    backend: str, tmp_path: Path, sqlite_template: Path, pg_server: PgServer | None
) -> AsyncIterator[World]:
    """The store of ``backend``, empty, with a fresh database of its own (tests/conftest.py)."""
    if backend == "memory":
        yield MemoryWorld(tmp_path)
        return
    if backend == "sqlite":
        shutil.copy(sqlite_template, tmp_path / "agentcron.db")
        url = f"sqlite+aiosqlite:///{tmp_path / 'agentcron.db'}"
    else:
        url = await clone_pg(pg_server)
    db = Database(url)
    try:
        yield SqlWorld(db, tmp_path, backend)
    finally:
        await db.dispose()
        if pg_server is not None and backend == "postgresql":
            await pg_server.give_back(url)
