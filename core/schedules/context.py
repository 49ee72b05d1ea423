"""What every schedule verb shares: the database, the clock, the policy, the data directory,
the wake-up, and the rule of the active-schedule limit.

``ScheduleService`` makes one and hands it to each of its parts (CRUD, the timetable verbs,
the verbs by key), so a setting changed on it holds for every verb at once: the host wires
``on_change`` to its loop once the loop exists.
"""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from sqlalchemy.ext.asyncio import AsyncSession

from agentcron.core.clock import Clock
from agentcron.core.errors import ScheduleCapacityExceeded
from agentcron.core.policy import ExecutionPolicy
from agentcron.core.storage.database import Database
from agentcron.core.storage.sql.schedules import active_count, capacity_turn
from agentcron.core.storage.wakeups import announce_change
from agentcron.core.workdirs import make_workdir, task_workdir


@dataclass
class ScheduleContext:
    """The settings of the schedule verbs (``ScheduleService`` says what each means) and what
    they do alike: announce a change, find a schedule's working directory, take a turn at the
    active-schedule limit."""

    db: Database
    clock: Clock
    # What tenants may run (core.policy); checked for callers that are not trusted.
    policy: ExecutionPolicy
    max_active: int
    # AGENTCRON_ALLOW_PRIVATE_WEBHOOKS: notify targets on loopback/private networks.
    allow_private: bool
    # AGENTCRON_DATA_DIR: where runs start, so a save can say that a relative program path
    # is not there (None: not known here, and such paths are not judged).
    data_dir: Path | None
    on_change: Callable[[], None] | None

    async def announce(self, session: AsyncSession) -> None:
        """Tell the other replicas, in ``session``'s transaction, that a timetable changed."""
        await announce_change(self.db, session)

    def changed(self) -> None:
        """Tell the local loop, once the change is committed, to plan its sleep again."""
        if self.on_change is not None:
            self.on_change()

    def workdir(self, owner: str, schedule_id: uuid.UUID) -> Path | None:
        """Where the runs of a schedule start, when the data directory is known."""
        return None if self.data_dir is None else task_workdir(self.data_dir, owner, schedule_id)

    def make_workdir(self, owner: str, schedule_id: uuid.UUID) -> None:
        """Make a new schedule's task directory now, so its runs find it made: a burst of
        first runs of 3,000 new schedules spent a fifth of its CPU making their directories.
        Best effort: a replica whose data directory cannot be written (an API-only one, say)
        still saves the schedule, and the first run makes the directory or fails naming why.
        """
        workdir = self.workdir(owner, schedule_id)
        if workdir is not None:
            with contextlib.suppress(OSError):
                make_workdir(str(workdir))

    async def hold_capacity(self, session: AsyncSession) -> None:
        """Take this transaction's turn at the limit until it ends; before it locks any
        schedule's row.

        The limit is a count, then a write. Under READ COMMITTED two transactions (two
        replicas, or two requests of one) would each count below the limit and each make a
        schedule active. So every write that may make one active (create, apply, reconcile,
        resume, an edit that enables) counts only while it holds this transaction-level
        advisory lock (``CAPACITY_LOCK``), which it keeps until it commits: the writes take
        turns, and each counts what the one before it committed. The writes by key (apply,
        reconcile) take it too, so each reads the owner's keys after the one before it added
        its own. Lock order: it is the first lock of its transaction, taken before any
        schedule's row (docs/design.md), so its holder waits only for writers that do not want
        it. SQLite needs no lock: a write transaction holds the database's write lock from its
        BEGIN IMMEDIATE."""
        if self.db.capabilities.dialect == "postgresql":
            await session.execute(capacity_turn())

    async def check_capacity(self, session: AsyncSession) -> None:
        """Refuse (``ScheduleCapacityExceeded``) one more active schedule past ``max_active``,
        counted in this transaction's turn (``hold_capacity``, taken here if a write that
        locks no schedule row has not taken it yet), its own writes included."""
        await self.hold_capacity(session)
        active = await session.scalar(active_count())
        if (active or 0) >= self.max_active:
            raise ScheduleCapacityExceeded(
                f"at most {self.max_active} active schedules (AGENTCRON_MAX_ACTIVE_SCHEDULES)"
            )
