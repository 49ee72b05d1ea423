"""The engine in-process: ``SchedulerLoop`` + ``SqlRunStore`` on SQLite and PostgreSQL.

Each test builds a loop with a short tick and lease, schedules work through the
``ScheduleService`` (which wakes the loop), and waits on the database with a deadline. Agent
work is the scripted ``FakeRunner`` unless the test is about real processes.
"""

from __future__ import annotations

import asyncio
import json
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from sqlalchemy import delete, insert, select

from agentcron.core import triggers
from agentcron.core.runners.fake import (
    DEFAULT_SCRIPT,
    FakeRunnerType,
    permanent,
    sleep,
    succeed,
    transient,
)
from agentcron.core.runs import RunService
from agentcron.core.schedules.service import ScheduleService
from agentcron.core.states import TERMINAL
from agentcron.core.storage.database import Database
from agentcron.core.storage.models import Delivery, Run, Schedule, Task
from tests.factories import schedule_values
from tests.integration.engine_kit import (
    HOURLY,
    OWNER,
    ROOMY_LEASE,
    Engine,
    MakeEngine,
    deliveries_of,
    fetch_run,
    fetch_schedule,
    process_alive,
    runs_of,
    runs_where,
    spec,
    wait_for,
    wait_status,
)

# -- a schedule runs ----------------------------------------------------------------------


async def test_interval_schedule_runs_and_records_outcomes(
    engine: Engine, fake: FakeRunnerType
) -> None:
    runner = fake.script("s", [permanent("agent rejected the input"), succeed("all done")])
    schedule = await engine.create(spec(fake.config("s"), prompt="summarise the news"))

    async def schedule_state(status: str, failures: int) -> Schedule | None:
        s = await fetch_schedule(engine.db, schedule.id)
        return s if s.last_status == status and s.consecutive_failures == failures else None

    failed = await wait_for(lambda: schedule_state("failed", 1), what="first run failed")
    assert failed.last_error == "agent rejected the input"
    ok = await wait_for(lambda: schedule_state("succeeded", 0), what="second run succeeded")
    assert ok.last_error is None

    runs = [r for r in await runs_of(engine.db, schedule.id) if r.status != "pending"]
    first, second = runs[0], runs[1]
    assert (first.status, second.status) == ("failed", "succeeded")
    assert ok.last_run_id == second.id and ok.last_run_at is not None
    assert second.finished_at is not None and ok.last_run_at >= second.finished_at
    assert second.trigger == "schedule" and second.attempt == 1
    assert second.output == "all done" and second.error is None
    assert first.due_at is not None and second.due_at is not None
    assert second.due_at - first.due_at == timedelta(seconds=1)  # the 1 s grid
    assert second.started_at is not None and second.started_at >= second.due_at
    assert second.lease_owner is None

    assert [call.run_id for call in runner.calls[:2]] == [first.id, second.id]
    assert all(call.prompt == "summarise the news" for call in runner.calls)
    assert runner.calls[1].task_id == second.task_id
    assert ok.next_run is not None and ok.next_run > second.due_at


async def test_transient_failures_retry_then_succeed(engine: Engine, fake: FakeRunnerType) -> None:
    runner = fake.script(
        "flaky", [transient(), transient(), succeed("third time")], per_attempt=True
    )
    schedule = await engine.create(spec(fake.config("flaky"), HOURLY, max_attempts=3))
    queued = await engine.run_now(schedule.id)

    run = await wait_status(engine.db, queued.id, "succeeded", "failed")
    assert run.status == "succeeded"
    assert run.attempt == 3
    assert runner.attempts(run.id) == [1, 2, 3]
    assert run.output == "third time" and run.error is None
    # Every attempt continued in the same saved task (dispatch is idempotent by run id).
    assert {call.task_id for call in runner.calls} == {run.task_id}
    assert run.started_at is not None and run.finished_at is not None
    assert (await fetch_schedule(engine.db, schedule.id)).consecutive_failures == 0


