"""Leases: renewing what this instance holds, giving runs back, and delivery leases."""

from __future__ import annotations

import uuid
from collections.abc import Collection, Mapping, Sequence
from datetime import datetime
from typing import Any

from sqlalchemy import ColumnElement, select, true

from agentcron.core.ledger.base import LedgerBase
from agentcron.core.notify.delivery import applicable_channels
from agentcron.core.storage import queries as q
from agentcron.core.storage.models import Run, Schedule, Task
from agentcron.core.transitions import Values, delivering


class Leases(LedgerBase):
    # -- leases ---------------------------------------------------------------------------

    async def renew_leases(
        self, now: datetime, run_ids: Sequence[uuid.UUID] | None = None
    ) -> dict[uuid.UUID, bool]:
        """Extend the leases this instance holds: only on ``run_ids`` when given (the runs the
        engine still works on, so the lease of a run whose attempt died lapses and the run is
        taken over). Returns ``{run_id: stop}`` (``stop``: the run was asked to stop, or its
        schedule was deleted); a run missing from it is no longer ours (its lease was lost to
        another replica)."""
        until = self._lease_until(now)
        async with self.db.session() as session:
            if run_ids is None:
                rows = list((await session.execute(q.renew_leases(self.owner, until))).all())
            else:
                # Sorted across the chunks too, not only within each (``q.renew_leases``):
                # chunks in a random order would lock rows out of id order, and deadlock with
                # a batched write locking the same rows in order.
                ids, rows = sorted(run_ids), []
                for start in range(0, len(ids), 1000):
                    batch = q.renew_leases(self.owner, until, ids[start : start + 1000])
                    rows.extend((await session.execute(batch)).all())
        return {row[0]: bool(row[1]) for row in rows}

    async def release(self, run_ids: Sequence[uuid.UUID]) -> None:
        """Give leased runs back so any replica can continue them at once (shutdown)."""
        if not run_ids:
            return
        async with self.db.session() as session:
            await session.execute(q.release_leases(self.owner, list(run_ids), self.clock()))

    # -- delivery leases (``Run.deliver_until``) ------------------------------------------

    def delivery_lease(
        self,
        notify: Sequence[Mapping[str, Any]],
        status: str,
        now: datetime,
        reason: str | None = None,
    ) -> Values:
        """The delivery lease of a run finishing ``now`` with ``status`` (``deliver_until``
        and ``deliverer``): ours, from now, if a channel applies (the recorder then delivers,
        renewing it), else none (nothing to do)."""
        if not applicable_channels(notify, status, reason):
            return delivering(None, None)
        return delivering(self._lease_until(now), self.owner)

    async def renew_deliveries(self, now: datetime, run_ids: Sequence[uuid.UUID]) -> None:
        """Extend the delivery leases of runs this process is delivering now."""
        until, ids = self._lease_until(now), list(run_ids)
        async with self.db.connection() as connection:
            for start in range(0, len(ids), 1000):
                await connection.execute(q.renew_deliveries(ids[start : start + 1000], until))

    async def end_deliveries(self, run_ids: Sequence[uuid.UUID]) -> None:
        """Clear the delivery lease: every channel of these runs is delivered or failed."""
        async with self.db.connection(single=True) as connection:
            await connection.execute(q.end_deliveries(list(run_ids)))

    async def take_over_deliveries(
        self,
        now: datetime,
        limit: int,
        dead: Collection[str] = (),
        predecessors: bool = False,
    ) -> list[tuple[Run, str]]:
        """Lease to this instance up to ``limit`` finished runs whose deliveries nobody makes:
        their delivery lease ran out, their deliverer is one of the ``dead`` (its liveness
        lock still free), or, with ``predecessors`` (a started engine's first look), they
        were left by the engine this one replaces (SQLite: every one; PostgreSQL: those under
        this id). Each comes with the working directory of its task (file channels write
        there), or of its schedule if the task is gone."""
        adopt: ColumnElement[bool] | None = None
        if predecessors:
            adopt = Run.deliverer == self.owner if self.db.capabilities.multi_process else true()
        async with self.db.session() as session:
            until = self._lease_until(now)
            statement = q.take_over_deliveries(
                now, self.owner, until, limit, sorted(dead), adopt, schema=self.db.schema
            )
            runs = list((await session.execute(statement)).scalars())
            task_ids = {run.task_id for run in runs if run.task_id is not None}
            workdirs: dict[uuid.UUID | None, str] = {}
            if task_ids:
                found = await session.execute(
                    select(Task.id, Task.workdir).where(Task.id.in_(task_ids))
                )
                workdirs.update((row.id, row.workdir) for row in found)
            orphans = {run.schedule_id for run in runs if run.task_id not in workdirs}
            owners: dict[uuid.UUID, str] = {}
            if orphans:
                found = await session.execute(
                    select(Schedule.id, Schedule.owner).where(Schedule.id.in_(orphans))
                )
                owners.update((row.id, row.owner) for row in found)
        return [
            (
                run,
                workdirs.get(run.task_id)
                or self._workdir(owners[run.schedule_id], run.schedule_id),
            )
            for run in runs
        ]
