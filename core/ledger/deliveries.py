"""The delivery leases of finished runs: ``DeliveryStore``'s contract over the database, and
in the memory store.

A run recorded with a channel to deliver to holds a delivery lease (``Run.deliver_until``,
``Run.deliverer``): the engine that recorded it delivers, renewing the lease, and clears it
when every channel is delivered or failed for good. If that engine dies, another takes the
run over once the lease ran out, or at once when the dead one's liveness lock is gone.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any

from sqlalchemy import ColumnElement

from agentcron.core.notify.delivery import applicable_channels
from agentcron.core.storage.database import Database
from agentcron.core.storage.models import Run
from agentcron.core.storage.sql import deliveries as delivery_sql
from agentcron.core.storage.sql.schedules import schedule_owners
from agentcron.core.storage.sql.tasks import task_workdirs
from agentcron.core.transitions import Values, apply, delivering

if TYPE_CHECKING:
    from agentcron.core.ledger.memory import MemoryRunStore


def delivery_lease(
    notify: Sequence[Mapping[str, Any]],
    status: str,
    reason: str | None,
    until: datetime,
    owner: str,
) -> Values:
    """The delivery lease of a run ending with ``status`` and ``reason``: ``owner``'s until
    ``until`` if a channel applies (``applicable_channels``), else none (nothing to do)."""
    if not applicable_channels(notify, status, reason):
        return delivering(None, None)
    return delivering(until, owner)


@dataclass
class SqlDeliveries:
    """The delivery leases engine ``owner`` holds over ``db``; ``until`` gives a lease's end
    from an instant, ``workdir`` a schedule's task directory (owner, schedule id)."""

    db: Database
    owner: str
    until: Callable[[datetime], datetime]
    workdir: Callable[[str, uuid.UUID], str]

    async def renew(self, now: datetime, run_ids: Sequence[uuid.UUID]) -> None:
        until, ids = self.until(now), list(run_ids)
        async with self.db.connection() as connection:
            for first in range(0, len(ids), 1000):
                await connection.execute(
                    delivery_sql.renew_deliveries(ids[first : first + 1000], until)
                )

    async def end(self, run_ids: Sequence[uuid.UUID]) -> None:
        async with self.db.connection(single=True) as connection:
            await connection.execute(delivery_sql.end_deliveries(list(run_ids)))

    async def take_over(
        self, now: datetime, limit: int, dead: Collection[str] = (), predecessors: bool = False
    ) -> list[tuple[Run, str]]:
        """As the contract says; the working directory of each run is its task's, or its
        schedule's if the task is gone (file channels write there). ``predecessors``: on
        SQLite every run left by anyone, on PostgreSQL those under this very id."""
        adopt: ColumnElement[bool] | None = None
        if predecessors:
            multi_process = self.db.capabilities.multi_process
            adopt = delivery_sql.predecessor_deliveries(self.owner, multi_process)
        async with self.db.session() as session:
            statement = delivery_sql.take_over_deliveries(
                now, self.owner, self.until(now), limit, sorted(dead), adopt, schema=self.db.schema
            )
            runs = list((await session.execute(statement)).scalars())
            task_ids = {run.task_id for run in runs if run.task_id is not None}
            workdirs: dict[uuid.UUID | None, str] = {}
            if task_ids:
                workdirs.update(
                    (row.id, row.workdir) for row in await session.execute(task_workdirs(task_ids))
                )
            orphans = {run.schedule_id for run in runs if run.task_id not in workdirs}
            owners: dict[uuid.UUID, str] = {}
            if orphans:
                owners.update(
                    (row.id, row.owner) for row in await session.execute(schedule_owners(orphans))
                )
        return [
            (
                run,
                workdirs.get(run.task_id) or self.workdir(owners[run.schedule_id], run.schedule_id),
            )
            for run in runs
        ]


class MemoryDeliveries:
    """The delivery leases of a ``MemoryRunStore``'s finished runs."""

    def __init__(self, store: MemoryRunStore) -> None:
        self.store = store

    async def renew(self, now: datetime, run_ids: Sequence[uuid.UUID]) -> None:
        await self.store.enter("renew_deliveries")
        for run_id in run_ids:
            run = self.store.runs.get(run_id)
            if run is not None and run.deliver_until is not None:
                run.deliver_until = self.store.lease_end(now)

    async def end(self, run_ids: Sequence[uuid.UUID]) -> None:
        await self.store.enter("end_deliveries")
        for run_id in run_ids:
            if run_id in self.store.runs:
                apply(self.store.runs[run_id], delivering(None, None))

    async def take_over(
        self, now: datetime, limit: int, dead: Collection[str] = (), predecessors: bool = False
    ) -> list[tuple[Run, str]]:
        store = self.store
        await store.enter("take_over_deliveries")
        orphaned = sorted(
            (
                r
                for r in store.runs.values()
                if r.deliver_until is not None and r.deliver_until < now
            ),
            key=lambda run: run.deliver_until,  # type: ignore[arg-type, return-value]
        )[:limit]
        taken = []
        for run in orphaned:
            apply(run, delivering(store.lease_end(now), store.owner))
            schedule = store.schedules[run.schedule_id]
            task = store.tasks.get(run.task_id) if run.task_id is not None else None
            workdir = task["workdir"] if task else store.dirs.workdir(schedule.owner, schedule.id)
            taken.append((store.run(run.id), workdir))
        return taken