async def test_timeout_stops_the_process_group_and_delivers_nothing(engine: Engine) -> None:
    script = "echo $$ > leader.pid; sleep 30 & echo $! > child.pid; wait"
    runner = {"type": "command", "argv": ["sh", "-c", script]}
    notify = [{"type": "file", "path": "runs.jsonl"}]  # notify_on defaults to succeeded
    schedule = await engine.create(spec(runner, HOURLY, timeout_seconds=1, notify=notify))
    queued = await engine.run_now(schedule.id)
    workdir = engine.workdir(schedule)

    running = await wait_status(engine.db, queued.id, "running")
    assert running.status == "running"
    run = await wait_status(engine.db, queued.id, "timed_out", "succeeded", "failed", within=8)
    assert run.status == "timed_out"
    assert run.error == "timed out after 1 s"
    assert run.output is None  # it wrote nothing on stdout (its pids went to files)

    for name in ("leader.pid", "child.pid"):
        pid = int((workdir / name).read_text())

        async def gone(pid: int = pid) -> bool:
            return not process_alive(pid)

        await wait_for(gone, 5, f"{name} process gone")

    s = await fetch_schedule(engine.db, schedule.id)
    assert s.last_status == "timed_out"
    assert await deliveries_of(engine.db, run.id) == []
    assert not (workdir / "runs.jsonl").exists()


@pytest.mark.parametrize("backend", ["sqlite"])  # engine logic, not storage
async def test_timed_out_run_is_delivered_to_channels_that_ask_for_it(
    engine: Engine, fake: FakeRunnerType
) -> None:
    fake.script("slow", [sleep(30)])
    notify = [{"type": "file", "path": "timeouts.jsonl", "notify_on": ["timed_out"]}]
    schedule = await engine.create(
        spec(fake.config("slow"), HOURLY, timeout_seconds=1, notify=notify)
    )
    queued = await engine.run_now(schedule.id)
    run = await wait_status(engine.db, queued.id, "timed_out", "succeeded", "failed", within=8)
    assert run.status == "timed_out"

    async def delivered() -> list[Delivery] | None:
        rows = await deliveries_of(engine.db, run.id)
        return rows if rows and rows[0].status == "delivered" else None

    await wait_for(delivered, 1, "timed_out delivery")
    line = json.loads((engine.workdir(schedule) / "timeouts.jsonl").read_text())
    assert line["run"]["status"] == "timed_out" and line["run"]["output"] is None


# -- overlap ------------------------------------------------------------------------------


async def test_overlap_skip_records_the_next_due_time_as_skipped(
    make_engine: MakeEngine, fake: FakeRunnerType
) -> None:
    engine = make_engine(lease=ROOMY_LEASE)
    runner = fake.script("long", [sleep(30)])
    schedule = await engine.create(spec(fake.config("long"), overlap="skip"))

    def has_skip(runs: list[Run]) -> bool:
        return any(r.status == "skipped" for r in runs)

    runs = await wait_for(runs_where(engine.db, schedule.id, has_skip), what="a skipped run")
    going = [r for r in runs if r.status == "running"]
    skipped = [r for r in runs if r.status == "skipped"]
    assert len(going) == 1
    assert skipped[0].reason == "overlap"
    assert skipped[0].due_at is not None and going[0].due_at is not None
    assert skipped[0].due_at > going[0].due_at
    assert str(going[0].id) in (skipped[0].error or "")
    assert skipped[0].attempt == 0 and skipped[0].started_at is None
    assert [call.run_id for call in runner.calls] == [going[0].id]


async def test_overlap_buffer_one_keeps_one_waiting_and_runs_it_after(
    make_engine: MakeEngine, fake: FakeRunnerType
) -> None:
    engine = make_engine(lease=ROOMY_LEASE)
    runner = fake.script("slow-first", [sleep(30), succeed("buffered one ran")])
    schedule = await engine.create(spec(fake.config("slow-first"), overlap="buffer_one"))

    def buffered_and_skipped(runs: list[Run]) -> bool:
        return any(r.reason == "buffered" for r in runs) and any(
            r.status == "skipped" for r in runs
        )

    runs = await wait_for(
        runs_where(engine.db, schedule.id, buffered_and_skipped), what="buffered + skipped"
    )
    first = next(r for r in runs if r.status == "running")
    waiting = next(r for r in runs if r.reason == "buffered")
    extra = next(r for r in runs if r.status == "skipped")
    assert waiting.status == "pending"
    assert extra.reason == "overlap" and extra.due_at is not None
    assert waiting.due_at is not None and waiting.due_at < extra.due_at

    await engine.runs.cancel(first.id, None)
    engine.loop.cancel_local(first.id)
    done = await wait_status(engine.db, waiting.id, "succeeded", "failed", "skipped")
    assert done.status == "succeeded" and done.output == "buffered one ran"
    ended = await fetch_run(engine.db, first.id)
    assert ended.status == "cancelled"
    assert done.started_at is not None and ended.finished_at is not None
    assert done.started_at >= ended.finished_at
    assert [call.run_id for call in runner.calls[:2]] == [first.id, waiting.id]
    assert extra.id not in {call.run_id for call in runner.calls}


