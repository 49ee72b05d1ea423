"""The circuit breaker (issue 8, part 7), on both databases: the pause reaches every notify
channel, and a schedule's limits go through the API. The streak and the trip themselves are
the store's, proved on every store by tests/contract/test_run_store.py."""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest

from agentcron.core.runners.fake import FakeRunnerType, permanent
from tests.integration.engine_kit import (
    HOURLY,
    Engine,
    deliveries_of,
    fetch_schedule,
    spec,
    wait_for,
    wait_status,
)


async def test_failures_in_a_row_pause_the_schedule_and_notify(
    engine: Engine, fake: FakeRunnerType
) -> None:
    fake.script("flaky", [permanent("upstream 502")])
    notify = [{"type": "file", "path": "runs.jsonl"}]  # notify_on: succeeded (the default)
    schedule = await engine.create(
        spec(fake.config("flaky"), HOURLY, pause_after_failures=2, notify=notify)
    )
    first = await wait_status(engine.db, (await engine.run_now(schedule.id)).id, "failed")
    tripped = await wait_status(engine.db, (await engine.run_now(schedule.id)).id, "failed")
    assert (first.reason, tripped.reason) == (None, "circuit_breaker")
    # The pause itself: contract::test_the_breaker_trips_from_the_schedule_row. Its note also
    # names the last error.
    assert "upstream 502" in ((await fetch_schedule(engine.db, schedule.id)).paused_note or "")

    # The failed run that paused the schedule reaches the channel although it only asks for
    # successes: a pause nobody hears about is a silent outage.
    async def delivered() -> bool:
        found = await deliveries_of(engine.db, tripped.id)
        return bool(found) and found[0].status == "delivered"

    await wait_for(delivered, within=10, what="the breaker's notification")
    assert await deliveries_of(engine.db, first.id) == []
    lines = (engine.workdir(schedule) / "runs.jsonl").read_text().splitlines()
    (body,) = [json.loads(line) for line in lines]
    assert body["run"]["id"] == str(tripped.id) and body["run"]["status"] == "failed"
    assert body["run"]["reason"] == "circuit_breaker"
    assert body["schedule"]["paused"] is True
    assert "2 failed runs in a row" in body["schedule"]["paused_note"]


@pytest.mark.parametrize(
    ("field", "good", "bad"),
    [
        ("pause_after_failures", 5, (0, -2, 1001, "5", 2.5)),
        ("retention_days", 7, (0, -1, 36_501, "7", 1.5)),
        ("max_runs", 10, (0,)),
        ("jitter_seconds", 120, (3601, 0)),
    ],
)
async def test_a_schedules_limit_is_set_checked_and_cleared_through_the_api(
    client: httpx.AsyncClient, field: str, good: int, bad: tuple[Any, ...]
) -> None:
    body = {
        "name": "guarded",
        "prompt": "p",
        "trigger": {"every_seconds": 60},
        "runner": {"type": "command", "argv": ["true"]},
        field: good,
    }
    created = await client.post("/api/v1/schedules", json=body)
    assert created.status_code == 201 and created.json()[field] == good, created.text
    assert created.json()["scheduled_runs"] == 0
    url = f"/api/v1/schedules/{created.json()['id']}"
    for value in bad:
        refused = await client.patch(url, json={field: value})
        assert refused.status_code == 422, (value, refused.text)
        assert refused.json()["error"]["field"] == field
    cleared = await client.patch(url, json={field: None})
    assert cleared.status_code == 200 and cleared.json()[field] is None
    # Null clears only the fields that may be unset.
    assert (await client.patch(url, json={"name": None})).status_code == 422
