"""Recording a batch of plain attempt outcomes: the runs end, their schedules follow.

On PostgreSQL the batch is one statement (``record_sql.RECORD_RESULTS``); SQLite, and the
rare PostgreSQL batch part of whose runs another engine took meanwhile, send one statement per
step. Both write the transitions of ``core.transitions`` and apply the circuit breaker from
the schedule rows.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from sqlalchemy import update
from sqlalchemy.ext.asyncio import AsyncConnection

from agentcron.core.ledger.attempts import breaker_note
from agentcron.core.ledger.leases import Leases
from agentcron.core.ledger.types import Outcome, error_excerpt, output_excerpt
from agentcron.core.states import FAILURES, RunReason, RunStatus
from agentcron.core.storage import record_sql as sql
from agentcron.core.storage.arrays import array_params
from agentcron.core.storage.models import Run, Schedule
from agentcron.core.storage.wakeups import announce_change
from agentcron.core.transitions import apply, apply_held, finished, paused

# (id, streak, limit, enabled) of a schedule whose ``last_*`` fields a batch wrote.
Followed = tuple[uuid.UUID, int, int | None, bool]


class Recording(Leases):
    async def record_batch(self, outcomes: Sequence[Outcome]) -> list[Run | None]:
        """Record plain outcomes of attempts this instance ran, in one transaction: each run
        ends with its status (and its delivery lease, if a channel applies), each schedule's
        ``last_*`` fields and failure streak follow its runs in the order given, and a
        schedule whose streak reaches ``pause_after_failures`` is paused by its last failure,
        as ``finish_attempt`` does. For outcomes that need more (a retry, chat turns, pausing
        the schedule, a cancel) use ``finish_attempt``. Returns, per outcome, its run as
        written, or None if the lease was lost meanwhile (another replica owns the run now).
        Row locks: the runs, then their schedules, each in id order.
        """
        now = self.clock()
        ended = [self._ended(outcome, now) for outcome in outcomes]
        async with self.db.connection() as connection:
            if self.db.capabilities.dialect == "postgresql":
                ours, followed = await self._record_at_once(connection, outcomes, ended, now)
            else:
                ours, followed = await self._record_by_step(connection, outcomes, ended, now)
            mine = [outcome for outcome in outcomes if outcome.run.id in ours]
            for outcome, values in zip(outcomes, ended, strict=True):
                if outcome.run.id in ours:
                    apply_held(outcome.run, values)
            await self._trip_breakers(connection, mine, followed, now)
        return [outcome.run if outcome.run.id in ours else None for outcome in outcomes]

    def _ended(self, outcome: Outcome, now: datetime) -> dict[str, Any]:
        """What the record writes onto the outcome's run."""
        notify = outcome.run.payload.get("notify") or ()
        return {
            **finished(outcome.status, now),
            "output": output_excerpt(outcome.output),
            "error": error_excerpt(outcome.error),
            **self.delivery_lease(notify, outcome.status, now),
        }

    async def _record_at_once(
        self,
        connection: AsyncConnection,
        outcomes: Sequence[Outcome],
        ended: Sequence[dict[str, Any]],
        now: datetime,
    ) -> tuple[set[uuid.UUID], list[Followed]]:
        """PostgreSQL: the batch in one statement. A schedule some of whose runs were not ours
        any more is written again from those that were (a second statement, rare)."""
        results = schedule_results(outcomes, ended, now)
        # ``ended`` holds each run's written columns (its status too); its id is the outcome's.
        sent = [{**values, "id": o.run.id} for o, values in zip(outcomes, ended, strict=True)]
        follows = [{name: row[f"b_{name}"] for name in sql.RESULT_COLUMNS} for row in results]
        params = {
            "b_now": now,
            "b_owner": self.owner,
            **array_params(sql.OUTCOME_COLUMNS, "r", sent),
            **array_params(sql.RESULT_COLUMNS, "s", follows),
        }
        rows = (await connection.execute(sql.RECORD_RESULTS, params)).all()
        ours = {row.id for row in rows if row.kind == "run"}
        followed = [
            (row.id, row.streak, row.limit, row.enabled) for row in rows if row.kind != "run"
        ]
        written = {schedule_id for schedule_id, *_ in followed}
        partial = [
            (outcome, values)
            for outcome, values in zip(outcomes, ended, strict=True)
            if outcome.run.id in ours and outcome.run.schedule_id not in written
        ]
        if partial:
            again = schedule_results([o for o, _ in partial], [v for _, v in partial], now)
            await connection.execute(sql.SCHEDULE_RESULT, again)
            followed += await self._streaks(connection, again)
        return ours, followed

    async def _record_by_step(
        self,
        connection: AsyncConnection,
        outcomes: Sequence[Outcome],
        ended: Sequence[dict[str, Any]],
        now: datetime,
    ) -> tuple[set[uuid.UUID], list[Followed]]:
        """One statement per step: lock the runs still ours, end them, follow their schedules."""
        params = {"b_ids": [outcome.run.id for outcome in outcomes], "b_owner": self.owner}
        ours = set((await connection.execute(sql.LOCK_RUNNING, params)).scalars())
        mine = [
            (outcome, values)
            for outcome, values in zip(outcomes, ended, strict=True)
            if outcome.run.id in ours
        ]
        if not mine:
            return ours, []
        await connection.execute(
            sql.FINISH_RUN,
            [
                {
                    "b_id": outcome.run.id,
                    "b_status": outcome.status,
                    "b_output": values["output"],
                    "b_error": values["error"],
                    "b_now": now,
                    "b_deliver_until": values["deliver_until"],
                    "b_deliverer": values["deliverer"],
                }
                for outcome, values in mine
            ],
        )
        results = schedule_results([o for o, _ in mine], [v for _, v in mine], now)
        await connection.execute(sql.SCHEDULE_RESULT, results)
        return ours, await self._streaks(connection, results)

    async def _streaks(
        self, connection: AsyncConnection, results: Sequence[dict[str, Any]]
    ) -> list[Followed]:
        """The streaks the batch left where the breaker could trip: schedules (of these
        ``schedule_results``) whose last run failed, enabled, with a streak at their limit."""
        failing = [row["b_id"] for row in results if row["b_status"] in FAILURES]
        if not failing:
            return []
        tripped = (await connection.execute(sql.tripped_breakers(failing))).all()
        return [(schedule_id, streak, limit, True) for schedule_id, streak, limit in tripped]

    async def _trip_breakers(
        self,
        connection: AsyncConnection,
        recorded: Sequence[Outcome],
        followed: Sequence[Followed],
        now: datetime,
    ) -> None:
        """Pause the schedules whose failure streak the batch brought to their limit, as the
        schedule rows say after the batch (locked by it), by their last run if it failed."""
        last = {outcome.run.schedule_id: outcome.run for outcome in recorded}
        tripped = [
            (schedule_id, streak, limit)
            for schedule_id, streak, limit, enabled in sorted(followed)
            if enabled
            and limit is not None
            and streak >= limit
            and schedule_id in last
            and last[schedule_id].status in FAILURES
        ]
        for schedule_id, streak, limit in tripped:
            run = last[schedule_id]
            run.reason = RunReason.CIRCUIT_BREAKER.value
            delivery = self.delivery_lease(
                run.payload.get("notify") or (), run.status, now, run.reason
            )
            apply(run, delivery)
            note = breaker_note(streak, limit, run.error or run.status)
            await connection.execute(
                update(Schedule).where(Schedule.id == schedule_id).values(**paused(now, note))
            )
            await connection.execute(
                update(Run).where(Run.id == run.id).values(reason=run.reason, **delivery)
            )
        if tripped:
            await announce_change(self.db, connection)


