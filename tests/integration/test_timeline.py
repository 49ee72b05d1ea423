"""Every due time is accounted for (issue 8, part 1), on both databases: a gap written once,
paused rows, skipped occurrences. Which rows a claim writes for a gap (``missed``,
``coalesced``, a counted summary) is the run store's contract (tests/contract)."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest

from agentcron.core import triggers
from agentcron.core.errors import Conflict, InvalidSchedule
from agentcron.core.ledger.sql import SqlRunStore
from agentcron.core.specs import ScheduleUpdate
from agentcron.core.storage.database import Database
from agentcron.core.storage.models import Schedule
from tests.factories import insert_schedule
from tests.integration.engine_kit import runs_of
from tests.integration.test_backfill import minutely
from tests.integration.test_schedules_api import create

T0 = datetime(2025, 1, 6, 0, 0, tzinfo=UTC)
S = timedelta(seconds=1)
MINUTE = 60 * S


async def add_due_schedule(db: Database, next_run: datetime, **overrides: Any) -> uuid.UUID:
    trigger = triggers.trigger_to_dict(triggers.IntervalTrigger(every_seconds=60, start_at=T0))
    return await insert_schedule(db, T0, trigger=trigger, next_run=next_run, **overrides)


def ledger(db: Database, tmp_path: Path) -> SqlRunStore:
    return SqlRunStore(db, owner="timeline", lease_seconds=30, data_dir=tmp_path)


async def test_a_second_claim_never_doubles_an_accounted_due_time(
    db: Database, tmp_path: Path
) -> None:
    # A replica with a stale next_run plans the same gap again: UNIQUE(schedule_id, due_at)
    # keeps one row per due time.
    schedule_id = await add_due_schedule(db, T0 + MINUTE)
    engine = ledger(db, tmp_path)
    await engine.claim_due_jobs(T0 + 5 * MINUTE + 30 * S)
    async with db.session() as session:
        schedule = await session.get(Schedule, schedule_id)
        assert schedule is not None
        schedule.next_run = T0 + MINUTE
    await engine.claim_due_jobs(T0 + 5 * MINUTE + 31 * S)
    due_times = [r.due_at for r in await runs_of(db, schedule_id)]
    assert len(due_times) == len(set(due_times)) == 5


async def test_pause_writes_paused_rows_at_resume(db: Database) -> None:
    service, schedule_id, clock = await minutely(db, T0)
    clock.now = T0 + 30 * S
    await service.pause(schedule_id, "maintenance", None)
    clock.now = T0 + 3 * MINUTE + 30 * S
    resumed = await service.resume(schedule_id, None)

    rows = await runs_of(db, schedule_id)
    assert [(r.due_at, r.status, r.reason) for r in rows] == [
        (T0 + k * MINUTE, "skipped", "paused") for k in (1, 2, 3)
    ]
    assert resumed.next_run == T0 + 4 * MINUTE

    # Resuming by PATCH {"enabled": true} accounts the same way.
    clock.now = T0 + 4 * MINUTE + 10 * S
    await service.pause(schedule_id, None, None)
    clock.now = T0 + 6 * MINUTE + 10 * S
    await service.update(schedule_id, ScheduleUpdate(enabled=True), None)
    reasons = [(r.due_at, r.reason) for r in await runs_of(db, schedule_id)]
    assert reasons[-2:] == [(T0 + 5 * MINUTE, "paused"), (T0 + 6 * MINUTE, "paused")]


# -- skip and unskip one occurrence (issue 8, part 3) --------------------------------------


async def test_a_skipped_occurrence_never_runs_and_unskip_puts_one_back(
    db: Database, tmp_path: Path
) -> None:
    service, schedule_id, clock = await minutely(db, T0 + 10 * S)
    second = (T0 + 2 * MINUTE).isoformat()
    skipped = await service.skip_occurrence(schedule_id, second, None, by="alice")
    expected = ("skipped", "occurrence_skipped", "alice")
    assert (skipped.status, skipped.reason, skipped.started_by) == expected
    again = await service.skip_occurrence(schedule_id, second, None)
    assert again.id == skipped.id  # idempotent
    first = (T0 + MINUTE).isoformat()
    await service.skip_occurrence(schedule_id, first, None)
    assert await service.unskip_occurrence(schedule_id, first, None) is True
    assert await service.unskip_occurrence(schedule_id, first, None) is False  # nothing left

    # A lease longer than the test's minutes, so no claim takes an earlier one's runs over.
    engine = SqlRunStore(db, owner="timeline", lease_seconds=3600, data_dir=tmp_path)
    claimed = []
    for k in (1, 2, 3):
        claimed += (await engine.claim_due_jobs(T0 + k * MINUTE + S)).runs
    assert [run.due_at for run in claimed] == [T0 + MINUTE, T0 + 3 * MINUTE]
    statuses = {r.due_at: (r.status, r.reason) for r in await runs_of(db, schedule_id)}
    assert statuses[T0 + 2 * MINUTE] == ("skipped", "occurrence_skipped")


async def test_skip_refuses_what_is_not_an_upcoming_due_time(db: Database, tmp_path: Path) -> None:
    service, schedule_id, clock = await minutely(db, T0 + 10 * S)
    for value, says in [
        ((T0 + MINUTE + 30 * S).isoformat(), "not a due time of this schedule"),
        (T0.isoformat(), "has passed"),
        # Without an offset: read on the schedule's clock (an interval's is UTC), and said so
        # between two commas.
        ((T0 + MINUTE + 30 * S).replace(tzinfo=None).isoformat(), ":30, read in UTC, is not a"),
        ("tomorrow", "ISO 8601"),
    ]:
        with pytest.raises(InvalidSchedule) as refused:
            await service.skip_occurrence(schedule_id, value, None)
        assert refused.value.field == "due_at" and says in refused.value.message, value

    # A due time that already has a run of its own cannot be skipped.
    clock.now = T0 + MINUTE + S
    await ledger(db, tmp_path).claim_due_jobs(T0 + MINUTE + S)
    clock.now = T0 + 50 * S  # (the claim ran a little ahead of this clock)
    with pytest.raises(Conflict, match="already has a pending run"):
        await service.skip_occurrence(schedule_id, (T0 + MINUTE).isoformat(), None)


async def test_skip_and_unskip_through_the_api(client: httpx.AsyncClient) -> None:
    trigger = {"cron": "0 9 * * 1-5", "timezone": "Asia/Shanghai"}
    schedule = await create(client, trigger=trigger)
    preview = await client.post("/api/v1/schedules/preview", json={"trigger": trigger, "count": 2})
    second = preview.json()["next"][1]  # "2026-12-02T09:00:00+08:00"
    url = f"/api/v1/schedules/{schedule['id']}"

    # A time without an offset, as a person writes it, is read in the schedule's zone.
    wall = second.removesuffix("+08:00")
    skipped = await client.post(f"{url}/skip", json={"due_at": wall})
    assert skipped.status_code == 200, skipped.text
    row = skipped.json()
    assert datetime.fromisoformat(row["due_at"]) == datetime.fromisoformat(second)
    expected = ("skipped", "occurrence_skipped", "local")
    assert (row["status"], row["reason"], row["started_by"]) == expected
    assert (row["covers"], row["covers_until"]) == (1, row["due_at"])
    assert row["started_at"] is None and row["attempt"] == 0
    runs = (await client.get(f"{url}/runs")).json()["items"]
    assert runs == [row]

    # 09:30 is not a due time, and 09:00 read as UTC would be 17:00 in Shanghai: the error
    # says how it was read.
    wrong = await client.post(f"{url}/skip", json={"due_at": wall.replace("09:00", "09:30")})
    assert wrong.status_code == 422 and wrong.json()["error"]["field"] == "due_at"
    assert "read in Asia/Shanghai" in wrong.json()["error"]["message"]
    for bad in ({}, {"due_at": "tomorrow at nine"}):
        garbled = await client.post(f"{url}/skip", json=bad)
        assert garbled.status_code == 422 and garbled.json()["error"]["field"] == "due_at"

    undone = await client.post(f"{url}/unskip", json={"due_at": wall})
    assert undone.status_code == 204
    assert (await client.get(f"{url}/runs")).json()["items"] == []
