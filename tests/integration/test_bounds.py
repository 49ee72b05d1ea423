"""Bounds and jitter (issue 8, part 8), on both databases: ``max_runs`` ends a timetable after
N due times; ``jitter_seconds`` spreads the starts of schedules due at one instant, the same
way on every replica. That ``end_at`` ends a trigger is the trigger's own (tests/unit/
test_trigger_bounds.py); that a run waits for its ``available_at`` is the claim's (the run
store's contract)."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path

from agentcron.core import triggers
from agentcron.core.ledger.sql import SqlRunStore
from agentcron.core.schedules.service import ScheduleService
from agentcron.core.specs import ScheduleUpdate
from agentcron.core.storage.database import Database
from agentcron.core.timeline import jitter_delay
from tests.factories import insert_schedule
from tests.integration.engine_kit import fetch_schedule

T0 = datetime(2025, 1, 6, 0, 0, tzinfo=UTC)
S = timedelta(seconds=1)


async def test_a_bounded_timetable_ends_at_the_claim_and_a_raised_bound_restarts_it(
    db: Database, tmp_path: Path
) -> None:
    trigger = triggers.trigger_to_dict(triggers.IntervalTrigger(every_seconds=60, start_at=T0))
    schedule_id = await insert_schedule(
        db,
        T0,
        trigger=trigger,
        next_run=T0 + 60 * S,
        max_runs=4,
        scheduled_runs=1,  # counted before: room for three more
        misfire_grace_seconds=3600,
    )
    ledger = SqlRunStore(db, owner="t", lease_seconds=3600, data_dir=tmp_path)
    claim = await ledger.claim_due_jobs(T0 + 300 * S)  # five due times, room for three
    assert [run.due_at for run in claim.runs] == [T0 + k * 60 * S for k in (1, 2, 3)]
    ended = await fetch_schedule(db, schedule_id)
    assert (ended.next_run, ended.scheduled_runs, ended.enabled) == (None, 4, True)  # not paused
    assert (await ledger.claim_due_jobs(T0 + 600 * S)).runs == []

    # Raising the bound restarts the timetable from now.
    service = ScheduleService(db)
    patched = await service.update(schedule_id, ScheduleUpdate(max_runs=6), None)
    assert patched.next_run is not None and patched.next_run > datetime.now(UTC)


def test_jitter_is_deterministic_bounded_and_spread() -> None:
    due = T0 + 3600 * S
    ids = [uuid.UUID(int=i) for i in range(200)]
    delays = [jitter_delay(schedule_id, due, 60) for schedule_id in ids]
    assert delays == [jitter_delay(schedule_id, due, 60) for schedule_id in ids]  # replicas agree
    assert all(timedelta(0) <= delay <= 60 * S for delay in delays)
    # 200 schedules due at one instant start across the whole minute, not in a clump.
    seconds = sorted(delay.total_seconds() for delay in delays)
    assert seconds[0] < 6 and seconds[-1] > 54
    assert len({int(value // 6) for value in seconds}) == 10  # every tenth of the window used
    # The same schedule gets a different offset at another due time.
    assert len({jitter_delay(ids[0], due + k * 3600 * S, 60) for k in range(20)}) > 10


# max_runs and jitter_seconds through the API: rows of test_breaker.py::
# test_a_schedules_limit_is_set_checked_and_cleared_through_the_api.
