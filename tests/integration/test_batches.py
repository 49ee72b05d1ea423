"""Batched admission and recording (``Ledger.admit_batch``, ``Ledger.record_batch``), on both
databases: every rule ``start_attempt`` and ``finish_attempt`` enforce one run at a time must
hold for a batch too (pause, cancel, lease, failure streak)."""

from __future__ import annotations

import asyncio
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import event, insert, select, text, update

from agentcron.core import triggers
from agentcron.core.ledger import Claim, Ledger, Outcome
from agentcron.core.runners.fake import DEFAULT_SCRIPT, FakeRunnerType, permanent
from agentcron.core.schedules.service import ScheduleService
from agentcron.core.states import TERMINAL
from agentcron.core.storage.database import Database
from agentcron.core.storage.models import Run, Schedule, Task
from agentcron.core.tasks import delete_task
from tests.factories import schedule_values
from tests.integration.engine_kit import MakeEngine, wait_for

T0 = datetime(2025, 1, 6, 0, 0, tzinfo=UTC)
DUE = T0 + timedelta(seconds=60)
NOW = DUE + timedelta(seconds=1)


def fixed(now: datetime) -> Any:
    return lambda: now


async def add(db: Database, **overrides: Any) -> uuid.UUID:
    trigger = triggers.trigger_to_dict(triggers.IntervalTrigger(every_seconds=60, start_at=T0))
    row = schedule_values(T0, trigger=trigger, next_run=DUE, **overrides)
    async with db.session() as session:
        await session.execute(insert(Schedule), [row])
    return uuid.UUID(str(row["id"]))


def ledger(db: Database, tmp_path: Path, owner: str = "replica-a") -> Ledger:
    return Ledger(db, owner=owner, lease_seconds=30, data_dir=tmp_path, clock=fixed(NOW))


def workdir_of(data_dir: Path, schedule_id: uuid.UUID, owner: str = "local") -> str:
    return str(data_dir.resolve() / "tasks" / owner / str(schedule_id))


async def fetch(db: Database, model: Any, id: uuid.UUID) -> Any:
    async with db.session(write=False) as session:
        return await session.get(model, id)


async def test_claim_prepares_independent_runs_only(db: Database, tmp_path: Path) -> None:
    plain = await add(db)
    persistent = await add(db, mode="persistent", overlap="skip")
    guarded = await add(db, overlap="buffer_one")
    claim = await ledger(db, tmp_path).claim_due_jobs(NOW)

    by_schedule = {run.schedule_id: run for run in claim.runs}
    assert set(by_schedule) == {plain, persistent, guarded}
    prepared = by_schedule[plain]
    assert set(claim.prepared) == {prepared.id}
    task = await fetch(db, Task, prepared.task_id)
    assert task is not None and task.schedule_id == plain and task.conversation == []
    assert claim.prepared[prepared.id] == task.workdir == workdir_of(tmp_path, plain)
    # Runs that must look at their schedule's other runs get their task when they start.
    assert by_schedule[persistent].task_id is None and by_schedule[guarded].task_id is None


def prepared(claim: Claim) -> list[tuple[Run, str]]:
    """The claim's prepared runs as ``admit_batch`` takes them: (run, task directory)."""
    return [(run, claim.prepared[run.id]) for run in claim.runs if run.id in claim.prepared]


async def three_running_each(
    db: Database, tmp_path: Path, schedules: int
) -> tuple[Ledger, list[uuid.UUID], dict[uuid.UUID, list[Run]]]:
    """``schedules`` schedules with a failure streak of 5, each with three due times inside
    the misfire grace, claimed and admitted: the ledger, the schedule ids, and each one's
    three running runs in due order."""
    ids = [
        await add(db, consecutive_failures=5, misfire_grace_seconds=3600) for _ in range(schedules)
    ]
    me = ledger(db, tmp_path)
    async with db.session() as session:
        await session.execute(update(Schedule).values(next_run=DUE - timedelta(seconds=120)))
    claim = await me.claim_due_jobs(NOW)
    runs = sorted(claim.runs, key=lambda run: (str(run.schedule_id), run.due_at))
    assert len(runs) == 3 * schedules
    await me.admit_batch([(run, claim.prepared[run.id]) for run in runs])
    return me, ids, {sid: [run for run in runs if run.schedule_id == sid] for sid in ids}


