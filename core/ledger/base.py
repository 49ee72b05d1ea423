"""What every verb of the run ledger shares: the database, this instance's id, the lease."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from agentcron.core.clock import Clock, utcnow
from agentcron.core.storage.database import Database
from agentcron.core.storage.models import Schedule
from agentcron.core.workdirs import TaskDirectories


@dataclass
class LedgerBase:
    """The run ledger's state over one database. ``owner`` is this instance's id.

    ``clock`` tells every "now" the ledger writes (leases, ``available_at``, timestamps); the
    caller's ``now`` decides what is due and which leases ran out. On PostgreSQL both are the
    database's time (``core.clock.DatabaseClock``): leases written by one replica are judged
    by another, and only a shared clock keeps a fast host from taking over a live run.
    """

    db: Database
    owner: str
    lease_seconds: float = 30.0
    data_dir: Path = Path("./var")
    clock: Clock = utcnow
    # Wakes the loop after a commit that made work claimable (the next queued run).
    on_change: Callable[[], None] | None = None
    _dirs: TaskDirectories = field(init=False)

    def __post_init__(self) -> None:
        self._dirs = TaskDirectories(self.data_dir)

    def _lease_until(self, now: datetime) -> datetime:
        return now + timedelta(seconds=self.lease_seconds)

    def _changed(self) -> None:
        if self.on_change is not None:
            self.on_change()

    def _workdir(self, owner: str, schedule_id: uuid.UUID) -> str:
        return self._dirs.workdir(owner, schedule_id)

    def _new_task_row(
        self, task_id: uuid.UUID, schedule: Schedule, now: datetime
    ) -> dict[str, Any]:
        return {
            "id": task_id,
            "schedule_id": schedule.id,
            "owner": schedule.owner,
            "workdir": self._workdir(schedule.owner, schedule.id),
            "conversation": [],
            "lock_run_id": None,
            "created_at": now,
            "updated_at": now,
        }