@pytest.mark.parametrize("backend", ["sqlite"])  # engine logic, not storage
async def test_overlap_buffer_one_runs_the_buffered_run_before_newer_ones(
    make_engine: MakeEngine, fake: FakeRunnerType, monkeypatch: pytest.MonkeyPatch
) -> None:
    engine = make_engine(lease=ROOMY_LEASE)
    # The buffered run looks again only every WAIT_POLL_SECONDS; make that gap long so a newer
    # run arriving in it is certain to be seen first.
    monkeypatch.setattr("agentcron.web.engine.run.WAIT_POLL_SECONDS", 3.0)
    runner = fake.script("slow-first", [sleep(30), succeed()])
    schedule = await engine.create(spec(fake.config("slow-first"), HOURLY, overlap="buffer_one"))
    first = await engine.run_now(schedule.id)
    await wait_status(engine.db, first.id, "running")
    buffered = await engine.run_now(schedule.id)

    async def is_buffered() -> bool:
        return (await fetch_run(engine.db, buffered.id)).reason == "buffered"

    await wait_for(is_buffered, what="second run buffered")
    await engine.runs.cancel(first.id, None)
    engine.loop.cancel_local(first.id)
    await wait_status(engine.db, first.id, "cancelled")

    newer = await engine.run_now(schedule.id)
    await asyncio.sleep(0.5)
    assert newer.id not in {call.run_id for call in runner.calls}, "newer run overtook"


async def test_overlap_cancel_other_cancels_the_running_one(
    make_engine: MakeEngine, fake: FakeRunnerType
) -> None:
    engine = make_engine(lease=ROOMY_LEASE)
    runner = fake.script("replace", [sleep(30), succeed("newer")])
    schedule = await engine.create(spec(fake.config("replace"), overlap="cancel_other"))

    def replaced(runs: list[Run]) -> bool:
        return any(r.status == "succeeded" for r in runs)

    runs = await wait_for(runs_where(engine.db, schedule.id, replaced), what="replacement")
    old, new = runs[0], next(r for r in runs if r.status == "succeeded")
    assert old.status == "cancelled"
    assert old.due_at is not None and new.due_at is not None and new.due_at > old.due_at
    assert new.output == "newer"
    assert (old.id, "cancel") in runner.cancelled
    assert new.started_at is not None and old.finished_at is not None
    assert new.started_at >= old.finished_at


async def test_overlap_allow_runs_side_by_side(engine: Engine, fake: FakeRunnerType) -> None:
    runner = fake.script("long", [sleep(30)])
    schedule = await engine.create(spec(fake.config("long"), overlap="allow"))

    def two_running(runs: list[Run]) -> bool:
        return sum(r.status == "running" for r in runs) >= 2

    await wait_for(runs_where(engine.db, schedule.id, two_running), what="two running runs")
    assert runner.max_running >= 2
    assert len({call.run_id for call in runner.calls}) >= 2


# -- tasks --------------------------------------------------------------------------------


async def test_persistent_runs_share_the_bound_task_until_it_is_deleted(
    engine: Engine, fake: FakeRunnerType
) -> None:
    schedule = await engine.create(spec(fake.config(), HOURLY, mode="persistent"))
    first = await wait_status(engine.db, (await engine.run_now(schedule.id)).id, "succeeded")
    bound = (await fetch_schedule(engine.db, schedule.id)).task_id
    assert bound is not None and first.task_id == bound

    second = await wait_status(engine.db, (await engine.run_now(schedule.id)).id, "succeeded")
    assert second.task_id == bound

    async with engine.db.session() as session:
        await session.execute(delete(Task).where(Task.id == bound))
    third = await wait_status(engine.db, (await engine.run_now(schedule.id)).id, "succeeded")
    assert third.task_id is not None and third.task_id != bound
    assert (await fetch_schedule(engine.db, schedule.id)).task_id == third.task_id
    async with engine.db.session(write=False) as session:
        task = await session.get(Task, third.task_id)
    assert task is not None and task.schedule_id == schedule.id
    assert [call.task_id for call in fake.default.calls] == [bound, bound, third.task_id]


