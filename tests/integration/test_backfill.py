"""Backfill and resume with catch-up (issue 8, parts 2 and 4), on both databases.

Past due times that did not run are queued as runs (origin ``backfill`` or ``catchup``); by
default they run one at a time, oldest first, and never twice.
"""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest

from agentcron.core.clock import Clock, utcnow
from agentcron.core.errors import InvalidSchedule
from agentcron.core.ledger.sql import SqlRunStore
from agentcron.core.ledger.store import Outcome
from agentcron.core.runs import RunService
from agentcron.core.schedules.plans import RESUME_ALL_CAP
from agentcron.core.schedules.service import ScheduleService
from agentcron.core.specs import BackfillRequest, ScheduleCreate
from agentcron.core.storage.database import Database
from agentcron.core.storage.models import Run
from agentcron.core.timeline import MAX_ROWS, NEVER, QUEUED
from tests.integration.engine_kit import runs_of
from tests.integration.test_schedules_api import create

T0 = datetime(2025, 1, 6, 0, 0, tzinfo=UTC)
S = timedelta(seconds=1)
MINUTE = 60 * S
HOUR = 60 * MINUTE


class ManualClock:
    def __init__(self, now: datetime) -> None:
        self.now = now

    def __call__(self) -> datetime:
        return self.now


async def minutely(db: Database, now: datetime) -> tuple[ScheduleService, uuid.UUID, ManualClock]:
    """A minutely schedule from ``T0``, its service on a clock set to ``now``."""
    clock = ManualClock(now)
    service = ScheduleService(db, clock=clock)
    created = await service.create(
        ScheduleCreate(
            name="minutely",
            prompt="p",
            trigger={"every_seconds": 60, "start_at": T0.isoformat()},
            runner={"type": "command", "argv": ["true"]},
        ),
        "local",
    )
    return service, created.id, clock


def store(db: Database, tmp_path: Path, clock: Clock = utcnow) -> SqlRunStore:
    return SqlRunStore(db, owner="t", lease_seconds=3600, data_dir=tmp_path, clock=clock)


def request(start: datetime, end: datetime, **fields: Any) -> BackfillRequest:
    return BackfillRequest(start=start.isoformat(), end=end.isoformat(), **fields)


# -- backfill ------------------------------------------------------------------------------


async def test_backfill_replaces_rows_of_due_times_that_did_not_run(
    db: Database, tmp_path: Path
) -> None:
    service, schedule_id, clock = await minutely(db, T0 + 10 * S)
    await service.skip_occurrence(schedule_id, (T0 + 7 * MINUTE).isoformat(), None)
    # Down until 00:08:30: 00:08 runs, 00:01-00:07 are accounted for (00:07 was skipped on
    # purpose before the outage).
    await store(db, tmp_path).claim_due_jobs(T0 + 8 * MINUTE + 30 * S)
    clock.now = T0 + 9 * MINUTE

    before = {(r.due_at, r.status, r.reason) for r in await runs_of(db, schedule_id)}
    dry = await service.backfill(schedule_id, request(T0 + S, T0 + 9 * MINUTE, dry_run=True), None)
    assert dry.due_times == [T0 + k * MINUTE for k in range(1, 7)]
    assert dry.kept == 2  # the run of 00:08, the deliberate skip of 00:07
    assert {(r.due_at, r.status, r.reason) for r in await runs_of(db, schedule_id)} == before

    done = await service.backfill(schedule_id, request(T0 + S, T0 + 9 * MINUTE), None)
    assert done.due_times == dry.due_times
    rows = {r.due_at: r for r in await runs_of(db, schedule_id)}
    assert (rows[T0 + 7 * MINUTE].status, rows[T0 + 7 * MINUTE].reason) == (
        "skipped",
        "occurrence_skipped",
    )
    queued = [rows[T0 + k * MINUTE] for k in range(1, 7)]
    assert [(r.status, r.origin) for r in queued] == [("pending", "backfill")] * 6
    # One at a time: the oldest is claimable now, the others wait for it.
    assert queued[0].reason is None and queued[0].available_at == clock.now
    assert {(r.reason, r.available_at) for r in queued[1:]} == {(QUEUED, NEVER)}
    # Backfilled again, the range has nothing left to run.
    again = await service.backfill(schedule_id, request(T0 + S, T0 + 9 * MINUTE), None)
    assert (again.due_times, again.kept) == ([], 8)