async def test_admit_batch_marks_runs_running_with_one_attempt(
    db: Database, tmp_path: Path
) -> None:
    ids = [await add(db) for _ in range(3)]
    me = ledger(db, tmp_path)
    claim = await me.claim_due_jobs(NOW)
    decisions = await me.admit_batch(prepared(claim))

    for run, decision in zip(claim.runs, decisions, strict=True):
        stored = await fetch(db, Run, run.id)
        assert (stored.status, stored.attempt, stored.started_at) == ("running", 1, NOW)
        assert stored.lease_owner == "replica-a"
        # The decision carries the run as written, and its task with the claim's directory.
        assert decision is not None and decision.action == "run" and decision.run is run
        assert (run.status, run.attempt, run.started_at) == ("running", 1, NOW)
        assert run.lease_expires_at == stored.lease_expires_at
        assert decision.task is not None and decision.task.workdir == claim.prepared[run.id]
    assert {run.schedule_id for run in claim.runs} == set(ids)
    # Admitting again does nothing: the runs are no longer pending.
    assert await me.admit_batch(prepared(claim)[:1]) == [None]


async def add_pending(
    db: Database, like: Run, owner: str, run_id: uuid.UUID | None = None
) -> uuid.UUID:
    """A manual run of ``like``'s schedule, pending and leased to ``owner``."""
    run_id = run_id or uuid.uuid4()
    async with db.session() as session:
        session.add(
            Run(
                id=run_id,
                schedule_id=like.schedule_id,
                trigger="manual",
                status="pending",
                attempt=0,
                payload=like.payload,
                created_at=NOW,
                available_at=NOW,
                lease_owner=owner,
                lease_expires_at=NOW + timedelta(seconds=30),
                cancel_requested=False,
            )
        )
    return run_id


async def test_an_admission_locks_its_runs_before_their_schedules(
    db: Database, tmp_path: Path
) -> None:
    """A record holds a run and then locks its schedule; an admission of that run waiting for
    it must not hold the schedule meanwhile, or neither can go on (a deadlock, seen with three
    replicas on a loaded machine)."""
    if db.capabilities.dialect != "postgresql":
        pytest.skip("row locks are PostgreSQL's (SQLite's writer lock serialises)")
    schedule_id = await add(db)
    me = ledger(db, tmp_path)
    claim = await me.claim_due_jobs(NOW)
    (run,) = claim.runs
    async with db.engine.connect() as holder:
        transaction = await holder.begin()
        await holder.execute(select(Run.id).where(Run.id == run.id).with_for_update())
        admission = asyncio.create_task(me.admit_batch(prepared(claim)))
        await asyncio.sleep(0.5)  # the admission is now waiting for the run
        assert not admission.done()
        # The schedule is free to lock: the admission has not share-locked it while it waits.
        await holder.execute(text("SET LOCAL lock_timeout = '2s'"))
        await holder.execute(
            select(Schedule.id).where(Schedule.id == schedule_id).with_for_update()
        )
        await transaction.commit()
    (decision,) = await asyncio.wait_for(admission, 10)
    assert decision is not None and decision.action == "run"


async def test_a_deletion_never_waits_for_a_run_while_it_holds_the_schedule(
    db: Database, tmp_path: Path
) -> None:
    """A record or an admission holds its runs and then locks their schedule; a deletion
    holds the schedule, so it must not then wait for one of those runs, or neither goes on.
    It ends the runs nobody holds at once and leaves the others to their admission (pending)
    or their lease renewal (running)."""
    if db.capabilities.dialect != "postgresql":
        pytest.skip("row locks are PostgreSQL's (SQLite's writer lock serialises)")
    schedule_id = await add(db)
    me = ledger(db, tmp_path)
    (running,) = (await me.claim_due_jobs(NOW, start=1)).runs
    held, free = [await add_pending(db, running, me.owner) for _ in range(2)]
    service = ScheduleService(db, clock=fixed(NOW))
    async with db.engine.connect() as holder:
        transaction = await holder.begin()
        for run_id in sorted([running.id, held]):
            await holder.execute(select(Run.id).where(Run.id == run_id).with_for_update())
        # Done while another transaction holds two of the schedule's runs.
        await asyncio.wait_for(service.delete(schedule_id, None), 10)
        await holder.execute(text("SET LOCAL lock_timeout = '2s'"))
        await holder.execute(
            select(Schedule.id).where(Schedule.id == schedule_id).with_for_update()
        )
        await transaction.commit()

    ended = await fetch(db, Run, free)
    assert (ended.status, ended.reason) == ("cancelled", "schedule_deleted")
    # The run held at the deletion ends at its admission, the running one is asked to stop.
    decision = await me.start_attempt(held)
    assert decision.run is not None
    assert (decision.action, decision.run.status, decision.run.reason) == (
        "done",
        "cancelled",
        "schedule_deleted",
    )
    assert await me.renew_leases(NOW) == {running.id: True}
    stopped = await me.finish_attempt(running.id, "cancelled")
    assert stopped is not None
    assert (stopped.reason, stopped.error) == ("schedule_deleted", "its schedule was deleted")


