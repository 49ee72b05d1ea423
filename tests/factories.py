"""Row values for tests that write the tables directly (bulk inserts, storage checks)."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from sqlalchemy import insert

from agentcron.core.runners.base import RunRequest
from agentcron.core.storage.database import Database
from agentcron.core.storage.models import Schedule


def schedule_values(now: datetime | None = None, **overrides: Any) -> dict[str, Any]:
    """Every column of a valid, enabled, isolated interval schedule; ``overrides`` win."""
    now = now or datetime.now(UTC)
    values: dict[str, Any] = {
        "id": uuid.uuid4(),
        "owner": "local",
        "name": "n",
        "prompt": "p",
        "trigger": {"every_seconds": 60, "start_at": now.isoformat()},
        "enabled": True,
        "mode": "isolated",
        "overlap": "allow",
        "catchup": "skip",
        "catchup_window_seconds": 3600,
        "misfire_grace_seconds": 60,
        "timeout_seconds": 60,
        "max_attempts": 3,
        "runner": {"type": "command", "argv": ["true"]},
        "notify": [],
        "consecutive_failures": 0,
        "created_at": now,
        "updated_at": now,
    }
    values.update(overrides)
    return values


async def insert_schedule(db: Database, now: datetime | None = None, **overrides: Any) -> uuid.UUID:
    """A schedule of ``schedule_values`` written directly to ``db``: its id."""
    values = schedule_values(now, **overrides)
    async with db.session() as session:
        await session.execute(insert(Schedule), [values])
    schedule_id: uuid.UUID = values["id"]
    return schedule_id


def run_request(**overrides: Any) -> RunRequest:
    """A runner's input for one attempt, as the engine builds it; ``overrides`` win."""
    values: dict[str, Any] = {
        "run_id": uuid.uuid4(),
        "schedule_id": uuid.uuid4(),
        "task_id": uuid.uuid4(),
        "attempt": 1,
        "trigger": "schedule",
        "due_at": datetime(2025, 1, 6, 8, 0, tzinfo=UTC),
        "prompt": "hello",
        "workdir": Path("/nonexistent"),
        "timeout_seconds": 10.0,
    }
    values.update(overrides)
    return RunRequest(**values)
