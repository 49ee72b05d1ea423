"""Every due time is accounted for (issue 8, part 1), on both databases: due times that do not
run get a ``skipped`` row with a reason, and unbounded gaps are summarised in bounded rows."""

from __future__ import annotations

import asyncio
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
from sqlalchemy import insert, select

from agentcron.core import triggers
from agentcron.core.errors import Conflict, InvalidSchedule
from agentcron.core.ledger.sql import SqlRunStore
from agentcron.core.schedules.service import ScheduleService
from agentcron.core.specs import ScheduleCreate, ScheduleUpdate
from agentcron.core.storage.database import Database
from agentcron.core.storage.models import Run, Schedule
from agentcron.core.timeline import COUNT_CAP, MAX_ROWS
from tests.factories import schedule_values

T0 = datetime(2025, 1, 6, 0, 0, tzinfo=UTC)
S = timedelta(seconds=1)
MINUTE = 60 * S


async def add_due_schedule(db: Database, next_run: datetime, **overrides: Any) -> uuid.UUID:
    trigger = triggers.trigger_to_dict(triggers.IntervalTrigger(every_seconds=60, start_at=T0))
    values = schedule_values(T0, trigger=trigger, next_run=next_run, **overrides)
    async with db.session() as session:
        await session.execute(insert(Schedule), [values])
    schedule_id: uuid.UUID = values["id"]
    return schedule_id


async def timeline(db: Database, schedule_id: uuid.UUID) -> list[Run]:
    async with db.session(write=False) as session:
        found = await session.scalars(
            select(Run).where(Run.schedule_id == schedule_id).order_by(Run.due_at)
        )
        return list(found)


def ledger(db: Database, tmp_path: Path) -> SqlRunStore:
    return SqlRunStore(db, owner="timeline", lease_seconds=30, data_dir=tmp_path)


async def test_missed_due_times_get_skipped_rows_beside_the_run(
    db: Database, tmp_path: Path
) -> None:
    # Down from 00:01 to 00:06:30; grace 60 s: 00:06 runs, 00:01-00:05 were missed.
    schedule_id = await add_due_schedule(db, T0 + MINUTE)
    claim = await ledger(db, tmp_path).claim_due_jobs(T0 + 6 * MINUTE + 30 * S)

    assert [run.due_at for run in claim.runs] == [T0 + 6 * MINUTE]
    rows = await timeline(db, schedule_id)
    skipped = [
        (r.due_at, r.status, r.reason) for r in rows if r.id not in {c.id for c in claim.runs}
    ]
    assert skipped == [(T0 + k * MINUTE, "skipped", "missed") for k in range(1, 6)]
    assert all(r.lease_owner is None and r.finished_at is not None for r in rows if r.reason)


async def test_catchup_latest_marks_the_others_coalesced(db: Database, tmp_path: Path) -> None:
    schedule_id = await add_due_schedule(db, T0 + MINUTE, catchup="latest", misfire_grace_seconds=1)
    now = T0 + 4 * MINUTE + 30 * S
    claim = await ledger(db, tmp_path).claim_due_jobs(now)

    assert [run.due_at for run in claim.runs] == [T0 + 4 * MINUTE]  # the latest missed one
    rows = await timeline(db, schedule_id)
    assert [(r.due_at, r.status, r.reason) for r in rows] == [
        (T0 + MINUTE, "skipped", "coalesced"),
        (T0 + 2 * MINUTE, "skipped", "coalesced"),
        (T0 + 3 * MINUTE, "skipped", "coalesced"),
        (T0 + 4 * MINUTE, "pending", None),
    ]


async def test_a_year_long_outage_writes_a_bounded_summary(db: Database, tmp_path: Path) -> None:
    schedule_id = await add_due_schedule(db, T0 + MINUTE)
    now = T0 + timedelta(days=365, seconds=30)
    await ledger(db, tmp_path).claim_due_jobs(now)

    rows = [r for r in await timeline(db, schedule_id) if r.status == "skipped"]
    assert len(rows) == MAX_ROWS + 1  # a year of minutes, in eleven rows
    assert [r.due_at for r in rows[:MAX_ROWS]] == [T0 + k * MINUTE for k in range(1, MAX_ROWS + 1)]
    summary = rows[-1]
    assert summary.due_at == T0 + (MAX_ROWS + 1) * MINUTE
    assert summary.covers is None  # more than COUNT_CAP: it stopped counting
    # The last due time before the grace boundary (now - 60 s), minute-aligned.
    assert summary.covers_until == T0 + timedelta(days=365) - MINUTE


async def test_a_counted_summary_says_how_many(db: Database, tmp_path: Path) -> None:
    missed = MAX_ROWS + COUNT_CAP - 5
    schedule_id = await add_due_schedule(db, T0 + MINUTE)
    await ledger(db, tmp_path).claim_due_jobs(T0 + (missed + 2) * MINUTE)

    rows = [r for r in await timeline(db, schedule_id) if r.status == "skipped"]
    assert len(rows) == MAX_ROWS + 1
    assert rows[-1].covers == missed - MAX_ROWS
    assert rows[-1].covers_until == T0 + missed * MINUTE


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
    due_times = [r.due_at for r in await timeline(db, schedule_id)]
    assert len(due_times) == len(set(due_times)) == 5