async def test_cancel_other_never_waits_for_the_run_it_stops(db: Database, tmp_path: Path) -> None:
    """An admission under ``cancel_other`` holds the schedule when it asks the running run to
    stop; a record holding that run waits for the schedule next. The admission skips it and
    asks again at its next look instead of waiting."""
    if db.capabilities.dialect != "postgresql":
        pytest.skip("row locks are PostgreSQL's (SQLite's writer lock serialises)")
    schedule_id = await add(db, overlap="cancel_other")
    me = ledger(db, tmp_path)
    (first,) = (await me.claim_due_jobs(NOW)).runs
    assert (await me.start_attempt(first.id)).action == "run"
    second = await add_pending(db, first, me.owner)
    async with db.engine.connect() as holder:
        transaction = await holder.begin()
        await holder.execute(select(Run.id).where(Run.id == first.id).with_for_update())
        decision = await asyncio.wait_for(me.start_attempt(second), 10)
        assert decision.action == "wait"
        await holder.execute(text("SET LOCAL lock_timeout = '2s'"))
        await holder.execute(
            select(Schedule.id).where(Schedule.id == schedule_id).with_for_update()
        )
        await transaction.commit()
    assert (await me.renew_leases(NOW))[first.id] is False  # skipped while it was held
    assert (await me.start_attempt(second)).action == "wait"  # the next look asks it
    assert (await me.renew_leases(NOW))[first.id] is True


async def test_a_release_locks_its_runs_in_id_order(db: Database, tmp_path: Path) -> None:
    """Giving back queued runs at shutdown races the heartbeat's renewal of the same runs,
    which locks them in id order; the release must too, whatever order its scan finds them."""
    if db.capabilities.dialect != "postgresql":
        pytest.skip("row locks are PostgreSQL's (SQLite's writer lock serialises)")
    await add(db)
    me = ledger(db, tmp_path)
    (first,) = (await me.claim_due_jobs(NOW)).runs
    ids = sorted(uuid.uuid4() for _ in range(3))
    for run_id in reversed(ids):  # stored highest id first: a scan meets it first
        await add_pending(db, first, me.owner, run_id)
    async with db.engine.connect() as holder:
        transaction = await holder.begin()
        await holder.execute(select(Run.id).where(Run.id == ids[0]).with_for_update())
        release = asyncio.create_task(me.release(ids))
        await asyncio.sleep(0.5)  # the release now waits for the lowest id, holding none
        assert not release.done()
        await holder.execute(text("SET LOCAL lock_timeout = '2s'"))
        await holder.execute(select(Run.id).where(Run.id == ids[2]).with_for_update())
        await transaction.commit()
    await asyncio.wait_for(release, 10)
    for run_id in ids:
        assert (await fetch(db, Run, run_id)).lease_owner is None