async def test_isolated_runs_get_fresh_tasks_in_a_stable_workdir(
    engine: Engine, fake: FakeRunnerType
) -> None:
    schedule = await engine.create(spec(fake.config(), HOURLY))
    first = await wait_status(engine.db, (await engine.run_now(schedule.id)).id, "succeeded")
    second = await wait_status(engine.db, (await engine.run_now(schedule.id)).id, "succeeded")
    assert first.task_id is not None and second.task_id is not None
    assert first.task_id != second.task_id
    workdirs = {call.workdir for call in fake.default.calls}
    assert workdirs == {engine.workdir(schedule).resolve()}
    assert (await fetch_schedule(engine.db, schedule.id)).task_id is None


# -- delete, pause, cancel ----------------------------------------------------------------


async def test_schedule_deleted_while_its_run_is_queued(
    make_engine: MakeEngine, fake: FakeRunnerType
) -> None:
    engine = make_engine(concurrency=1, lease=ROOMY_LEASE)
    fake.script("long", [sleep(30)])
    blocker_schedule = await engine.create(spec(fake.config("long"), HOURLY, name="blocker"))
    blocker = await engine.run_now(blocker_schedule.id)
    await wait_status(engine.db, blocker.id, "running")

    doomed_schedule = await engine.create(spec(fake.config(), HOURLY, name="doomed"))
    queued = await engine.run_now(doomed_schedule.id)

    async def leased() -> bool:
        return (await fetch_run(engine.db, queued.id)).lease_owner == OWNER

    await wait_for(leased, what="queued run claimed")
    await engine.schedules.delete(doomed_schedule.id, None)
    # Deleting the blocker's schedule stops its running run too (through the heartbeat).
    await engine.schedules.delete(blocker_schedule.id, None)
    stopped = await wait_status(engine.db, blocker.id, "cancelled", "succeeded", "failed")
    assert (stopped.status, stopped.reason) == ("cancelled", "schedule_deleted")

    # The loop is still alive and serves other schedules; the queued run never ran.
    other = await engine.create(spec(fake.config(), HOURLY, name="other"))
    after = await wait_status(engine.db, (await engine.run_now(other.id)).id, "succeeded")
    assert after.status == "succeeded"
    ended = await fetch_run(engine.db, queued.id)
    assert (ended.status, ended.reason) == ("cancelled", "schedule_deleted")
    assert ended.error == "its schedule was deleted"
    assert queued.id not in {call.run_id for call in fake.default.calls}
    assert engine.loop.healthy


async def test_due_times_inside_a_pause_are_skipped_rows_not_runs(
    engine: Engine, fake: FakeRunnerType
) -> None:
    schedule = await engine.create(spec(fake.config(), misfire_grace_seconds=1))

    def one_done(runs: list[Run]) -> bool:
        return any(r.status == "succeeded" for r in runs)

    await wait_for(runs_where(engine.db, schedule.id, one_done), what="a first run")
    await engine.schedules.pause(schedule.id, "maintenance", None)
    paused_at = datetime.now(UTC)
    await asyncio.sleep(1.3)  # at least one due time passes while paused
    resumed_at = datetime.now(UTC)
    await engine.schedules.resume(schedule.id, None)

    def ran_after_resume(runs: list[Run]) -> bool:
        return any(r.due_at and r.due_at > resumed_at and r.status == "succeeded" for r in runs)

    runs = await wait_for(runs_where(engine.db, schedule.id, ran_after_resume), what="resumed")
    inside = [r for r in runs if r.due_at and paused_at < r.due_at <= resumed_at]
    # The due times of the pause are on the timeline, accounted for, and none of them ran.
    assert inside, "a due time inside the pause has no row"
    assert {(r.status, r.reason, r.attempt, r.started_at) for r in inside} == {
        ("skipped", "paused", 0, None)
    }
    ran = {call.run_id for call in fake.default.calls}
    assert not ran & {r.id for r in inside}


