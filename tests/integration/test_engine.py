"""The engine in-process: ``SchedulerLoop`` + ``SqlRunStore`` on SQLite and PostgreSQL, for
what neither the contract suite (tests/contract, each verb of the store) nor the engine's logic
on the memory store (tests/unit/test_engine_logic.py) can break: a real agent's process group
stopped, the cross-replica wake-up, a stop racing an admission, and batches of a burst.
"""

from __future__ import annotations

import asyncio
import json
from datetime import UTC, datetime
from typing import Any

import pytest
from sqlalchemy import insert, select

from agentcron.core import triggers
from agentcron.core.runners.fake import DEFAULT_SCRIPT, FakeRunnerType, permanent, sleep
from agentcron.core.runs import RunService
from agentcron.core.schedules.service import ScheduleService
from agentcron.core.states import TERMINAL
from agentcron.core.storage.database import Database
from agentcron.core.storage.models import Delivery, Run, Schedule
from tests.factories import schedule_values
from tests.integration.engine_kit import (
    HOURLY,
    ROOMY_LEASE,
    Engine,
    MakeEngine,
    deliveries_of,
    fetch_run,
    fetch_schedule,
    spec,
    wait_dead,
    wait_for,
    wait_status,
    wait_true,
)

# -- stopping an attempt of a real agent ---------------------------------------------------


async def test_a_timeout_kills_the_process_group_keeps_no_output_and_delivers_where_asked(
    engine: Engine,
) -> None:
    script = "echo partial; echo $$ > leader.pid; sleep 30 & echo $! > child.pid; wait"
    runner = {"type": "command", "argv": ["sh", "-c", script]}
    notify = [
        {"type": "file", "path": "runs.jsonl"},  # notify_on defaults to succeeded
        {"type": "file", "path": "timeouts.jsonl", "notify_on": ["timed_out"]},
    ]
    schedule = await engine.create(spec(runner, HOURLY, timeout_seconds=1, notify=notify))
    queued = await engine.run_now(schedule.id)
    workdir = engine.workdir(schedule)

    run = await wait_status(engine.db, queued.id, "timed_out", "succeeded", "failed", within=8)
    # A timed-out run keeps nothing of what its agent printed (promise 8), and only a channel
    # that asks for timed_out gets its record.
    assert (run.status, run.error, run.output) == ("timed_out", "timed out after 1 s", None)
    for name in ("leader.pid", "child.pid"):
        await wait_dead(int((workdir / name).read_text()), within=5)
    assert (await fetch_schedule(engine.db, schedule.id)).last_status == "timed_out"

    async def delivered() -> list[Delivery] | None:
        rows = await deliveries_of(engine.db, run.id)
        return rows if [row.status for row in rows] == ["delivered"] else None

    (delivery,) = await wait_for(delivered, 5, "the timed_out delivery")
    assert delivery.index == 1  # the channel that asks for timed_out, and only that one
    line = json.loads((workdir / "timeouts.jsonl").read_text())
    assert line["run"]["status"] == "timed_out" and line["run"]["output"] is None
    assert not (workdir / "runs.jsonl").exists()


# A real agent that prints two lines, says so in a file, then works on (at once done when a
# run of its schedule printed already: the run that replaces it under cancel_other).
PRINTS_THEN_WORKS = {
    "type": "command",
    "argv": [
        "sh",
        "-c",
        "[ -e printed ] && exit 0; echo step one; echo step two; touch printed; sleep 30",
    ],
}


async def test_a_stopped_run_keeps_what_its_agent_printed(make_engine: MakeEngine) -> None:
    """Stopped under ``cancel_other`` by the next run of its schedule, which waits for it to end
    and then runs. (What a stopped attempt keeps, with its secrets redacted:
    ``tests/unit/test_secrets.py::test_an_attempts_result_is_redacted_before_it_is_recorded``.)"""
    engine = make_engine(lease=ROOMY_LEASE)
    schedule = await engine.create(spec(PRINTS_THEN_WORKS, HOURLY, overlap="cancel_other"))
    first = await engine.run_now(schedule.id)
    printed = engine.workdir(schedule) / "printed"
    await wait_true(printed.exists, 10, "the agent printed its lines")
    replacement = await engine.run_now(schedule.id)
    ended = await wait_status(engine.db, first.id, "cancelled", "succeeded", within=10)
    assert (ended.status, ended.error) == ("cancelled", "cancelled on request")
    assert ended.output == "step one\nstep two\n"
    after = await wait_status(engine.db, replacement.id, "succeeded", "failed", within=10)
    assert after.status == "succeeded"
    assert after.started_at is not None and ended.finished_at is not None
    assert after.started_at >= ended.finished_at