async def test_a_task_deletion_locks_its_schedule_before_the_task(
    db: Database, tmp_path: Path
) -> None:
    """An admission holds its run, then its schedule, then the schedule's task; deleting
    that task must take the schedule before the task too, or each waits for the other."""
    if db.capabilities.dialect != "postgresql":
        pytest.skip("row locks are PostgreSQL's (SQLite's writer lock serialises)")
    schedule_id = await add(db, mode="persistent", overlap="skip")
    task_id = uuid.uuid4()
    async with db.session() as session:
        session.add(
            Task(
                id=task_id,
                schedule_id=schedule_id,
                owner="local",
                workdir=workdir_of(tmp_path, schedule_id),
                conversation=[],
                created_at=NOW,
                updated_at=NOW,
            )
        )
        await session.execute(
            update(Schedule).where(Schedule.id == schedule_id).values(task_id=task_id)
        )
    async with db.engine.connect() as holder:
        transaction = await holder.begin()
        await holder.execute(
            select(Schedule.id).where(Schedule.id == schedule_id).with_for_update()
        )
        deletion = asyncio.create_task(delete_task(db, task_id, None))
        await asyncio.sleep(0.5)  # the deletion now waits for the schedule
        assert not deletion.done()
        await holder.execute(text("SET LOCAL lock_timeout = '2s'"))
        await holder.execute(select(Task.id).where(Task.id == task_id).with_for_update())
        await transaction.commit()
    await asyncio.wait_for(deletion, 10)
    assert await fetch(db, Task, task_id) is None
    assert (await fetch(db, Schedule, schedule_id)).task_id is None


async def test_admit_batch_refuses_paused_cancelled_lost_and_changed(
    db: Database, tmp_path: Path
) -> None:
    names = ["ok", "paused", "deleted", "cancelled", "lost", "now_skip"]
    schedules = {name: await add(db, name=name) for name in names}
    me = ledger(db, tmp_path)
    claim = await me.claim_due_jobs(NOW)
    run_of = {run.schedule_id: run.id for run in claim.runs}
    async with db.session() as session:
        sched = Schedule.__table__.c
        await session.execute(
            update(Schedule).where(sched.id == schedules["paused"]).values(enabled=False)
        )
        await session.execute(
            update(Schedule).where(sched.id == schedules["deleted"]).values(deleted_at=NOW)
        )
        await session.execute(
            update(Schedule).where(sched.id == schedules["now_skip"]).values(overlap="skip")
        )
        await session.execute(
            update(Run)
            .where(Run.id == run_of[schedules["cancelled"]])
            .values(cancel_requested=True)
        )
        await session.execute(
            update(Run).where(Run.id == run_of[schedules["lost"]]).values(lease_owner="replica-b")
        )

    by_id = {run.id: run for run in claim.runs}
    order = [
        (by_id[run_of[schedules[name]]], claim.prepared[run_of[schedules[name]]]) for name in names
    ]
    decisions = await me.admit_batch(order)
    assert [d is not None for d in decisions] == [True, False, False, False, False, False]
    for name in names[1:]:
        stored = await fetch(db, Run, run_of[schedules[name]])
        assert (stored.status, stored.attempt) == ("pending", 0), name

    # The one-by-one path then says why each of them does not run (or runs it).
    outcomes = {}
    for name in names[1:]:
        decision = await me.start_attempt(run_of[schedules[name]])
        run = decision.run
        outcomes[name] = (decision.action, *((run.status, run.reason, run.error) if run else ()))
    assert outcomes == {
        "paused": ("done", "skipped", "paused", None),
        "deleted": ("done", "cancelled", "schedule_deleted", "its schedule was deleted"),
        "cancelled": ("done", "cancelled", "cancel_requested", "cancelled on request"),
        "lost": ("lost",),
        "now_skip": ("run", "running", None, None),
    }


async def test_record_batch_ends_runs_and_follows_the_failure_streak(
    db: Database, tmp_path: Path
) -> None:
    me, (streak, reset), of = await three_running_each(db, tmp_path, 2)
    outcomes = [
        Outcome(of[streak][0], "failed", error="e1"),
        Outcome(of[streak][1], "timed_out", error="e2"),
        Outcome(of[reset][0], "failed", error="x1"),
        Outcome(of[reset][1], "succeeded", output="fine"),
        Outcome(of[reset][2], "failed", error="x3"),
    ]
    finished = await me.record_batch(outcomes)
    assert finished == [outcome.run for outcome in outcomes]
    assert [(run.status, run.finished_at, run.lease_owner) for run in finished if run] == [
        (outcome.status, NOW, None) for outcome in outcomes
    ]

    first = await fetch(db, Schedule, streak)
    assert (first.consecutive_failures, first.last_status, first.last_error) == (
        7,
        "timed_out",
        "e2",
    )
    assert first.last_run_id == of[streak][1].id and first.last_run_at == NOW
    second = await fetch(db, Schedule, reset)
    assert (second.consecutive_failures, second.last_status) == (1, "failed")
    assert second.last_run_id == of[reset][2].id
    ok = await fetch(db, Run, of[reset][1].id)
    assert (ok.status, ok.output, ok.finished_at, ok.lease_owner) == (
        "succeeded",
        "fine",
        NOW,
        None,
    )
    # The run left out is still running under its lease.
    left = await fetch(db, Run, of[streak][2].id)
    assert (left.status, left.lease_owner) == ("running", "replica-a")


