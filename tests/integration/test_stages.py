"""The stages of a run on its record (claimed, started, output, finished, delivered), through
the real API and engine on both databases, and on the dashboard's runs table."""

from __future__ import annotations

import re
from datetime import datetime

import httpx
from fastapi import FastAPI

from agentcron.web.dashboard.views import STAGES
from tests.conftest import issue_key
from tests.integration.engine_kit import API, Engine, run_to_end
from tests.integration.test_dashboard import browser

HOURLY = {"every_seconds": 3600}  # never due during a test: runs come from "run now"
FILE = [{"type": "file", "path": "runs.jsonl", "notify_on": ["succeeded", "failed"]}]


async def create(client: httpx.AsyncClient, argv: list[str]) -> str:
    body = {"name": "s", "prompt": "p", "trigger": HOURLY, "max_attempts": 1, "notify": FILE}
    response = await client.post(
        f"{API}/schedules", json={**body, "runner": {"type": "command", "argv": argv}}
    )
    assert response.status_code == 201, response.text
    schedule_id: str = response.json()["id"]
    return schedule_id


def at(run: dict[str, object], stage: str) -> datetime | None:
    value = run[f"{stage}_at"]
    return None if value is None else datetime.fromisoformat(str(value))


async def test_each_stage_a_run_reaches_is_on_its_record_in_order(
    client: httpx.AsyncClient, engine: Engine, live_app: FastAPI
) -> None:
    done = await run_to_end(client, await create(client, ["cat"]), delivered=True)
    stages = [at(done, stage) for stage in ("created", "claimed", "started", "output", "finished")]
    assert all(stage is not None for stage in stages), done
    assert stages == sorted(stages)  # type: ignore[type-var]
    # A queued run is claimed after it was queued; its delivery comes after its record.
    assert stages[1] > stages[0]  # type: ignore[operator]
    delivered = at(done, "delivered")
    assert delivered is not None and delivered >= stages[-1]  # type: ignore[operator]

    # An agent that returned nothing (it exited 1) has no output stage; its delivery has one.
    failed = await run_to_end(client, await create(client, ["false"]), delivered=True)
    assert failed["status"] == "failed"
    assert at(failed, "output") is None
    assert at(failed, "claimed") and at(failed, "finished") and at(failed, "delivered")

    async with browser(live_app, await issue_key(live_app)) as http:
        page = (await http.get(f"/schedules/{done['schedule_id']}")).text
    # The schedule's runs table lists them.
    lists = re.findall(r'<details class="stages">.*?</details>', page, re.S)
    named = [re.findall(r">(\w+) \+", listed) for listed in lists]
    assert named == [list(STAGES)], lists
