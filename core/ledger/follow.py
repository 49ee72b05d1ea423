"""A schedule following its ended runs, on SQL: ``last_*``, the failure streak and the circuit
breaker of every schedule of a record's batch, in one statement (``core.ledger.outcomes``
says what each follows and when it pauses; ``core.transitions`` what is written)."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from datetime import datetime

from sqlalchemy.ext.asyncio import AsyncConnection

from agentcron.core.ledger.outcomes import follow_ups, pause_after
from agentcron.core.ledger.store import Outcome
from agentcron.core.storage.database import Database
from agentcron.core.storage.sql import runs as sql
from agentcron.core.storage.sql import schedules as schedule_sql
from agentcron.core.storage.sql.rows import rows_params
from agentcron.core.storage.wakeups import announce_change
from agentcron.core.transitions import Values, apply_held, paused


async def follow(
    db: Database,
    connection: AsyncConnection,
    ended: Sequence[tuple[Outcome, Values]],
    now: datetime,
    until: datetime,
    owner: str,
) -> set[uuid.UUID]:
    """Each schedule of ``ended`` follows its runs (``follow_ups``), and is paused if
    ``pause_after`` says so. Returns the schedules a queued run of ended (catch-up,
    backfill): their next one is due its turn."""
    follow, queued = follow_ups(ended)
    if not follow:
        return queued
    rows = [f.row(id) for id, f in sorted(follow.items())]
    params = {
        **rows_params(schedule_sql.FOLLOW_UP, "f", rows, db.engine.dialect),
        "b_now": now,
    }
    statement = schedule_sql.follow_schedules(db.capabilities.dialect)
    paused_any = False
    for schedule_id, streak, limit, enabled in await connection.execute(statement, params):
        followed = follow[schedule_id]
        if (limit is None or streak < limit) and not followed.last.pause_schedule:
            continue  # the usual case: nothing to pause
        note, run_values = pause_after(followed, streak, limit, enabled, until=until, owner=owner)
        if run_values:
            run = followed.last.run
            apply_held(run, run_values)
            await connection.execute(sql.update_run(run.id, run_values))
        if note is not None:
            await connection.execute(schedule_sql.update_schedule(schedule_id, paused(now, note)))
            paused_any = True
    if paused_any:
        await announce_change(db, connection)
    return queued