async def test_record_batch_skips_runs_whose_lease_was_lost(db: Database, tmp_path: Path) -> None:
    schedule = await add(db)
    me = ledger(db, tmp_path)
    claim = await me.claim_due_jobs(NOW)
    run = claim.runs[0]
    await me.admit_batch(prepared(claim))
    async with db.session() as session:
        await session.execute(update(Run).where(Run.id == run.id).values(lease_owner="replica-b"))

    assert await me.record_batch([Outcome(run, "succeeded", "late")]) == [None]
    stored = await fetch(db, Run, run.id)
    assert (stored.status, stored.output) == ("running", None)
    async with db.session(write=False) as session:
        last = await session.scalar(select(Schedule.last_status).where(Schedule.id == schedule))
    assert last is None


async def test_a_schedule_follows_only_the_runs_of_the_batch_still_ours(
    db: Database, tmp_path: Path
) -> None:
    """A batch part of whose runs another replica took meanwhile: the schedule's ``last_*``
    fields and streak follow the runs recorded, not the batch as it was sent (on PostgreSQL
    the one-statement record leaves such a schedule to a second statement)."""
    me, (partly, whole), of = await three_running_each(db, tmp_path, 2)
    taken = of[partly][2]
    async with db.session() as session:
        await session.execute(update(Run).where(Run.id == taken.id).values(lease_owner="replica-b"))

    outcomes = [
        Outcome(of[partly][0], "failed", error="e1"),
        Outcome(of[partly][1], "failed", error="e2"),
        Outcome(taken, "succeeded", output="not ours"),
        *(Outcome(run, "succeeded", output="fine") for run in of[whole]),
    ]
    finished = await me.record_batch(outcomes)
    assert finished == [run if run is not taken else None for run in (o.run for o in outcomes)]

    first = await fetch(db, Schedule, partly)
    assert (first.consecutive_failures, first.last_status, first.last_error) == (7, "failed", "e2")
    assert first.last_run_id == of[partly][1].id
    second = await fetch(db, Schedule, whole)
    assert (second.consecutive_failures, second.last_status) == (0, "succeeded")
    assert second.last_run_id == of[whole][-1].id
    stored = await fetch(db, Run, taken.id)
    assert (stored.status, stored.lease_owner, stored.output) == ("running", "replica-b", None)


async def test_record_batch_is_one_statement_on_postgresql(db: Database, tmp_path: Path) -> None:
    """A batch of any size is one round trip on PostgreSQL: runs, schedules and the breaker's
    reading of the streaks (SQLite sends a statement per step)."""
    if db.capabilities.dialect != "postgresql":
        pytest.skip("the one-statement record is PostgreSQL's")
    for _ in range(3):
        await add(db)
    me = ledger(db, tmp_path)
    claim = await me.claim_due_jobs(NOW)
    await me.admit_batch(prepared(claim))
    sent: list[str] = []

    def count(conn: Any, cursor: Any, statement: str, *args: Any) -> None:
        sent.append(statement)

    for engine in db.engines:  # the ORM sessions' engine and the batched statements' one
        event.listen(engine.sync_engine, "before_cursor_execute", count)
    try:
        finished = await me.record_batch(
            [Outcome(run, "failed", error="boom") for run in claim.runs]
        )
    finally:
        for engine in db.engines:
            event.remove(engine.sync_engine, "before_cursor_execute", count)
    assert all(finished)
    assert len(sent) == 1, sent