async def test_pause_writes_paused_rows_at_resume(db: Database) -> None:
    clock_now = [T0]
    service = ScheduleService(db, clock=lambda: clock_now[0])
    created = await service.create(
        ScheduleCreate(
            name="paused",
            prompt="p",
            trigger={"every_seconds": 60, "start_at": T0.isoformat()},
            runner={"type": "command", "argv": ["true"]},
        ),
        "local",
    )
    clock_now[0] = T0 + 30 * S
    await service.pause(created.id, "maintenance", None)
    clock_now[0] = T0 + 3 * MINUTE + 30 * S
    resumed = await service.resume(created.id, None)

    rows = await timeline(db, created.id)
    assert [(r.due_at, r.status, r.reason) for r in rows] == [
        (T0 + k * MINUTE, "skipped", "paused") for k in (1, 2, 3)
    ]
    assert resumed.next_run == T0 + 4 * MINUTE

    # Resuming by PATCH {"enabled": true} accounts the same way.
    clock_now[0] = T0 + 4 * MINUTE + 10 * S
    await service.pause(created.id, None, None)
    clock_now[0] = T0 + 6 * MINUTE + 10 * S
    await service.update(created.id, ScheduleUpdate(enabled=True), None)
    reasons = [(r.due_at, r.reason) for r in await timeline(db, created.id)]
    assert reasons[-2:] == [(T0 + 5 * MINUTE, "paused"), (T0 + 6 * MINUTE, "paused")]


async def test_skipped_rows_through_the_api(client: httpx.AsyncClient) -> None:
    body = {
        "name": "every second",
        "prompt": "p",
        "trigger": {"every_seconds": 1},
        "runner": {"type": "command", "argv": ["true"]},
    }
    schedule = (await client.post("/api/v1/schedules", json=body)).json()
    await client.post(f"/api/v1/schedules/{schedule['id']}/pause", json={"note": "lunch"})
    await asyncio.sleep(2.2)
    await client.post(f"/api/v1/schedules/{schedule['id']}/resume")

    runs = (await client.get(f"/api/v1/schedules/{schedule['id']}/runs")).json()["items"]
    paused = [run for run in runs if run["reason"] == "paused"]
    assert len(paused) >= 2
    for run in paused:
        assert run["status"] == "skipped"
        assert run["covers"] == 1
        assert run["covers_until"] == run["due_at"]
        assert run["started_at"] is None and run["attempt"] == 0


# -- provenance (issue 8, part 9) ----------------------------------------------------------


async def test_each_run_says_what_started_it(db: Database, tmp_path: Path) -> None:
    on_time = await add_due_schedule(db, T0 + MINUTE)
    caught_up = await add_due_schedule(db, T0 + MINUTE, catchup="latest", misfire_grace_seconds=1)
    engine = ledger(db, tmp_path)
    claim = await engine.claim_due_jobs(T0 + 3 * MINUTE + 30 * S)
    origins = {(run.schedule_id, run.due_at): run.origin for run in claim.runs}
    assert origins[(caught_up, T0 + 3 * MINUTE)] == "catchup"
    # The on-time schedule ran 00:03 (in grace) and missed 00:01-00:02.
    assert origins[(on_time, T0 + 3 * MINUTE)] == "schedule"
    for row in await timeline(db, on_time):
        assert (row.origin, row.started_by) == ("schedule", None)


async def test_manual_runs_and_replays_name_who_asked(client: httpx.AsyncClient) -> None:
    body = {
        "name": "asked for",
        "prompt": "p",
        "trigger": {"every_seconds": 3600},
        "runner": {"type": "command", "argv": ["true"]},
    }
    schedule = (await client.post("/api/v1/schedules", json=body)).json()
    manual = (await client.post(f"/api/v1/schedules/{schedule['id']}/run")).json()
    assert (manual["origin"], manual["started_by"], manual["trigger"]) == (
        "manual",
        "local",
        "manual",
    )
    replay = (await client.post(f"/api/v1/runs/{manual['id']}/replay")).json()
    assert (replay["origin"], replay["started_by"], replay["replay_of"]) == (
        "replay",
        "local",
        manual["id"],
    )
    fetched = (await client.get(f"/api/v1/runs/{replay['id']}")).json()
    assert fetched["started_by"] == "local"


# -- skip and unskip one occurrence (issue 8, part 3) --------------------------------------


async def make_minutely(db: Database, clock_now: list[datetime]) -> tuple[ScheduleService, Any]:
    service = ScheduleService(db, clock=lambda: clock_now[0])
    created = await service.create(
        ScheduleCreate(
            name="minutely",
            prompt="p",
            trigger={"every_seconds": 60, "start_at": T0.isoformat()},
            runner={"type": "command", "argv": ["true"]},
        ),
        "local",
    )
    return service, created