async def test_the_queue_moves_when_its_head_ends_however_it_ends(
    db: Database, tmp_path: Path
) -> None:
    service, schedule_id, clock = await minutely(db, T0 + 10 * MINUTE)
    await service.backfill(schedule_id, request(T0 + S, T0 + 4 * MINUTE), None)
    ledger = store(db, tmp_path, clock)

    def heads(runs: list[Run]) -> list[datetime | None]:
        return [r.due_at for r in runs if r.status == "pending" and r.reason is None]

    runs = await runs_of(db, schedule_id)
    assert heads(runs) == [T0 + MINUTE]
    await RunService(db, clock=clock).cancel(runs[0].id, None)  # cancelled while waiting
    assert heads(await runs_of(db, schedule_id)) == [T0 + 2 * MINUTE]

    claim = await ledger.claim_due_jobs(clock.now)
    assert [run.due_at for run in claim.runs] == [T0 + 2 * MINUTE]
    started = (await ledger.admit([claim.runs[0]]))[0]
    assert started.action == "run"
    await ledger.record([Outcome(claim.runs[0], "failed", error="boom")])  # ends badly
    assert heads(await runs_of(db, schedule_id)) == [T0 + 3 * MINUTE]


async def test_backfill_with_overlap_allow_queues_them_all_claimable(
    db: Database, tmp_path: Path
) -> None:
    service, schedule_id, clock = await minutely(db, T0 + 10 * MINUTE)
    await service.backfill(schedule_id, request(T0, T0 + 5 * MINUTE, overlap="allow"), None)
    claim = await store(db, tmp_path).claim_due_jobs(clock.now)
    assert sorted(run.due_at for run in claim.runs if run.due_at) == [
        T0 + k * MINUTE for k in range(5)
    ]


@pytest.mark.parametrize(
    ("start", "end", "field", "says"),
    [
        (T0, T0 + 21 * HOUR, "end", "must not be in the future"),
        (T0 + MINUTE, T0, "end", "after start"),
        (T0, T0 + 1001 * MINUTE, "end", "more than 1000 due times"),
    ],
)
async def test_backfill_refuses_bad_ranges(
    db: Database, start: datetime, end: datetime, field: str, says: str
) -> None:
    service, schedule_id, _ = await minutely(db, T0 + 20 * HOUR)
    with pytest.raises(InvalidSchedule) as caught:
        await service.backfill(schedule_id, request(start, end), None)
    assert caught.value.field == field and says in caught.value.message
    assert await runs_of(db, schedule_id) == []


async def test_backfill_keeps_gap_summaries_true(db: Database, tmp_path: Path) -> None:
    service, schedule_id, clock = await minutely(db, T0 + 10 * S)
    # A day-long outage: ten rows, then a summary of the rest of the day.
    await store(db, tmp_path).claim_due_jobs(T0 + 24 * HOUR + 30 * S)
    clock.now = T0 + 25 * HOUR
    summary_due = T0 + (MAX_ROWS + 1) * MINUTE
    start, end = T0 + 12 * HOUR, T0 + 12 * HOUR + 3 * MINUTE

    done = await service.backfill(schedule_id, request(start, end), None)

    assert done.due_times == [start, start + MINUTE, start + 2 * MINUTE]
    rows = {r.due_at: r for r in await runs_of(db, schedule_id)}
    assert rows[summary_due].covers_until == start - MINUTE  # ends before the range now
    assert rows[summary_due].covers is None
    # What the summary covered after the range is still accounted for: ten rows, then a
    # summary up to the last due time of the outage.
    after = sorted(due for due in rows if due is not None and end <= due < T0 + 24 * HOUR)
    assert after[:MAX_ROWS] == [end + k * MINUTE for k in range(MAX_ROWS)]
    assert rows[after[MAX_ROWS]].covers_until == T0 + 24 * HOUR - MINUTE
    assert {rows[due].reason for due in after} == {"missed"}


# -- resume with catch-up --------------------------------------------------------------------