async def test_a_run_claimed_before_pause_is_skipped(
    make_engine: MakeEngine, fake: FakeRunnerType
) -> None:
    engine = make_engine(start=False)
    first_due = datetime.now(UTC) + timedelta(seconds=5)
    trigger = {"every_seconds": 60, "start_at": first_due.isoformat()}
    schedule = await engine.create(spec(fake.config(), trigger))
    claim = await engine.ledger.claim_due_jobs(first_due + timedelta(seconds=1))
    assert [(run.schedule_id, run.due_at) for run in claim.runs] == [(schedule.id, first_due)]
    await engine.schedules.pause(schedule.id, None, None)

    decision = (await engine.ledger.admit([claim.runs[0]]))[0]
    assert decision.action == "done"
    run = await fetch_run(engine.db, claim.runs[0].id)
    assert (run.status, run.reason) == ("skipped", "paused")
    assert run.attempt == 0 and run.lease_owner is None
    assert fake.default.calls == []


async def test_cancel_a_running_run_locally_and_through_the_heartbeat(
    make_engine: MakeEngine, fake: FakeRunnerType
) -> None:
    engine = make_engine(lease=ROOMY_LEASE)
    runner = fake.script("long", [sleep(30)])
    schedule = await engine.create(spec(fake.config("long"), HOURLY))
    here = await engine.run_now(schedule.id)
    elsewhere = await engine.run_now(schedule.id)
    for run in (here, elsewhere):
        await wait_status(engine.db, run.id, "running")

    await engine.runs.cancel(here.id, None)
    engine.loop.cancel_local(here.id)  # the API in this process
    await engine.runs.cancel(elsewhere.id, None)  # the API of another replica: no local call

    for run in (here, elsewhere):
        ended = await wait_status(engine.db, run.id, "cancelled", "succeeded", "failed")
        assert ended.status == "cancelled"
        assert (ended.reason, ended.error) == ("cancel_requested", "cancelled on request")
        assert ended.lease_owner is None and ended.finished_at is not None
    assert sorted(runner.cancelled) == sorted([(here.id, "cancel"), (elsewhere.id, "cancel")])


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


@pytest.mark.parametrize("stopped_by", ["cancel", "cancel_other", "timeout"])
async def test_a_stopped_run_keeps_what_its_agent_printed(
    make_engine: MakeEngine, stopped_by: str
) -> None:
    engine = make_engine(lease=ROOMY_LEASE)
    fields: dict[str, Any] = {"overlap": "cancel_other"} if stopped_by == "cancel_other" else {}
    if stopped_by == "timeout":
        fields["timeout_seconds"] = 2
    schedule = await engine.create(spec(PRINTS_THEN_WORKS, HOURLY, **fields))
    first = await engine.run_now(schedule.id)
    printed = engine.workdir(schedule) / "printed"

    async def has_printed() -> bool:
        return printed.exists()

    await wait_for(has_printed, 10, "the agent printed its lines")
    if stopped_by == "cancel":
        await engine.runs.cancel(first.id, None)  # what POST /api/v1/runs/{id}/cancel does
        engine.loop.cancel_local(first.id)
    elif stopped_by == "cancel_other":
        await engine.run_now(schedule.id)
    ended = await wait_status(engine.db, first.id, "cancelled", "timed_out", "succeeded", within=10)
    assert ended.status == ("timed_out" if stopped_by == "timeout" else "cancelled")
    # A cancelled run keeps what its agent printed; a timed-out one keeps nothing of its
    # half-finished work, so channels that ask for timed_out never deliver it (promise 8).
    assert ended.output == (None if stopped_by == "timeout" else "step one\nstep two\n")
    assert ended.error == (
        "timed out after 2 s" if stopped_by == "timeout" else "cancelled on request"
    )


# -- leases -------------------------------------------------------------------------------


