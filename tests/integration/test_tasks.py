"""Tasks and self-healing orphans: the task API, persistent re-binding, pausing a schedule
whose runner or channel can no longer work."""

from __future__ import annotations

import httpx
import pytest

from agentcron.core.notify import notifier, register_notifier
from agentcron.core.notify.file import FileNotifier
from agentcron.core.runners.fake import FakeRunnerType, sleep, succeed
from agentcron.core.storage.models import Schedule
from agentcron.core.tasks import delete_task, get_task
from tests.integration.engine_kit import (
    HOURLY,
    Engine,
    fetch_schedule,
    spec,
    wait_for,
    wait_status,
)


async def test_task_shows_its_lock_and_survives_deletion(
    engine: Engine, fake: FakeRunnerType
) -> None:
    fake.script("slow", [sleep(30), succeed("second")])
    schedule = await engine.create(spec(fake.config("slow"), HOURLY, mode="persistent"))
    first = await engine.run_now(schedule.id)
    running = await wait_status(engine.db, first.id, "running")
    assert running.task_id is not None

    shown = await get_task(engine.db, running.task_id, None)
    assert shown["lock"] == {"state": "running", "run_id": first.id}
    assert shown["schedule_id"] == schedule.id
    assert shown["workdir"].endswith(str(schedule.id))
    with pytest.raises(Exception, match="cancel it first"):
        await delete_task(engine.db, running.task_id, None)

    await engine.runs.cancel(first.id, None)
    engine.loop.cancel_local(first.id)
    await wait_status(engine.db, first.id, "cancelled")
    assert (await get_task(engine.db, running.task_id, None))["lock"]["state"] == "idle"

    await delete_task(engine.db, running.task_id, None)
    assert (await fetch_schedule(engine.db, schedule.id)).task_id is None
    second = await engine.run_now(schedule.id)
    done = await wait_status(engine.db, second.id, "succeeded")
    assert done.task_id is not None and done.task_id != running.task_id
    assert (await fetch_schedule(engine.db, schedule.id)).task_id == done.task_id


async def test_task_api_get_and_delete(client: httpx.AsyncClient, engine: Engine) -> None:
    # The API app and the engine share the test database (both as owner "local").
    schedule = await engine.create(
        spec({"type": "command", "argv": ["true"]}, HOURLY, mode="persistent")
    )
    run = await wait_status(engine.db, (await engine.run_now(schedule.id)).id, "succeeded")
    response = await client.get(f"/api/v1/tasks/{run.task_id}")
    assert response.status_code == 200, response.text
    task = response.json()
    assert task["id"] == str(run.task_id) and task["schedule_id"] == str(schedule.id)
    assert task["lock"] == {"state": "idle", "run_id": None}
    assert task["conversation"] == []

    assert (await client.delete(f"/api/v1/tasks/{run.task_id}")).status_code == 204
    gone = await client.get(f"/api/v1/tasks/{run.task_id}")
    assert gone.status_code == 404 and str(run.task_id) in gone.json()["error"]["message"]
    assert (await client.get("/api/v1/tasks/not-a-task")).status_code == 404


async def test_missing_command_pauses_the_schedule(engine: Engine) -> None:
    runner = {"type": "command", "argv": ["/nonexistent/agent-binary"]}
    schedule = await engine.create(spec(runner, HOURLY))
    run = await wait_status(engine.db, (await engine.run_now(schedule.id)).id, "failed")
    assert run.attempt == 1  # permanent: not retried
    assert run.error is not None and "cannot start" in run.error

    async def paused() -> Schedule | None:
        s = await fetch_schedule(engine.db, schedule.id)
        return s if not s.enabled else None

    stopped = await wait_for(paused, what="schedule paused")
    assert stopped.next_run is None
    assert stopped.paused_note is not None and "cannot start" in stopped.paused_note


async def test_vanished_runner_type_pauses_the_schedule(
    engine: Engine, fake: FakeRunnerType
) -> None:
    schedule = await engine.create(spec(fake.config(), HOURLY))
    async with engine.db.session() as session:
        stored = await session.get(Schedule, schedule.id)
        assert stored is not None
        stored.runner = {"type": "uninstalled-plugin"}
    run = await wait_status(engine.db, (await engine.run_now(schedule.id)).id, "failed")
    assert run.error is not None and "uninstalled-plugin" in run.error
    stopped = await fetch_schedule(engine.db, schedule.id)
    assert not stopped.enabled and stopped.paused_note is not None


async def test_vanished_channel_type_pauses_the_schedule(
    engine: Engine, fake: FakeRunnerType
) -> None:
    class Gone(FileNotifier):
        name = "soon-gone"

    register_notifier(Gone())
    notify = [{"type": "soon-gone", "path": "out.jsonl"}]
    schedule = await engine.create(spec(fake.config(), HOURLY, notify=notify))
    from agentcron.core import notify as registry

    registry._REGISTRY.pop("soon-gone")
    assert notifier("soon-gone") is None
    run = await wait_status(engine.db, (await engine.run_now(schedule.id)).id, "succeeded")
    assert run.status == "succeeded"  # a delivery problem never fails the run

    async def paused() -> Schedule | None:
        s = await fetch_schedule(engine.db, schedule.id)
        return s if not s.enabled else None

    stopped = await wait_for(paused, what="schedule paused")
    assert stopped.paused_note is not None and "soon-gone" in stopped.paused_note
