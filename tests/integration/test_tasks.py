"""Tasks and self-healing orphans: the task API, persistent re-binding, pausing a schedule
whose channel can no longer work (a runner that can no longer work: tests/unit/
test_engine_logic.py, the runners' own tests and the run store's contract)."""

from __future__ import annotations

import httpx

from agentcron.core.notify import notifier, register_notifier
from agentcron.core.notify.file import FileNotifier
from agentcron.core.runners.fake import FakeRunnerType, sleep, succeed
from agentcron.core.storage.models import Schedule
from tests.integration.engine_kit import (
    HOURLY,
    ROOMY_LEASE,
    Engine,
    MakeEngine,
    fetch_schedule,
    spec,
    wait_for,
    wait_status,
)


async def test_task_shows_its_lock_and_survives_deletion(
    client: httpx.AsyncClient, make_engine: MakeEngine, fake: FakeRunnerType
) -> None:
    # The API app and the engine share the test database (both as owner "local"). The lease is
    # the roomy one: the lock is read while the long attempt runs, and a renewal late on a
    # loaded machine would stop it (and free the lock) before the read.
    engine = make_engine(lease=ROOMY_LEASE)
    fake.script("slow", [sleep(30), succeed("second")])
    schedule = await engine.create(spec(fake.config("slow"), HOURLY, mode="persistent"))
    first = await engine.run_now(schedule.id)
    running = await wait_status(engine.db, first.id, "running")
    assert running.task_id is not None
    url = f"/api/v1/tasks/{running.task_id}"

    shown = (await client.get(url)).json()
    assert shown["lock"] == {"state": "running", "run_id": str(first.id)}
    assert shown["schedule_id"] == str(schedule.id) and shown["conversation"] == []
    assert shown["workdir"].endswith(str(schedule.id))
    refused = await client.delete(url)
    assert refused.status_code == 409 and "cancel it first" in refused.text

    await engine.runs.cancel(first.id, None)
    engine.loop.cancel_local(first.id)
    await wait_status(engine.db, first.id, "cancelled")
    assert (await client.get(url)).json()["lock"] == {"state": "idle", "run_id": None}

    assert (await client.delete(url)).status_code == 204
    gone = await client.get(url)
    assert gone.status_code == 404 and str(running.task_id) in gone.json()["error"]["message"]
    assert (await fetch_schedule(engine.db, schedule.id)).task_id is None
    second = await engine.run_now(schedule.id)
    done = await wait_status(engine.db, second.id, "succeeded")
    assert done.task_id is not None and done.task_id != running.task_id
    assert (await fetch_schedule(engine.db, schedule.id)).task_id == done.task_id


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
