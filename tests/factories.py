"""Row values for tests that write the tables directly (bulk inserts, storage checks)."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from agentcron.core.runners.base import RunRequest


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
