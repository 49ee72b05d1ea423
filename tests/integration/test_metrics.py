"""``/metrics``: the engine's counters move with what it does, and scrapers need no key."""

from __future__ import annotations

import httpx
import structlog.testing
from prometheus_client import generate_latest

from agentcron.core.runners.fake import FakeRunnerType, permanent, succeed
from agentcron.core.storage.models import Delivery, Run
from tests.integration.engine_kit import (
    HOURLY,
    Engine,
    deliveries_of,
    every_second,
    runs_where,
    spec,
    wait_for,
    wait_status,
)


def sample(engine: Engine, name: str, **labels: str) -> float:
    value = engine.loop.metrics.registry.get_sample_value(name, labels or None)
    return 0.0 if value is None else value


async def test_runs_deliveries_and_the_loop_are_counted(
    engine: Engine, fake: FakeRunnerType
) -> None:
    fake.script("mixed", [succeed("one"), permanent("no")])
    notify = [{"type": "file", "path": "out/runs.jsonl"}]
    schedule = await engine.create(spec(fake.config("mixed"), HOURLY, notify=notify))
    first = await wait_status(engine.db, (await engine.run_now(schedule.id)).id, "succeeded")
    await wait_status(engine.db, (await engine.run_now(schedule.id)).id, "failed")

    async def delivered() -> list[Delivery] | None:
        rows = await deliveries_of(engine.db, first.id)
        return rows if rows and rows[0].status == "delivered" else None

    await wait_for(delivered, what="the file delivery")
    ticking = await engine.create(spec(fake.config(), every_second()))
    await wait_for(runs_where(engine.db, ticking.id, lambda runs: _succeeded(runs) >= 2))

    async def counted() -> bool:
        return sample(engine, "agentcron_deliveries_total", channel="file", status="delivered") > 0

    await wait_for(counted, what="the delivery counted")
    assert sample(engine, "agentcron_runs_total", status="succeeded", trigger="manual") == 1
    assert sample(engine, "agentcron_runs_total", status="failed", trigger="manual") == 1
    assert sample(engine, "agentcron_runs_total", status="succeeded", trigger="schedule") >= 2
    # Only scheduled runs have a due time to be late against.
    assert sample(engine, "agentcron_run_start_delay_seconds_count") >= 2
    assert sample(engine, "agentcron_run_duration_seconds_count") >= 4
    assert sample(engine, "agentcron_claim_batch_size_count") >= 1
    assert sample(engine, "agentcron_loop_iterations_total") >= 1
    assert sample(engine, "agentcron_loop_errors_total") == 0
    assert sample(engine, "agentcron_runs_in_flight") == 0
    text = generate_latest(engine.loop.metrics.registry).decode()
    assert 'agentcron_runs_total{status="succeeded",trigger="manual"} 1.0' in text


def _succeeded(runs: list[Run]) -> int:
    return sum(1 for run in runs if run.status == "succeeded")


async def test_metrics_need_no_key(client: httpx.AsyncClient) -> None:
    response = await client.get("/metrics", headers={"Authorization": ""})
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/plain")
    assert "# TYPE agentcron_loop_iterations_total counter" in response.text
    assert "agentcron_runs_in_flight" in response.text


async def test_every_log_line_of_a_run_names_run_schedule_attempt_and_instance(
    engine: Engine, fake: FakeRunnerType
) -> None:
    fake.script("once", [succeed("done")])
    schedule = await engine.create(spec(fake.config("once"), HOURLY))
    with structlog.testing.capture_logs() as lines:
        queued = await engine.run_now(schedule.id)
        await wait_status(engine.db, queued.id, "succeeded")
    mine = [line for line in lines if line.get("run_id") == str(queued.id)]
    assert {"run_started", "run_finished"} <= {line["event"] for line in mine}
    for line in mine:
        assert line["schedule_id"] == str(schedule.id)
        assert line["instance_id"] == engine.ledger.owner
        assert line["attempt"] == 1
