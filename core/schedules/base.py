"""What every schedule verb shares."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from pathlib import Path

from sqlalchemy import func, select
from sqlalchemy.ext.asyncio import AsyncSession

from agentcron.core.clock import Clock, utcnow
from agentcron.core.errors import ScheduleCapacityExceeded
from agentcron.core.policy import ExecutionPolicy
from agentcron.core.policy import current as current_policy
from agentcron.core.storage.database import Database
from agentcron.core.storage.models import Schedule
from agentcron.core.storage.wakeups import announce_change
from agentcron.core.workdirs import task_workdir

# The active-schedule limit is a count, then a write. Under READ COMMITTED two transactions
# (two replicas, or two requests of one) would each count below the limit and each make a
# schedule active. So every write that may make one active (create, apply, reconcile, resume,
# an edit that enables) counts only while it holds this transaction-level advisory lock, which
# it keeps until it commits: the writes take turns, and each counts what the one before it
# committed. The writes by key (apply, reconcile) take it too, so each reads the owner's keys
# after the one before it added its own. Lock order: it is the first lock of its transaction,
# taken before any schedule's row (docs/design.md), so its holder waits only for writers that
# do not want it. SQLite needs no lock: a write transaction holds the database's write lock
# from its BEGIN IMMEDIATE.
CAPACITY_LOCK = 0x61676E63  # "agnc"; retention's pass holds another key


class ServiceBase:
    """What the schedule verbs share: the database, the policy, the clock and the wake-up
    (``ScheduleService`` says what they mean)."""

    def __init__(
        self,
        db: Database,
        *,
        max_active: int = 100_000,
        clock: Clock = utcnow,
        on_change: Callable[[], None] | None = None,
        allow_private: bool = False,
        policy: ExecutionPolicy | None = None,
        data_dir: Path | None = None,
    ) -> None:
        self.db = db
        # AGENTCRON_DATA_DIR: where runs start, so a save can say that a relative program path
        # is not there (None: not known here, and such paths are not judged).
        self.data_dir = data_dir
        # What tenants may run (core.policy); checked for callers that are not trusted.
        self.policy = policy or current_policy()
        self.max_active = max_active
        # AGENTCRON_ALLOW_PRIVATE_WEBHOOKS: notify targets on loopback/private networks.
        self.allow_private = allow_private
        self.clock = clock
        self.on_change = on_change

    async def _announce(self, session: AsyncSession) -> None:
        await announce_change(self.db, session)

    def _workdir(self, owner: str, schedule_id: uuid.UUID) -> Path | None:
        """Where the runs of a schedule start, when this service knows the data directory."""
        return None if self.data_dir is None else task_workdir(self.data_dir, owner, schedule_id)

    def _changed(self) -> None:
        if self.on_change is not None:
            self.on_change()

    async def _hold_capacity(self, session: AsyncSession) -> None:
        """Take this transaction's turn at the limit (``CAPACITY_LOCK``) until it ends; before
        it locks any schedule's row."""
        if self.db.capabilities.dialect == "postgresql":
            await session.execute(select(func.pg_advisory_xact_lock(CAPACITY_LOCK)))

    async def _check_capacity(self, session: AsyncSession) -> None:
        """Refuse (``ScheduleCapacityExceeded``) one more active schedule past ``max_active``,
        counted in this transaction's turn (``_hold_capacity``, taken here if a write that
        locks no schedule row has not taken it yet), its own writes included."""
        await self._hold_capacity(session)
        active = await session.scalar(
            select(func.count())
            .select_from(Schedule)
            .where(Schedule.enabled.is_(True), Schedule.deleted_at.is_(None))
        )
        if (active or 0) >= self.max_active:
            raise ScheduleCapacityExceeded(
                f"at most {self.max_active} active schedules (AGENTCRON_MAX_ACTIVE_SCHEDULES)"
            )