def schedule_results(
    outcomes: Sequence[Outcome], ended: Sequence[dict[str, Any]], now: datetime
) -> list[dict[str, Any]]:
    """One parameter set of ``record_sql.SCHEDULE_RESULT`` per schedule, in id order (a fixed
    lock order, so two replicas recording at once cannot deadlock on schedule rows), from the
    outcomes in the order given and what the record writes (``ended``)."""
    by_schedule: dict[uuid.UUID, list[tuple[Outcome, dict[str, Any]]]] = {}
    for outcome, values in zip(outcomes, ended, strict=True):
        by_schedule.setdefault(outcome.run.schedule_id, []).append((outcome, values))
    params = []
    for schedule_id in sorted(by_schedule):
        runs = by_schedule[schedule_id]
        statuses = [outcome.status for outcome, _ in runs]
        reset = RunStatus.SUCCEEDED in statuses
        if reset:  # the streak restarts after the batch's last success
            last_success = len(statuses) - 1 - statuses[::-1].index(RunStatus.SUCCEEDED)
            failures = len(statuses) - 1 - last_success
        else:
            failures = len(statuses)
        last, values = runs[-1]
        params.append(
            {
                "b_id": schedule_id,
                "b_now": now,
                "b_status": last.status,
                "b_error": values["error"],
                "b_run_id": last.run.id,
                "b_reset": reset,
                "b_failures": failures,
            }
        )
    return params