async def test_record_batch_keeps_the_tail_of_long_output(db: Database, tmp_path: Path) -> None:
    await add(db)
    me = ledger(db, tmp_path)
    claim = await me.claim_due_jobs(NOW)
    run = claim.runs[0]
    await me.admit_batch(prepared(claim))
    await me.record_batch([Outcome(run, "succeeded", "x" * 100_000 + "END")])
    stored = await fetch(db, Run, run.id)
    assert stored.output.endswith("END") and len(stored.output) == 64 * 1024
    assert run.output == stored.output  # the caller's run is what was written


async def test_record_batch_trips_the_breaker_from_the_schedule_row(
    db: Database, tmp_path: Path
) -> None:
    """The batched record pauses a schedule whose streak reaches ``pause_after_failures``,
    read from the schedule row (not from the run's payload), as the one-by-one record does:
    the last failure says so (reason ``circuit_breaker``) and the schedule's note why."""
    tripping = await add(
        db, consecutive_failures=1, pause_after_failures=3, misfire_grace_seconds=3600
    )
    short = await add(
        db, consecutive_failures=0, pause_after_failures=3, misfire_grace_seconds=3600
    )
    me = ledger(db, tmp_path)
    async with db.session() as session:
        await session.execute(update(Schedule).values(next_run=DUE - timedelta(seconds=60)))
    claim = await me.claim_due_jobs(NOW)
    runs = sorted(claim.runs, key=lambda run: (str(run.schedule_id), run.due_at))
    await me.admit_batch([(run, claim.prepared[run.id]) for run in runs])
    of = {sid: [run for run in runs if run.schedule_id == sid] for sid in (tripping, short)}
    assert len(of[tripping]) == len(of[short]) == 2
    finished = await me.record_batch(
        [Outcome(run, "failed", error=f"boom {i}") for i, run in enumerate(runs)]
    )
    assert all(finished)

    paused = await fetch(db, Schedule, tripping)
    assert (paused.enabled, paused.next_run, paused.paused_at) == (False, None, NOW)
    assert paused.paused_note is not None
    assert "after 3 failed runs in a row (pause_after_failures=3)" in paused.paused_note
    last = of[tripping][-1]
    assert last.reason == "circuit_breaker"
    assert (await fetch(db, Run, last.id)).reason == "circuit_breaker"
    assert (await fetch(db, Run, of[tripping][0].id)).reason is None
    # Two failures of three: still on its timetable.
    going = await fetch(db, Schedule, short)
    assert going.enabled and going.consecutive_failures == 2


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


async def test_the_claim_admits_up_to_the_free_slots(db: Database, tmp_path: Path) -> None:
    """With ``start`` free slots, the claim itself makes that many runs ``running`` (attempt
    1, lease, task), the runs that need no look at others only; the rest are claimed pending,
    admitted later as before."""
    plain = [await add(db, name=f"plain {i}") for i in range(3)]
    guarded = await add(db, name="guarded", overlap="skip")
    me = ledger(db, tmp_path)
    claim = await me.claim_due_jobs(NOW, start=2)

    assert len(claim.runs) == 4 and len(claim.started) == 2
    assert not set(claim.started) & set(claim.prepared)
    by_id = {run.id: run for run in claim.runs}
    for run_id, workdir in claim.started.items():
        run = by_id[run_id]
        assert run.schedule_id in plain
        stored = await fetch(db, Run, run_id)
        assert (stored.status, stored.attempt, stored.started_at) == ("running", 1, NOW)
        assert stored.lease_owner == "replica-a" and stored.lease_expires_at is not None
        assert (run.status, run.attempt, run.started_at) == ("running", 1, NOW)
        task = await fetch(db, Task, stored.task_id)
        assert task is not None and task.workdir == workdir
    waiting = [run for run in claim.runs if run.id not in claim.started]
    assert {run.schedule_id for run in waiting} == {*plain, guarded} - {
        by_id[run_id].schedule_id for run_id in claim.started
    }
    for run in waiting:
        assert ((await fetch(db, Run, run.id)).status, run.attempt) == ("pending", 0)
    # An admitted run is recorded like any other attempt.
    first = by_id[next(iter(claim.started))]
    assert await me.record_batch([Outcome(first, "succeeded", "done")]) == [first]
    assert (await fetch(db, Run, first.id)).status == "succeeded"
