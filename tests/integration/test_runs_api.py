"""The Runs half of the HTTP API (docs/api.md), through the real app with the engine off."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
from sqlalchemy import update

from agentcron.core.ledger.sql import SqlRunStore
from agentcron.core.storage.database import Database
from agentcron.core.storage.models import Schedule
from tests.integration.engine_kit import API, assert_error, fetch_run, run_now
from tests.integration.test_schedules_api import RUNNER, paged
from tests.integration.test_schedules_api import create as create_schedule


async def test_run_now_queues_a_manual_run_and_keeps_the_timetable(
    client: httpx.AsyncClient,
) -> None:
    schedule = await create_schedule(client)
    run = await run_now(client, schedule["id"])
    assert (run["trigger"], run["origin"], run["started_by"]) == ("manual", "manual", "local")
    assert run["status"] == "pending"
    assert run["schedule_id"] == schedule["id"]
    assert run["due_at"] is None and run["replay_of"] is None
    assert run["attempt"] == 0 and run["started_at"] is None and run["finished_at"] is None
    assert run["deliveries"] == []
    uuid.UUID(run["id"])

    after = (await client.get(f"{API}/schedules/{schedule['id']}")).json()
    assert after["next_run"] == schedule["next_run"]

    fetched = await client.get(f"{API}/runs/{run['id']}")
    assert fetched.status_code == 200
    assert fetched.json() == run


async def test_history_lists_newest_first_across_triggers_with_pagination(
    client: httpx.AsyncClient, db: Database, tmp_path: Path
) -> None:
    """Issue 38 too: the runs one claim writes at once after a restart share created_at; the
    history is still newest first, the batch by due time (latest first), and paging through
    it in small pages gives each run once, in that order."""
    schedule_id, restart = await runs_of_a_restart(client, db, tmp_path)
    other = await create_schedule(client, name="other")
    await run_now(client, other["id"])  # never listed under the first schedule
    replay = await client.post(f"{API}/runs/{restart[0]}/replay")
    assert replay.status_code == 202
    expected = [replay.json()["id"], *restart]

    pages = await paged(client, f"{API}/schedules/{schedule_id}/runs", 7)
    assert [item["id"] for page in pages for item in page] == expected
    assert len(pages) == 15  # 102 runs
    assert {item["trigger"] for page in pages for item in page} == {"schedule", "manual", "replay"}

    whole = await client.get(f"{API}/schedules/{schedule_id}/runs", params={"limit": 500})
    assert [item["id"] for item in whole.json()["items"]] == expected
    assert whole.json()["next_cursor"] is None


async def test_replay_reruns_the_saved_payload(client: httpx.AsyncClient, db: Database) -> None:
    schedule = await create_schedule(client, prompt="the old prompt")
    original = await run_now(client, schedule["id"])
    patched = await client.patch(
        f"{API}/schedules/{schedule['id']}",
        json={"prompt": "the new prompt", "runner": {"type": "command", "argv": ["true"]}},
    )
    assert patched.status_code == 200

    response = await client.post(f"{API}/runs/{original['id']}/replay")
    assert response.status_code == 202, response.text
    replay = response.json()
    said = (replay["trigger"], replay["origin"], replay["started_by"])
    assert said == ("replay", "replay", "local")
    assert replay["replay_of"] == original["id"]
    assert replay["id"] != original["id"]
    assert replay["schedule_id"] == schedule["id"]
    assert replay["status"] == "pending" and replay["due_at"] is None

    replayed = await fetch_run(db, uuid.UUID(replay["id"]))
    assert replayed.payload["prompt"] == "the old prompt"
    assert replayed.payload["runner"] == RUNNER
    assert replayed.payload == (await fetch_run(db, uuid.UUID(original["id"]))).payload
    # A fresh run now takes the schedule as it is now.
    fresh = await fetch_run(db, uuid.UUID((await run_now(client, schedule["id"]))["id"]))
    assert fresh.payload["prompt"] == "the new prompt"

    after = (await client.get(f"{API}/schedules/{schedule['id']}")).json()
    assert after["next_run"] == schedule["next_run"]


async def test_cancel_a_pending_run_then_again_is_a_conflict(client: httpx.AsyncClient) -> None:
    schedule = await create_schedule(client)
    run = await run_now(client, schedule["id"])

    response = await client.post(f"{API}/runs/{run['id']}/cancel")
    assert response.status_code == 202, response.text
    cancelled = response.json()
    assert cancelled["id"] == run["id"]
    assert cancelled["status"] == "cancelled"
    assert cancelled["finished_at"] is not None

    again = await client.post(f"{API}/runs/{run['id']}/cancel")
    body = assert_error(again, 409, "Conflict")
    assert "cancelled" in body["error"]["message"]
    assert (await client.get(f"{API}/runs/{run['id']}")).json()["status"] == "cancelled"


async def test_runs_of_a_deleted_schedule_stay_readable_by_id(client: httpx.AsyncClient) -> None:
    schedule = await create_schedule(client)
    run = await run_now(client, schedule["id"])
    assert (await client.delete(f"{API}/schedules/{schedule['id']}")).status_code == 204
    missing = assert_error(await client.get(f"{API}/schedules/{schedule['id']}"), 404, "NotFound")
    assert schedule["id"] in missing["error"]["message"]
    assert (await client.get(f"{API}/schedules")).json()["items"] == []

    fetched = await client.get(f"{API}/runs/{run['id']}")
    assert fetched.status_code == 200
    assert fetched.json()["status"] == "cancelled"  # deleting cancels pending runs
    assert fetched.json()["reason"] == "schedule_deleted"
    assert_error(await client.get(f"{API}/schedules/{schedule['id']}/runs"), 404, "NotFound")
    assert_error(await client.post(f"{API}/runs/{run['id']}/replay"), 409, "Conflict")
    assert_error(await client.post(f"{API}/schedules/{schedule['id']}/run"), 404, "NotFound")


async def test_history_filters_by_status_trigger_origin_and_skipped_rows(
    client: httpx.AsyncClient,
) -> None:
    schedule = await create_schedule(client)
    url = f"{API}/schedules/{schedule['id']}"
    history = f"{url}/runs"
    skip = await client.post(f"{url}/skip", json={"due_at": schedule["next_run"]})
    assert skip.status_code == 200, skip.text
    skipped = skip.json()
    waiting = await run_now(client, schedule["id"])
    cancelled = await run_now(client, schedule["id"])
    assert (await client.post(f"{API}/runs/{cancelled['id']}/cancel")).status_code == 202
    replay = (await client.post(f"{API}/runs/{cancelled['id']}/replay")).json()

    async def ids(**params: Any) -> list[str]:
        response = await client.get(history, params=params)
        assert response.status_code == 200, response.text
        return [item["id"] for item in response.json()["items"]]

    everything = [replay["id"], cancelled["id"], waiting["id"], skipped["id"]]
    assert await ids() == everything
    assert await ids(status="pending") == [replay["id"], waiting["id"]]
    assert await ids(status=["cancelled", "skipped"]) == [cancelled["id"], skipped["id"]]
    assert await ids(trigger="manual") == [cancelled["id"], waiting["id"]]
    assert await ids(trigger=["replay", "schedule"]) == [replay["id"], skipped["id"]]
    assert await ids(origin="schedule") == [skipped["id"]]
    assert await ids(skipped="false") == everything[:3]
    assert await ids(skipped="false", status="skipped") == []
    assert await ids(status="pending", trigger="manual") == [waiting["id"]]

    # A cursor pages through the same filters.
    first = (await client.get(history, params={"status": "pending", "limit": 1})).json()
    assert [item["id"] for item in first["items"]] == [replay["id"]]
    rest = await ids(status="pending", limit=1, cursor=first["next_cursor"])
    assert rest == [waiting["id"]]

    for name, bad in (("status", "exploded"), ("trigger", "cron"), ("origin", "x")):
        response = await client.get(history, params={name: bad})
        body = assert_error(response, 422, "ValidationError")
        assert name in response.text, body


async def runs_of_a_restart(
    client: httpx.AsyncClient, db: Database, data_dir: Path
) -> tuple[str, list[str]]:
    """A schedule whose engine stopped before a due time two hours ago and came back 99
    minutes later: one claim writes its 100 due times at once, all with one created_at (as
    after a restart), then a manual run is queued. Returns the schedule's id and its runs'
    ids newest first: the manual run, then the batch by due time, latest first."""
    grid = (datetime.now(UTC) - timedelta(hours=3)).replace(second=0, microsecond=0)
    trigger = {"every_seconds": 60, "start_at": grid.isoformat()}
    schedule = await create_schedule(client, trigger=trigger, misfire_grace_seconds=86_400)
    first_due = grid + timedelta(hours=1)
    moved = update(Schedule).where(Schedule.id == uuid.UUID(schedule["id"]))
    async with db.session() as session:
        await session.execute(moved.values(next_run=first_due))
    back = first_due + timedelta(minutes=99)
    ledger = SqlRunStore(db, owner="after-restart", lease_seconds=30, data_dir=data_dir)
    claim = await ledger.claim_due_jobs(back, 500)
    assert len(claim.runs) == 100 and len({run.created_at for run in claim.runs}) == 1
    batch = sorted(claim.runs, key=lambda run: run.due_at or back, reverse=True)
    manual = await run_now(client, schedule["id"])
    return schedule["id"], [manual["id"], *[str(run.id) for run in batch]]
