"""The circuit breaker (issue 8, part 7), on both databases: ``pause_after_failures: N`` pauses
a schedule after N failed runs in a row, says why, and tells every notify channel."""

from __future__ import annotations

import json

import httpx

from agentcron.core.runners.fake import FakeRunnerType, permanent, succeed
from tests.integration.engine_kit import (
    Engine,
    deliveries_of,
    fetch_schedule,
    runs_of,
    spec,
    wait_for,
)


async def test_three_failures_in_a_row_pause_the_schedule_and_notify(
    engine: Engine, fake: FakeRunnerType
) -> None:
    # A success in the middle restarts the count: the breaker trips on the 6th run, not the 3rd.
    steps = [permanent("upstream 502"), permanent("upstream 502"), succeed("ok")]
    steps += [permanent(f"upstream 50{i}") for i in range(3)] + [succeed()] * 5
    fake.script("flaky", steps)
    notify = [{"type": "file", "path": "runs.jsonl"}]  # notify_on: succeeded (the default)
    schedule = await engine.create(
        spec(fake.config("flaky"), pause_after_failures=3, notify=notify)
    )

    async def paused() -> bool:
        return not (await fetch_schedule(engine.db, schedule.id)).enabled

    await wait_for(paused, within=15, what="the breaker to pause the schedule")
    after = await fetch_schedule(engine.db, schedule.id)
    assert after.next_run is None and after.paused_at is not None
    assert after.paused_note is not None
    assert "3 failed runs in a row" in after.paused_note
    assert "upstream 502" in after.paused_note  # the last error (of the 6th run)

    async def settled() -> list[str] | None:
        runs = await runs_of(engine.db, schedule.id)
        statuses = [run.status for run in runs if run.status not in ("pending", "running")]
        return statuses if len(statuses) >= 6 else None

    await wait_for(settled, within=10, what="six finished runs")
    finished = [r for r in await runs_of(engine.db, schedule.id) if r.status != "skipped"]
    assert [r.status for r in finished[:6]] == ["failed", "failed", "succeeded"] + ["failed"] * 3
    tripped = finished[5]
    assert tripped.reason == "circuit_breaker"
    assert [r.reason for r in finished[:5]] == [None] * 5
    assert all(r.reason != "circuit_breaker" for r in finished[6:])

    # The failed run that paused the schedule reaches the channel although it only asks for
    # successes: a pause nobody hears about is a silent outage.
    async def delivered() -> bool:
        found = await deliveries_of(engine.db, tripped.id)
        return bool(found) and found[0].status == "delivered"

    await wait_for(delivered, within=10, what="the breaker's notification")
    lines = (engine.workdir(schedule) / "runs.jsonl").read_text().splitlines()
    bodies = [json.loads(line) for line in lines]
    tripping = [b for b in bodies if b["run"]["id"] == str(tripped.id)]
    assert len(tripping) == 1
    assert tripping[0]["schedule"]["paused"] is True
    assert "3 failed runs in a row" in tripping[0]["schedule"]["paused_note"]
    assert tripping[0]["run"]["status"] == "failed"
    assert tripping[0]["run"]["reason"] == "circuit_breaker"


async def test_without_a_breaker_failures_never_pause(engine: Engine, fake: FakeRunnerType) -> None:
    fake.script("broken", [permanent("nope")] * 6)
    schedule = await engine.create(spec(fake.config("broken")))

    async def failed_five() -> bool:
        runs = await runs_of(engine.db, schedule.id)
        return sum(run.status == "failed" for run in runs) >= 5

    await wait_for(failed_five, within=15, what="five failures")
    after = await fetch_schedule(engine.db, schedule.id)
    assert after.enabled and after.consecutive_failures >= 5


async def test_pause_after_failures_through_the_api(client: httpx.AsyncClient) -> None:
    body = {
        "name": "guarded",
        "prompt": "p",
        "trigger": {"every_seconds": 60},
        "runner": {"type": "command", "argv": ["true"]},
        "pause_after_failures": 5,
    }
    created = await client.post("/api/v1/schedules", json=body)
    assert created.status_code == 201 and created.json()["pause_after_failures"] == 5
    url = f"/api/v1/schedules/{created.json()['id']}"
    for bad in (0, -2, 1001, "5", 2.5):
        refused = await client.patch(url, json={"pause_after_failures": bad})
        assert refused.status_code == 422
        assert refused.json()["error"]["field"] == "pause_after_failures"
    cleared = await client.patch(url, json={"pause_after_failures": None})
    assert cleared.status_code == 200 and cleared.json()["pause_after_failures"] is None
