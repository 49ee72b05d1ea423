"""Daylight saving time where the database and the API can break it (issue 8, parts 5 and 6):
a claim stores the trigger's next due time in UTC and the rule each run followed, two passes of
one local time are two runs, the run API shows the rule, and warnings come back with the
schedule. The rules themselves are tested once, in tests/unit/test_triggers_dst.py."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
from fastapi import FastAPI
from sqlalchemy import insert, select, update

from agentcron.core import triggers
from agentcron.core.ledger.sql import SqlRunStore
from agentcron.core.storage.database import Database
from agentcron.core.storage.models import Run, Schedule
from tests.factories import schedule_values

API = "/api/v1/schedules"
RUNNER = {"type": "command", "argv": ["true"]}
S = timedelta(seconds=1)
NY = "America/New_York"
SPRING = datetime(2025, 3, 9, 7, tzinfo=UTC)  # 03:00 EDT, the first instant after the gap
FIRST_PASS = datetime(2025, 11, 2, 5, 30, tzinfo=UTC)  # 01:30 EDT
SECOND_PASS = datetime(2025, 11, 2, 6, 30, tzinfo=UTC)  # 01:30 EST


async def add_schedule(db: Database, trigger: triggers.Trigger, next_run: datetime) -> uuid.UUID:
    values = schedule_values(
        next_run - timedelta(days=1),
        trigger=triggers.trigger_to_dict(trigger),
        next_run=next_run,
    )
    async with db.session() as session:
        await session.execute(insert(Schedule), [values])
    schedule_id: uuid.UUID = values["id"]
    return schedule_id


async def runs_of(db: Database, schedule_id: uuid.UUID) -> list[tuple[datetime | None, Any]]:
    async with db.session(write=False) as session:
        found = await session.scalars(
            select(Run).where(Run.schedule_id == schedule_id).order_by(Run.due_at)
        )
        return [(run.due_at, run.dst_rule) for run in found]


def ledger(db: Database, tmp_path: Path) -> SqlRunStore:
    return SqlRunStore(db, owner="dst", lease_seconds=30, data_dir=tmp_path)


# --------------------------------------------------------------------------------------------
# The claim records the rule
# --------------------------------------------------------------------------------------------


async def test_claim_at_the_spring_gap_records_gap_shift(db: Database, tmp_path: Path) -> None:
    shifted = await add_schedule(db, triggers.CronTrigger("30 2 * * *", NY), SPRING)
    # Claimed in the same batch: an ordinary cron due time and an interval one (the rows share
    # one executemany INSERT, so they must all have the same keys).
    plain = await add_schedule(db, triggers.CronTrigger("0 3 * * *", NY), SPRING)
    interval = await add_schedule(db, triggers.IntervalTrigger(60, SPRING - 60 * S), SPRING)

    claim = await ledger(db, tmp_path).claim_due_jobs(SPRING + 5 * S)

    assert {run.schedule_id: run.dst_rule for run in claim.runs} == {
        shifted: "gap_shift",
        plain: None,
        interval: None,
    }
    assert await runs_of(db, shifted) == [(SPRING, "gap_shift")]
    assert await runs_of(db, plain) == [(SPRING, None)]
    async with db.session(write=False) as session:
        next_run = await session.scalar(select(Schedule.next_run).where(Schedule.id == shifted))
    assert next_run == datetime(2025, 3, 10, 6, 30, tzinfo=UTC)  # 02:30 EDT the next day


async def test_both_passes_of_a_repeated_hour_are_two_runs(db: Database, tmp_path: Path) -> None:
    # 01:30 occurs twice: two due times an hour apart in UTC, one local time.
    trigger = triggers.CronTrigger("30 1 * * *", NY, dst_repeat="both")
    schedule_id = await add_schedule(db, trigger, FIRST_PASS)
    engine = ledger(db, tmp_path)
    # One claim just after each pass, as a running loop would make them.
    for instant in (FIRST_PASS, SECOND_PASS):
        await engine.claim_due_jobs(instant + 5 * S)
    assert await runs_of(db, schedule_id) == [
        (FIRST_PASS, "repeat_both"),
        (SECOND_PASS, "repeat_both"),
    ]


async def test_run_api_shows_the_rule(
    live_app: FastAPI, client: httpx.AsyncClient, tmp_path: Path
) -> None:
    made = await client.post(
        API,
        json={
            "name": "nightly",
            "prompt": "p",
            "trigger": {"cron": "30 2 * * *", "timezone": NY},
            "runner": RUNNER,
        },
    )
    assert made.status_code == 201, made.text
    db: Database = live_app.state.db
    async with db.session() as session:
        await session.execute(
            update(Schedule)
            .where(Schedule.id == uuid.UUID(made.json()["id"]))
            .values(next_run=SPRING)
        )
    claim = await ledger(db, tmp_path).claim_due_jobs(SPRING + 5 * S)
    (run,) = claim.runs
    shown = await client.get(f"/api/v1/runs/{run.id}")
    assert shown.status_code == 200, shown.text
    assert shown.json()["dst_rule"] == "gap_shift"
    listed = await client.get(f"{API}/{made.json()['id']}/runs")
    assert [item["dst_rule"] for item in listed.json()["items"]] == ["gap_shift"]


def body(trigger: dict[str, Any], **overrides: Any) -> dict[str, Any]:
    data: dict[str, Any] = {"name": "dst", "prompt": "p", "trigger": trigger, "runner": RUNNER}
    data.update(overrides)
    return data


# --------------------------------------------------------------------------------------------
# Warnings come back with the schedule (they are never errors)
# --------------------------------------------------------------------------------------------


async def test_a_warning_comes_back_on_create_get_and_list(client: httpx.AsyncClient) -> None:
    trigger = {"cron": "30 1 * * *", "timezone": NY, "dst_repeat": "both"}
    made = await client.post(API, json=body(trigger))
    assert made.status_code == 201, made.text
    (warning,) = made.json()["warnings"]
    assert (warning["code"], warning["field"]) == ("dst_repeat", "trigger.dst_repeat")
    assert "twice, once in each pass" in warning["message"]
    fetched = await client.get(f"{API}/{made.json()['id']}")
    assert fetched.json()["warnings"] == made.json()["warnings"]
    listed = (await client.get(API)).json()["items"]
    assert listed[0]["warnings"] == made.json()["warnings"]


async def test_update_recomputes_the_warnings_of_what_it_changes(
    client: httpx.AsyncClient,
) -> None:
    made = (await client.post(API, json=body({"every_seconds": 300}, overlap="skip"))).json()
    assert [w["code"] for w in made["warnings"]] == ["overlap_skips"]  # default timeout 1 h
    url = f"{API}/{made['id']}"
    renamed = (await client.patch(url, json={"name": "renamed"})).json()
    assert renamed["warnings"] == made["warnings"]
    shorter = (await client.patch(url, json={"timeout_seconds": 300})).json()
    assert shorter["warnings"] == []
    longer = (await client.patch(url, json={"timeout_seconds": 301})).json()
    assert [w["code"] for w in longer["warnings"]] == ["overlap_skips"]
    allowed = (await client.patch(url, json={"overlap": "allow"})).json()
    assert allowed["warnings"] == []
    moved = (
        await client.patch(url, json={"trigger": {"cron": "30 2 * * *", "timezone": NY}})
    ).json()
    assert [w["code"] for w in moved["warnings"]] == ["dst_gap"]
    assert (await client.get(url)).json()["warnings"] == moved["warnings"]