async def test_a_skipped_occurrence_never_runs_and_the_next_one_does(
    db: Database, tmp_path: Path
) -> None:
    clock_now = [T0 + 10 * S]
    service, schedule = await make_minutely(db, clock_now)
    skipped = await service.skip_occurrence(
        schedule.id, (T0 + 2 * MINUTE).isoformat(), None, by="alice"
    )
    assert (skipped.status, skipped.reason, skipped.started_by) == (
        "skipped",
        "occurrence_skipped",
        "alice",
    )
    again = await service.skip_occurrence(schedule.id, (T0 + 2 * MINUTE).isoformat(), None)
    assert again.id == skipped.id  # idempotent

    # A lease longer than the test's minutes, so no claim takes an earlier one's runs over.
    engine = SqlRunStore(db, owner="timeline", lease_seconds=3600, data_dir=tmp_path)
    claimed = []
    for k in (1, 2, 3):
        claimed += (await engine.claim_due_jobs(T0 + k * MINUTE + S)).runs
    assert [run.due_at for run in claimed] == [T0 + MINUTE, T0 + 3 * MINUTE]
    statuses = {r.due_at: (r.status, r.reason) for r in await timeline(db, schedule.id)}
    assert statuses[T0 + 2 * MINUTE] == ("skipped", "occurrence_skipped")


async def test_unskip_puts_the_occurrence_back(db: Database, tmp_path: Path) -> None:
    clock_now = [T0 + 10 * S]
    service, schedule = await make_minutely(db, clock_now)
    due = (T0 + MINUTE).isoformat()
    await service.skip_occurrence(schedule.id, due, None)
    assert await service.unskip_occurrence(schedule.id, due, None) is True
    assert await service.unskip_occurrence(schedule.id, due, None) is False  # nothing left

    claim = await ledger(db, tmp_path).claim_due_jobs(T0 + MINUTE + S)
    assert [run.due_at for run in claim.runs] == [T0 + MINUTE]


async def test_skip_refuses_what_is_not_an_upcoming_due_time(db: Database, tmp_path: Path) -> None:
    clock_now = [T0 + 10 * S]
    service, schedule = await make_minutely(db, clock_now)
    for value, says in [
        ((T0 + MINUTE + 30 * S).isoformat(), "not a due time of this schedule"),
        (T0.isoformat(), "has passed"),
        # Without an offset: read on the schedule's clock (an interval's is UTC), and said so
        # between two commas.
        ((T0 + MINUTE + 30 * S).replace(tzinfo=None).isoformat(), ":30, read in UTC, is not a"),
        ("tomorrow", "ISO 8601"),
    ]:
        try:
            await service.skip_occurrence(schedule.id, value, None)
        except InvalidSchedule as exc:
            assert exc.field == "due_at" and says in exc.message, (value, exc.message)
        else:
            raise AssertionError(f"{value} was accepted")

    # A due time that already has a run of its own cannot be skipped.
    clock_now[0] = T0 + MINUTE + S
    await ledger(db, tmp_path).claim_due_jobs(T0 + MINUTE + S)
    clock_now[0] = T0 + 50 * S  # (the claim ran a little ahead of this clock)
    try:
        await service.skip_occurrence(schedule.id, (T0 + MINUTE).isoformat(), None)
    except Conflict as exc:
        assert "already has a pending run" in exc.message
    else:
        raise AssertionError("skipped a due time that has a run")


async def test_skip_and_unskip_through_the_api(client: httpx.AsyncClient) -> None:
    body = {
        "name": "weekday digest",
        "prompt": "p",
        "trigger": {"cron": "0 9 * * 1-5", "timezone": "Asia/Shanghai"},
        "runner": {"type": "command", "argv": ["true"]},
    }
    schedule = (await client.post("/api/v1/schedules", json=body)).json()
    preview = await client.post(
        "/api/v1/schedules/preview", json={"trigger": body["trigger"], "count": 2}
    )
    first, second = preview.json()["next"]
    url = f"/api/v1/schedules/{schedule['id']}"

    skipped = await client.post(f"{url}/skip", json={"due_at": second})
    assert skipped.status_code == 200, skipped.text
    assert skipped.json()["reason"] == "occurrence_skipped"
    assert skipped.json()["started_by"] == "local"
    runs = (await client.get(f"{url}/runs")).json()["items"]
    assert [run["due_at"] for run in runs] == [skipped.json()["due_at"]]

    wrong = await client.post(f"{url}/skip", json={"due_at": "2030-01-01T09:30:00+08:00"})
    assert wrong.status_code == 422
    assert wrong.json()["error"]["field"] == "due_at"
    missing = await client.post(f"{url}/skip", json={})
    assert missing.status_code == 422 and missing.json()["error"]["field"] == "due_at"

    undone = await client.post(f"{url}/unskip", json={"due_at": second})
    assert undone.status_code == 204
    assert (await client.get(f"{url}/runs")).json()["items"] == []
    assert first < second
