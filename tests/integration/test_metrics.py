"""``/metrics`` and the file channel: the engine's counters move with what it does (runs,
deliveries, the loop), scrapers need no key, and a file channel gets one line per run it asks
for."""

from __future__ import annotations

import json

import httpx
import structlog.testing
from prometheus_client import generate_latest

from agentcron.core.runners.fake import FakeRunnerType, permanent, succeed
from agentcron.core.storage.models import Delivery, Run
from tests.integration.engine_kit import (
    HOURLY,
    Engine,
    MakeEngine,
    deliveries_of,
    runs_of,
    spec,
    wait_for,
    wait_status,
)


def sample(engine: Engine, name: str, **labels: str) -> float:
    value = engine.loop.metrics.registry.get_sample_value(name, labels or None)
    return 0.0 if value is None else value


async def test_a_file_channel_gets_each_succeeded_run_and_the_metrics_count_it(
    engine: Engine, fake: FakeRunnerType
) -> None:
    fake.script("mixed", [succeed("first"), permanent("nope"), succeed("third")])
    notify = [{"type": "file", "path": "out/runs.jsonl"}]  # notify_on: succeeded (the default)
    schedule = await engine.create(spec(fake.config("mixed"), HOURLY, notify=notify, name="digest"))
    runs = []
    for _ in range(3):
        queued = await engine.run_now(schedule.id)
        runs.append(await wait_status(engine.db, queued.id, "succeeded", "failed"))
    assert [r.status for r in runs] == ["succeeded", "failed", "succeeded"]

    for run in (runs[0], runs[2]):

        async def delivered(run: Run = run) -> list[Delivery] | None:
            rows = await deliveries_of(engine.db, run.id)
            return rows if rows and rows[0].status != "pending" else None

        rows = await wait_for(delivered, 5, "delivery")
        assert [(d.index, d.channel, d.status, d.attempts, d.target) for d in rows] == [
            (0, "file", "delivered", 1, "file:out/runs.jsonl")
        ]
    assert await deliveries_of(engine.db, runs[1].id) == []
    path = engine.workdir(schedule) / "out" / "runs.jsonl"
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    assert [line["run"]["id"] for line in lines] == [str(runs[0].id), str(runs[2].id)]
    assert [line["run"]["output"] for line in lines] == ["first", "third"]
    assert all(line["type"] == "run.finished" for line in lines)
    assert lines[0]["schedule"] == {"id": str(schedule.id), "name": "digest"}
    assert lines[0]["run"]["status"] == "succeeded"

    ticking = await engine.create(spec(fake.config()))  # every second

    async def ticked() -> bool:
        return any(run.status == "succeeded" for run in await runs_of(engine.db, ticking.id))

    await wait_for(ticked, what="a scheduled run")

    async def counted() -> bool:
        return sample(engine, "agentcron_deliveries_total", channel="file", status="delivered") > 1

    await wait_for(counted, what="the deliveries counted")
    assert sample(engine, "agentcron_runs_total", status="succeeded", trigger="manual") == 2
    assert sample(engine, "agentcron_runs_total", status="failed", trigger="manual") == 1
    assert sample(engine, "agentcron_runs_total", status="succeeded", trigger="schedule") >= 1
    # Only scheduled runs have a due time to be late against.
    assert sample(engine, "agentcron_run_start_delay_seconds_count") >= 1
    assert sample(engine, "agentcron_run_duration_seconds_count") >= 4
    assert sample(engine, "agentcron_claim_batch_size_count") >= 1
    assert sample(engine, "agentcron_loop_iterations_total") >= 1
    assert sample(engine, "agentcron_loop_errors_total") == 0
    assert sample(engine, "agentcron_runs_in_flight") == 0
    text = generate_latest(engine.loop.metrics.registry).decode()
    assert 'agentcron_runs_total{status="succeeded",trigger="manual"} 2.0' in text


async def test_metrics_need_no_key(client: httpx.AsyncClient) -> None:
    response = await client.get("/metrics", headers={"Authorization": ""})
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/plain")
    assert "# TYPE agentcron_loop_iterations_total counter" in response.text
    assert "agentcron_runs_in_flight" in response.text


async def test_every_log_line_of_a_run_names_run_schedule_attempt_and_instance(
    make_engine: MakeEngine, fake: FakeRunnerType
) -> None:
    engine = make_engine(log_runs="each")  # AGENTCRON_LOG_RUNS=each: a line per start and end
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