async def paused_for_five_minutes(db: Database) -> tuple[ScheduleService, uuid.UUID, ManualClock]:
    service, schedule_id, clock = await minutely(db, T0 + 30 * S)
    await service.pause(schedule_id, None, None)
    clock.now = T0 + 5 * MINUTE + 30 * S  # 00:01 .. 00:05 passed while paused
    return service, schedule_id, clock


async def test_resume_latest_runs_the_latest_paused_due_time(db: Database) -> None:
    service, schedule_id, _ = await paused_for_five_minutes(db)
    plan = await service.plan_resume(schedule_id, None, "latest")
    assert plan.run == [T0 + 5 * MINUTE] and plan.skipped.count == 4
    assert await runs_of(db, schedule_id) == []  # a dry run writes nothing

    await service.resume(schedule_id, None, "latest", by="bob")
    rows = [(r.due_at, r.status, r.reason, r.origin) for r in await runs_of(db, schedule_id)]
    assert rows == [
        *[(T0 + k * MINUTE, "skipped", "paused", "schedule") for k in range(1, 5)],
        (T0 + 5 * MINUTE, "pending", None, "catchup"),
    ]


async def test_resume_all_queues_every_paused_due_time_one_at_a_time(db: Database) -> None:
    service, schedule_id, _ = await paused_for_five_minutes(db)
    await service.resume(schedule_id, None, "all")
    runs = await runs_of(db, schedule_id)
    assert [r.due_at for r in runs] == [T0 + k * MINUTE for k in range(1, 6)]
    assert [r.reason for r in runs] == [None] + [QUEUED] * 4
    assert {r.origin for r in runs} == {"catchup"}


async def test_resume_all_refuses_more_than_its_cap(db: Database) -> None:
    service, schedule_id, clock = await paused_for_five_minutes(db)
    clock.now = T0 + (RESUME_ALL_CAP + 5) * MINUTE
    with pytest.raises(InvalidSchedule) as caught:
        await service.resume(schedule_id, None, "all")
    assert caught.value.field == "catchup"
    assert await runs_of(db, schedule_id) == []
    schedule = await service.get(schedule_id, None)
    assert not schedule.enabled  # refused whole: still paused


async def test_backfill_and_resume_through_the_api(client: httpx.AsyncClient) -> None:
    now = datetime.now(UTC)
    start_at = (now - 3 * HOUR + MINUTE).isoformat()
    schedule = await create(client, trigger={"every_seconds": 3600, "start_at": start_at})
    url = f"/api/v1/schedules/{schedule['id']}"
    window = {"start": (now - 4 * HOUR).isoformat(), "end": now.isoformat()}

    dry = await client.post(f"{url}/backfill", json={**window, "dry_run": True})
    assert dry.status_code == 200, dry.text  # nothing queued: a read
    assert len(dry.json()["due_times"]) == 3 and dry.json()["dry_run"] is True
    assert (await client.get(f"{url}/runs")).json()["items"] == []

    done = await client.post(f"{url}/backfill", json=window)
    assert done.status_code == 202, done.text  # queued
    assert done.json()["due_times"] == dry.json()["due_times"]
    runs = (await client.get(f"{url}/runs")).json()["items"]
    assert sorted(run["origin"] for run in runs) == ["backfill"] * 3
    assert {run["started_by"] for run in runs} == {"local"}

    bad = await client.post(f"{url}/backfill", json={**window, "end": "2999-01-01T00:00:00Z"})
    assert bad.status_code == 422 and bad.json()["error"]["field"] == "end"
    unknown = await client.post(f"{url}/backfill", json={**window, "overlap": "skip"})
    assert unknown.status_code == 422 and unknown.json()["error"]["field"] == "overlap"

    await client.post(f"{url}/pause")
    plan = await client.post(f"{url}/resume", json={"catchup": "latest", "dry_run": True})
    assert plan.status_code == 200, plan.text
    assert plan.json()["catchup"] == "latest" and plan.json()["run"] == []
    assert (await client.get(url)).json()["enabled"] is False  # the dry run changed nothing
    resumed = await client.post(f"{url}/resume", json={"catchup": "skip"})
    assert resumed.json()["enabled"] is True
    plain = await client.post(f"{url}/pause")
    assert plain.status_code == 200 and plain.json()["paused_note"] is None
    assert (await client.post(f"{url}/resume")).json()["enabled"] is True  # no body: skip
