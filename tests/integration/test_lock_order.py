"""The lock order every write that locks several rows takes (core/ledger/store.py): runs in id
order, then their schedules, then tasks; a write that holds a schedule first never waits for
one of its runs. Only PostgreSQL has row locks to break it (SQLite's writer lock serialises),
so these run there, each with another transaction holding the rows a deadlock would need."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Awaitable
from datetime import timedelta
from pathlib import Path
from typing import Any, TypeVar

import pytest
from sqlalchemy import select, text

from agentcron.core import triggers
from agentcron.core.ledger.sql import SqlRunStore
from agentcron.core.schedules.service import ScheduleService
from agentcron.core.storage.database import Database
from agentcron.core.storage.models import Run, Schedule, Task
from agentcron.core.tasks import delete_task
from tests.contract.conftest import DUE, NOW, T0, add_runs, run_values, task_values
from tests.factories import insert_schedule
from tests.integration.engine_kit import fetch_run, set_row

T = TypeVar("T")
pytestmark = pytest.mark.parametrize("backend", ["postgresql"])


async def add(db: Database, **overrides: Any) -> uuid.UUID:
    trigger = triggers.trigger_to_dict(triggers.IntervalTrigger(every_seconds=60, start_at=T0))
    return await insert_schedule(db, T0, **{"trigger": trigger, "next_run": DUE, **overrides})


async def add_pending(db: Database, like: Run, owner: str, run_id: uuid.UUID | None = None) -> Run:
    """A manual run of ``like``'s schedule, pending and leased to ``owner``."""
    leased: dict[str, Any] = {"lease_owner": owner, "lease_expires_at": NOW + timedelta(seconds=30)}
    row = run_values(like.schedule_id, id=run_id or uuid.uuid4(), payload=like.payload, **leased)
    await add_runs(db, [row])
    return await fetch_run(db, row["id"])


def store(db: Database, tmp_path: Path) -> SqlRunStore:
    return SqlRunStore(
        db, owner="replica-a", lease_seconds=30, data_dir=tmp_path, clock=lambda: NOW
    )


async def lock_then(db: Database, *statements: Any) -> Any:
    """A connection in a transaction of its own, holding the rows ``statements`` lock."""
    holder = await db.engine.connect()
    await holder.begin()
    for statement in statements:
        await holder.execute(statement)
    return holder


async def take_within(holder: Any, statement: Any) -> None:
    """Lock one more row, as a write that holds the first ones would (a deadlock would hang
    here, so it must come within 2 s), then commit and let go."""
    await holder.execute(text("SET LOCAL lock_timeout = '2s'"))
    await holder.execute(statement)
    await holder.commit()
    await holder.close()


async def waits_for_the_holder(holder: Any, write: Awaitable[T], then: Any) -> T:
    """``write`` waits for the rows ``holder`` locks, holding none ``then`` needs: the holder
    takes ``then`` too, lets go, and the write goes on."""
    task = asyncio.ensure_future(write)
    await asyncio.sleep(0.5)  # the write is now waiting for the holder
    assert not task.done()
    await take_within(holder, then)
    return await asyncio.wait_for(task, 10)


def run_lock(run_id: uuid.UUID) -> Any:
    return select(Run.id).where(Run.id == run_id).with_for_update()


def schedule_lock(schedule_id: uuid.UUID) -> Any:
    return select(Schedule.id).where(Schedule.id == schedule_id).with_for_update()


async def test_an_admission_locks_its_runs_before_their_schedules(
    db: Database, tmp_path: Path
) -> None:
    """A record holds a run and then locks its schedule; an admission of that run waiting for
    it must not hold the schedule meanwhile."""
    schedule_id = await add(db)
    me = store(db, tmp_path)
    (run,) = (await me.claim_due_jobs(NOW)).runs
    holder = await lock_then(db, run_lock(run.id))
    (decision,) = await waits_for_the_holder(holder, me.admit([run]), schedule_lock(schedule_id))
    assert decision.action == "run"