# -- wake-ups and shutdown ----------------------------------------------------------------


@pytest.mark.parametrize("backend", ["postgresql"])  # NOTIFY: the cross-replica wake-up
async def test_work_queued_by_another_replica_wakes_the_loop(
    make_engine: MakeEngine, fake: FakeRunnerType, db: Database
) -> None:
    engine = make_engine(tick=30)
    await asyncio.sleep(0.3)  # the loop has planned a long sleep
    elsewhere = RunService(db)  # no on_change: only NOTIFY reaches us
    service = ScheduleService(db)
    schedule = await service.create(spec(fake.config(), HOURLY), "local")
    queued = await elsewhere.run_now(schedule.id, None)
    run = await wait_status(engine.db, queued.id, "succeeded", within=5)
    assert run.lease_owner is None and fake.default.calls[0].run_id == queued.id


async def test_stop_while_an_attempt_is_being_admitted_neither_loses_nor_repeats_it(
    make_engine: MakeEngine, fake: FakeRunnerType, monkeypatch: pytest.MonkeyPatch
) -> None:
    engine = make_engine(drain_timeout=5, start=False)
    runner = fake.script("quick", [sleep(0.2, "finished")])
    real_admit = engine.ledger.admit
    admitted = asyncio.Event()

    async def slow_admit(runs: Any) -> Any:
        decisions = await real_admit(runs)
        if any(decision.action == "run" for decision in decisions):
            # The attempt is committed as running but not executing yet; on PostgreSQL a
            # concurrent release waits for the row lock and lands exactly here.
            admitted.set()
            await asyncio.sleep(0.3)
        return decisions

    monkeypatch.setattr(engine.ledger, "admit", slow_admit)
    engine.loop.start()
    schedule = await engine.create(spec(fake.config("quick"), HOURLY))
    queued = await engine.run_now(schedule.id)
    await asyncio.wait_for(admitted.wait(), 5)
    await engine.loop.stop()

    run = await fetch_run(engine.db, queued.id)
    # Admitted before the stop, so it is drained like any in-flight run: recorded once, never
    # handed back to be run a second time by another replica.
    assert (run.status, run.output, run.attempt) == ("succeeded", "finished", 1)
    assert len(runner.calls) == 1


# -- batches ------------------------------------------------------------------------------


async def test_the_loop_admits_and_records_a_burst_in_batches(
    make_engine: MakeEngine, fake: FakeRunnerType
) -> None:
    fake.script("broken", [permanent("no")] * 40)
    # A lease of seconds, not the kit's 2 s: on a loaded machine the fences would rightly stop
    # attempts whose renewal came late and the runs would show attempt 2, which is not what
    # this test is about (the fences have their tests in test_leases.py).
    engine = make_engine(start=False, lease=10.0)
    now = datetime.now(UTC)
    trigger = triggers.trigger_to_dict(triggers.OneShotTrigger(at=now))
    scripts = ["broken" if i % 5 == 0 else DEFAULT_SCRIPT for i in range(200)]
    due = {"trigger": trigger, "next_run": now}
    rows = [
        schedule_values(now, name=f"burst {i}", runner=fake.config(script), **due)
        for i, script in enumerate(scripts)
    ]
    async with engine.db.session() as session:
        await session.execute(insert(Schedule), rows)
    engine.loop.start()

    async def settled() -> list[Any] | None:
        async with engine.db.session(write=False) as session:
            runs = list((await session.execute(select(Run.status, Run.attempt))).all())
        return runs if len(runs) == 200 and all(r.status in TERMINAL for r in runs) else None

    runs = await wait_for(settled, within=60, what="200 runs finished")
    assert sorted({(r.status, r.attempt) for r in runs}) == [("failed", 1), ("succeeded", 1)]
    assert sum(1 for r in runs if r.status == "failed") == 40
    async with engine.db.session(write=False) as session:
        last = dict((await session.execute(select(Schedule.name, Schedule.last_status))).all())
    assert last["burst 0"] == "failed" and last["burst 1"] == "succeeded"
    # Batched: fewer transactions than runs, for both admissions and results.
    flushes = engine.loop.flushes
    assert 0 < flushes["admissions"] < 200 and 0 < flushes["results"] < 200
