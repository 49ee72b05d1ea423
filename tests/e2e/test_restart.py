"""Stop the only server, start another process on the same PostgreSQL database: what was saved
is there, and a persistent task's conversation goes on (docs/design.md, promise 11). Due times
missed while no process ran follow the catch-up policy at the claim
(tests/integration/test_timeline.py, tests/unit/test_plan.py), under a real outage in
tests/faults/test_outage.py.
"""

from __future__ import annotations

import asyncio
import signal
from collections.abc import Callable
from pathlib import Path

import httpx
import pytest

from agentcron.core.storage.models import Run
from tests.chat_server import ChatServer
from tests.conftest import bearer
from tests.e2e.conftest import Fleet, RunProbe, engine_env, make_key, schedule_body, wait_for


@pytest.mark.pg
@pytest.mark.slow
@pytest.mark.timeout(300)
async def test_restart_keeps_schedules_history_and_conversations(
    pg_url: str, fleet: Fleet, tmp_path: Path, probe_factory: Callable[[str], RunProbe]
) -> None:
    """SIGTERM the only server on PostgreSQL and start a new process: the schedules, the run
    history and a persistent task's conversation are what they were, and the next turn of the
    conversation carries the turns from before the restart."""
    probe = probe_factory(pg_url)
    env = dict(engine_env(pg_url, tmp_path / "data", "restart-pg-1"), CHAT_KEY="sk-test")
    key = await asyncio.to_thread(make_key, env)
    async with ChatServer() as chat:
        first = await asyncio.to_thread(fleet.start, env, "first")
        runner = {"type": "openai", "base_url": chat.base_url, "model": "test-model"}
        runner["api_key_env"] = "CHAT_KEY"
        body = schedule_body("persistent chat", {"every_seconds": 2}, runner, mode="persistent")
        async with httpx.AsyncClient(timeout=30, headers=bearer(key)) as http:
            created = await http.post(f"{first.url}/api/v1/schedules", json=body)
            assert created.status_code == 201, created.text
            schedule_id = created.json()["id"]

            async def succeeded(count: int) -> list[Run]:
                runs = await probe.runs(schedule_id)
                failed = [(r.status, r.error) for r in runs if r.status == "failed"]
                assert not failed, failed
                runs = [r for r in runs if r.status == "succeeded"]
                return runs if len(runs) >= count else []

            await wait_for(lambda: succeeded(2), "two turns before the restart", within=20)
            assert await asyncio.to_thread(first.stop) in (0, -signal.SIGTERM)
            before = await probe.runs(schedule_id)
            assert {r.status for r in before} <= {"succeeded", "pending"}, before
            task_id = (await probe.schedule(schedule_id)).task_id
            assert task_id is not None
            turns_before = len(chat.requests)

            second = await asyncio.to_thread(
                fleet.start, dict(env, AGENTCRON_INSTANCE_ID="restart-pg-2"), "second"
            )
            done = {r.id for r in before if r.status == "succeeded"}
            await wait_for(lambda: succeeded(len(done) + 1), "a turn after the restart", within=20)
            # Paused and settled, so the conversation and the runs counted below are one
            # snapshot: a turn finishing between the two reads would otherwise miscount.
            paused = await http.post(f"{second.url}/api/v1/schedules/{schedule_id}/pause")
            assert paused.status_code == 200, paused.text

            async def settled() -> bool:
                runs = await probe.runs(schedule_id)
                return all(r.status not in ("pending", "running") for r in runs)

            await wait_for(settled, "the last turn to finish", within=20)
            schedule = (await http.get(f"{second.url}/api/v1/schedules/{schedule_id}")).json()
            history = (await http.get(f"{second.url}/api/v1/schedules/{schedule_id}/runs")).json()
            task = (await http.get(f"{second.url}/api/v1/tasks/{task_id}")).json()
        assert await asyncio.to_thread(second.stop) in (0, -signal.SIGTERM)

    assert schedule["name"] == "persistent chat" and schedule["mode"] == "persistent"
    assert schedule["trigger"]["every_seconds"] == 2
    listed = {item["id"] for item in history["items"]}
    assert {str(run_id) for run_id in done} <= listed  # history from before the restart
    assert (await probe.schedule(schedule_id)).task_id == task_id  # the same bound task
    # The conversation holds every turn, and the first turn after the restart sent the turns
    # made before it (a user and an assistant message per earlier run).
    finished = [r for r in await probe.runs(schedule_id) if r.status == "succeeded"]
    assert len(task["conversation"]) == 2 * len(finished), task["conversation"]
    after = chat.requests[turns_before]
    assert len(after.body["messages"]) >= 2 * len(done) + 1, after.body["messages"]
    runs = await probe.runs(schedule_id)
    assert len({r.due_at for r in runs}) == len(runs)  # one run per due time