async def test_a_deletion_never_waits_for_a_run_while_it_holds_the_schedule(
    db: Database, tmp_path: Path
) -> None:
    """It ends the runs nobody holds at once and leaves the others to their admission
    (pending) or their lease renewal (running)."""
    schedule_id = await add(db)
    me = store(db, tmp_path)
    (running,) = (await me.claim_due_jobs(NOW, start=1)).runs
    held, free = [await add_pending(db, running, me.owner) for _ in range(2)]
    holder = await lock_then(db, *(run_lock(id) for id in sorted([running.id, held.id])))
    await asyncio.wait_for(ScheduleService(db, clock=lambda: NOW).delete(schedule_id, None), 10)
    await take_within(holder, schedule_lock(schedule_id))
    ended = await fetch_run(db, free.id)
    assert (ended.status, ended.reason) == ("cancelled", "schedule_deleted")
    (decision,) = await me.admit([held])
    assert decision.run is not None
    assert (decision.action, decision.run.reason) == ("done", "schedule_deleted")
    # Its end is recorded as any run of a deleted schedule's is:
    # contract::test_a_cancelled_attempt_says_why_it_stopped.
    assert await me.renew_leases(NOW) == {running.id: True}


async def test_cancel_other_never_waits_for_the_run_it_stops(db: Database, tmp_path: Path) -> None:
    """An admission under ``cancel_other`` holds the schedule when it asks the running run to
    stop; it skips the run a record holds, and asks again at its next look."""
    schedule_id = await add(db, overlap="cancel_other")
    me = store(db, tmp_path)
    (first,) = (await me.claim_due_jobs(NOW)).runs
    assert (await me.admit([first]))[0].action == "run"
    second = await add_pending(db, first, me.owner)
    holder = await lock_then(db, run_lock(first.id))
    (decision,) = await asyncio.wait_for(me.admit([second]), 10)
    assert decision.action == "wait"
    await take_within(holder, schedule_lock(schedule_id))
    assert (await me.renew_leases(NOW))[first.id] is False  # skipped while it was held
    assert (await me.admit([second]))[0].action == "wait"  # the next look asks it
    assert (await me.renew_leases(NOW))[first.id] is True


async def test_a_release_locks_its_runs_in_id_order(db: Database, tmp_path: Path) -> None:
    """Giving back queued runs at shutdown races the heartbeat's renewal of the same runs,
    which locks them in id order; the release must too, whatever order its scan finds them."""
    await add(db)
    me = store(db, tmp_path)
    (first,) = (await me.claim_due_jobs(NOW)).runs
    ids = sorted(uuid.uuid4() for _ in range(3))
    for run_id in reversed(ids):  # stored highest id first: a scan meets it first
        await add_pending(db, first, me.owner, run_id)
    holder = await lock_then(db, run_lock(ids[0]))  # the lowest id: the release holds none
    await waits_for_the_holder(holder, me.release(ids), run_lock(ids[2]))
    assert {(await fetch_run(db, run_id)).lease_owner for run_id in ids} == {None}


async def test_a_task_deletion_locks_its_schedule_before_the_task(
    db: Database, tmp_path: Path
) -> None:
    """An admission holds its run, then its schedule, then the schedule's task; deleting
    that task must take the schedule before the task too."""
    schedule_id = await add(db, mode="persistent", overlap="skip")
    task_id = uuid.uuid4()
    async with db.session() as session:
        session.add(task_values(task_id, schedule_id, NOW, str(tmp_path)))
    await set_row(db, Schedule, schedule_id, task_id=task_id)
    holder = await lock_then(db, schedule_lock(schedule_id))
    task_lock = select(Task.id).where(Task.id == task_id).with_for_update()
    await waits_for_the_holder(holder, delete_task(db, task_id, None), task_lock)
    async with db.session(write=False) as session:
        assert await session.get(Task, task_id) is None