async def test_an_expired_lease_is_continued_with_the_same_run_and_task(
    make_engine: MakeEngine, fake: FakeRunnerType
) -> None:
    runner = fake.script("resume", [succeed("resumed")])
    engine = make_engine(start=False)
    schedule = await engine.create(spec(fake.config("resume"), HOURLY))
    started = datetime.now(UTC) - timedelta(seconds=30)
    task_id, run_id = uuid.uuid4(), uuid.uuid4()
    workdir = engine.workdir(schedule)
    async with engine.db.session() as session:
        session.add(
            Task(
                id=task_id,
                schedule_id=schedule.id,
                owner="local",
                workdir=str(workdir),
                conversation=[],
                lock_run_id=run_id,
                created_at=started,
                updated_at=started,
            )
        )
        session.add(
            Run(
                id=run_id,
                schedule_id=schedule.id,
                trigger="manual",
                status="running",
                attempt=1,
                task_id=task_id,
                payload={
                    "name": "engine test",
                    "prompt": "carry on",
                    "runner": fake.config("resume"),
                    "notify": [],
                    "timeout_seconds": 60,
                    "max_attempts": 3,
                },
                created_at=started,
                available_at=started,
                started_at=started,
                lease_owner="crashed-replica",
                lease_expires_at=datetime.now(UTC) - timedelta(seconds=1),
                cancel_requested=False,
            )
        )

    engine.loop.start()
    run = await wait_status(engine.db, run_id, "succeeded", "failed")
    assert run.status == "succeeded" and run.output == "resumed"
    assert run.attempt == 2
    assert run.task_id == task_id
    assert run.started_at == started
    assert [(c.run_id, c.attempt, c.task_id, c.prompt) for c in runner.calls] == [
        (run_id, 2, task_id, "carry on")
    ]
    assert runner.calls[0].workdir == workdir


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


# -- shutdown -----------------------------------------------------------------------------


async def test_stop_releases_a_long_run_for_another_engine(
    make_engine: MakeEngine, fake: FakeRunnerType
) -> None:
    first = make_engine(drain_timeout=0.1, lease=ROOMY_LEASE)
    runner = fake.script("long-then-quick", [sleep(30), succeed("continued elsewhere")])
    schedule = await first.create(spec(fake.config("long-then-quick"), HOURLY))
    queued = await first.run_now(schedule.id)
    running = await wait_status(first.db, queued.id, "running")

    await first.loop.stop()
    released = await fetch_run(first.db, queued.id)
    assert released.status == "pending"
    assert released.lease_owner is None and released.lease_expires_at is None
    assert released.reason == "released"
    assert runner.cancelled == [(queued.id, "shutdown")]

    second = make_engine("engine-b")
    done = await wait_status(second.db, queued.id, "succeeded", "failed")
    assert done.status == "succeeded" and done.output == "continued elsewhere"
    assert done.attempt == 2
    assert done.task_id == running.task_id  # the saved task is reused
    assert done.started_at == running.started_at  # started_at stays the first start
    assert runner.attempts(queued.id) == [1, 2]


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


# -- delivery -----------------------------------------------------------------------------


async def test_file_channel_gets_one_line_per_succeeded_run(
    engine: Engine, fake: FakeRunnerType
) -> None:
    fake.script("mixed", [succeed("first"), permanent("nope"), succeed("third")])
    notify = [{"type": "file", "path": "out/runs.jsonl"}]
    schedule = await engine.create(spec(fake.config("mixed"), HOURLY, notify=notify, name="digest"))
    runs = []
    for _ in range(3):
        queued = await engine.run_now(schedule.id)
        runs.append(await wait_status(engine.db, queued.id, "succeeded", "failed"))
    assert [r.status for r in runs] == ["succeeded", "failed", "succeeded"]

    async def delivered(run: Run) -> list[Delivery] | None:
        rows = await deliveries_of(engine.db, run.id)
        return rows if rows and rows[0].status != "pending" else None

    for run in (runs[0], runs[2]):
        rows = await wait_for(lambda run=run: delivered(run), 5, "delivery")  # type: ignore[misc]
        assert [(d.index, d.channel, d.status, d.attempts) for d in rows] == [
            (0, "file", "delivered", 1)
        ]
        assert rows[0].target == "file:out/runs.jsonl"
    assert await deliveries_of(engine.db, runs[1].id) == []

    path = engine.workdir(schedule) / "out" / "runs.jsonl"
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    assert [line["run"]["id"] for line in lines] == [str(runs[0].id), str(runs[2].id)]
    assert [line["run"]["output"] for line in lines] == ["first", "third"]
    assert all(line["type"] == "run.finished" for line in lines)
    assert lines[0]["schedule"] == {"id": str(schedule.id), "name": "digest"}
    assert lines[0]["run"]["status"] == "succeeded"


# -- resilience ---------------------------------------------------------------------------
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
    rows = [
        schedule_values(
            now,
            name=f"burst {i}",
            trigger=trigger,
            next_run=now,
            runner=fake.config("broken" if i % 5 == 0 else DEFAULT_SCRIPT),
        )
        for i in range(200)
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
