"""Daylight saving time where the database and the API can break it (issue 8, parts 5 and 6):
a claim stores the trigger's next due time in UTC and the rule each run followed, the run API
shows the rule, and warnings come back with the schedule. The rules themselves are tested
once, in tests/unit/test_triggers_dst.py, and which due times a claim plans (both passes of a
repeated hour, and the next due time after a gap) in tests/unit/test_plan.py."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
from fastapi import FastAPI

from agentcron.core import triggers
from agentcron.core.ledger.sql import SqlRunStore
from agentcron.core.storage.database import Database
from agentcron.core.storage.models import Schedule
from tests.factories import insert_schedule
from tests.integration.engine_kit import runs_of, set_row

API = "/api/v1/schedules"
RUNNER = {"type": "command", "argv": ["true"]}
S = timedelta(seconds=1)
NY = "America/New_York"
SPRING = datetime(2025, 3, 9, 7, tzinfo=UTC)  # 03:00 EDT, the first instant after the gap


async def add_schedule(db: Database, trigger: triggers.Trigger, next_run: datetime) -> uuid.UUID:
    return await insert_schedule(
        db,
        next_run - timedelta(days=1),
        trigger=triggers.trigger_to_dict(trigger),
        next_run=next_run,
    )


async def rules(db: Database, schedule_id: uuid.UUID) -> list[tuple[datetime | None, Any]]:
    return [(run.due_at, run.dst_rule) for run in await runs_of(db, schedule_id)]


def ledger(db: Database, tmp_path: Path) -> SqlRunStore:
    return SqlRunStore(db, owner="dst", lease_seconds=30, data_dir=tmp_path)


# -- the claim records the rule ------------------------------------------------------------


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
    assert await rules(db, shifted) == [(SPRING, "gap_shift")]
    assert await rules(db, plain) == [(SPRING, None)]


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
    await set_row(db, Schedule, uuid.UUID(made.json()["id"]), next_run=SPRING)
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


# -- warnings come back with the schedule (they are never errors) ----------------------------


async def test_warnings_come_back_with_the_schedule_and_follow_its_edits(
    client: httpx.AsyncClient,
) -> None:
    trigger = {"cron": "30 1 * * *", "timezone": NY, "dst_repeat": "both"}
    made = await client.post(API, json=body(trigger))
    assert made.status_code == 201, made.text
    (warning,) = made.json()["warnings"]
    assert (warning["code"], warning["field"]) == ("dst_repeat", "trigger.dst_repeat")
    assert "twice, once in each pass" in warning["message"]
    url = f"{API}/{made.json()['id']}"
    assert (await client.get(url)).json()["warnings"] == made.json()["warnings"]
    assert (await client.get(API)).json()["items"][0]["warnings"] == made.json()["warnings"]

    async def edited(**change: Any) -> list[str]:
        return [w["code"] for w in (await client.patch(url, json=change)).json()["warnings"]]

    assert await edited(name="renamed") == ["dst_repeat"]
    # Recomputed from whatever an edit changes: the trigger, the timeout, the overlap policy.
    assert await edited(trigger={"every_seconds": 300}, overlap="skip") == ["overlap_skips"]
    assert await edited(timeout_seconds=300) == []  # the default timeout is 1 h
    assert await edited(timeout_seconds=301) == ["overlap_skips"]
    assert await edited(overlap="allow") == []
    assert await edited(trigger={"cron": "30 2 * * *", "timezone": NY}) == ["dst_gap"]
    assert [w["code"] for w in (await client.get(url)).json()["warnings"]] == ["dst_gap"]
