"""Retention on both databases: what the pruner deletes, and what it must never delete."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

from sqlalchemy import func, insert, select

from agentcron.core.config import Settings
from agentcron.core.retention import RetentionPolicy, prune_runs
from agentcron.core.storage.database import Database
from agentcron.core.storage.models import Delivery, Run, Schedule, Task
from agentcron.web.app import create_app
from tests.contract.conftest import add_runs, run_values, task_values
from tests.factories import insert_schedule, schedule_values
from tests.integration.engine_kit import runs_of, set_row, wait_for

NOW = datetime(2026, 6, 1, 12, 0, tzinfo=UTC)
DAY = timedelta(days=1)


def run_row(schedule_id: uuid.UUID, created: datetime, **overrides: Any) -> dict[str, Any]:
    """A scheduled run of ``schedule_id`` due, started and ``succeeded`` at ``created``."""
    at = {"due_at": created, "started_at": created, "finished_at": created}
    values = {"trigger": "schedule", "status": "succeeded", "attempt": 1, **at, **overrides}
    return run_values(schedule_id, created, **values)


async def add_schedule(db: Database, **overrides: Any) -> uuid.UUID:
    return await insert_schedule(db, NOW, **overrides)


async def run_ids(db: Database, schedule_id: uuid.UUID) -> set[uuid.UUID]:
    return {run.id for run in await runs_of(db, schedule_id)}


async def test_old_finished_runs_go_and_the_rest_stay(db: Database) -> None:
    schedule_id = await add_schedule(db)
    old = [run_row(schedule_id, NOW - 40 * DAY + i * timedelta(minutes=1)) for i in range(30)]
    recent = [run_row(schedule_id, NOW - 2 * DAY + i * timedelta(minutes=1)) for i in range(5)]
    await add_runs(db, old + recent)

    report = await prune_runs(db, NOW, RetentionPolicy(days=30, keep_last=3, batch=7))

    assert report.deleted == 30
    assert report.batches >= 5  # small batches, each its own transaction
    assert await run_ids(db, schedule_id) == {row["id"] for row in recent}
    again = await prune_runs(db, NOW, RetentionPolicy(days=30, keep_last=3, batch=7))
    assert again.deleted == 0


async def test_running_pending_and_owed_deliveries_are_never_pruned(db: Database) -> None:
    schedule_id = await add_schedule(db)
    long_ago = NOW - 400 * DAY
    running = run_row(schedule_id, long_ago, status="running", finished_at=None)
    pending = run_row(schedule_id, long_ago + DAY, status="pending", started_at=None)
    owed = run_row(schedule_id, long_ago + 2 * DAY, deliver_until=NOW + DAY)
    done = [run_row(schedule_id, long_ago + (3 + i) * DAY) for i in range(5)]
    newest = run_row(schedule_id, NOW - 50 * DAY)
    await add_runs(db, [running, pending, owed, *done, newest])

    report = await prune_runs(db, NOW, RetentionPolicy(days=30, keep_last=1))

    assert report.deleted == len(done)
    left = await run_ids(db, schedule_id)
    assert left == {running["id"], pending["id"], owed["id"], newest["id"]}


async def test_latest_run_and_keep_last_floor_survive_any_age(db: Database) -> None:
    schedule_id = await add_schedule(db)
    rows = [run_row(schedule_id, NOW - (500 - i) * DAY) for i in range(10)]
    # The schedule's latest *recorded* run is an old one (a manual run finished later, say):
    # it is what the schedule page points at, so it stays.
    latest = rows[2]
    await add_runs(db, rows)
    await set_row(db, Schedule, schedule_id, last_run_id=latest["id"])

    await prune_runs(db, NOW, RetentionPolicy(days=30, keep_last=4))

    newest_four = {row["id"] for row in rows[-4:]}
    assert await run_ids(db, schedule_id) == newest_four | {latest["id"]}


async def test_the_newest_kept_are_the_first_of_the_history(db: Database) -> None:
    """Issue 38: runs a claim wrote at once share created_at; the newest keep_last are the
    ones the history lists first (the latest due times), not those with the greatest ids."""
    schedule_id = await add_schedule(db)
    written = NOW - 400 * DAY
    rows = [
        run_row(schedule_id, written, due_at=written - i * timedelta(minutes=1)) for i in range(10)
    ]
    await add_runs(db, rows)

    await prune_runs(db, NOW, RetentionPolicy(days=30, keep_last=4))

    assert await run_ids(db, schedule_id) == {row["id"] for row in rows[:4]}


async def test_per_schedule_retention_overrides_the_default(db: Database) -> None:
    short = await add_schedule(db, retention_days=2)
    default = await add_schedule(db)
    aged = {
        schedule_id: {age: run_row(schedule_id, NOW - DAY * age) for age in (1, 5, 10, 20, 40)}
        for schedule_id in (short, default)
    }
    await add_runs(db, [row for rows in aged.values() for row in rows.values()])

    await prune_runs(db, NOW, RetentionPolicy(days=30, keep_last=1))

    for schedule_id, kept in ((short, (1,)), (default, (1, 5, 10, 20))):
        assert await run_ids(db, schedule_id) == {aged[schedule_id][age]["id"] for age in kept}


async def test_pruned_runs_take_deliveries_and_orphan_tasks_not_shared_ones(db: Database) -> None:
    shared_task, own_task = uuid.uuid4(), uuid.uuid4()
    schedule_id = await add_schedule(db, mode="persistent", task_id=shared_task)
    old = NOW - 90 * DAY
    async with db.session() as session:
        session.add_all(
            task_values(id, schedule_id, old, "/tmp/x") for id in (shared_task, own_task)
        )
    with_own = run_row(schedule_id, old, task_id=own_task)
    with_shared = run_row(schedule_id, old + DAY, task_id=shared_task)
    replayed = run_row(schedule_id, old + 2 * DAY)
    replay = run_row(
        schedule_id, NOW - DAY, trigger="replay", due_at=None, replay_of=replayed["id"]
    )
    await add_runs(db, [with_own, with_shared, replayed, replay])
    delivered = {"channel": "file", "target": "x", "status": "delivered", "attempts": 1}
    async with db.session() as session:
        at = {"created_at": old, "updated_at": old}
        session.add(Delivery(id=uuid.uuid4(), run_id=with_own["id"], index=0, **delivered, **at))

    report = await prune_runs(db, NOW, RetentionPolicy(days=30, keep_last=1))

    assert report.deleted == 3
    assert report.tasks_deleted == 1
    async with db.session(write=False) as session:
        assert set(await session.scalars(select(Task.id))) == {shared_task}
        assert await session.scalar(select(func.count()).select_from(Delivery)) == 0
        # The replay outlives the run it replayed; it just no longer points at it.
        kept = await session.get(Run, replay["id"])
        assert kept is not None and kept.replay_of is None


async def test_a_pass_ends_when_every_old_row_is_protected(db: Database) -> None:
    # 50 schedules whose whole (old) history is inside keep_last: nothing to delete, and the
    # cursor must still walk past them instead of re-reading the same batch forever.
    schedules = [schedule_values(NOW) for _ in range(50)]
    async with db.session() as session:
        await session.execute(insert(Schedule), schedules)
    ages = [NOW - (300 - i) * DAY for i in range(3)]
    await add_runs(db, [run_row(row["id"], age) for row in schedules for age in ages])

    report = await prune_runs(db, NOW, RetentionPolicy(days=30, keep_last=3, batch=20))

    assert report.deleted == 0
    assert report.examined == 150
    assert report.batches == 8


async def test_the_service_loop_prunes_on_its_interval(db: Database, settings: Settings) -> None:
    # Real time here: the loop's clock is the wall clock, so "old" is relative to now.
    now = datetime.now(UTC)
    schedule_id = await add_schedule(db, enabled=False)
    old = [run_row(schedule_id, now - 60 * DAY + i * timedelta(seconds=1)) for i in range(5)]
    recent = run_row(schedule_id, now - DAY)
    await add_runs(db, [*old, recent])
    tuned = settings.model_copy(
        update={
            "disable_scheduler": False,
            "retention_keep_last": 1,
            "retention_interval_seconds": 0.2,
        }
    )
    app = create_app(tuned)
    async with app.router.lifespan_context(app):

        async def pruned() -> bool:
            return await run_ids(db, schedule_id) == {recent["id"]}

        await wait_for(pruned, within=10, what="the loop's retention pass")
        metrics = app.state.metrics.registry.get_sample_value("agentcron_runs_pruned_total")
        assert metrics == len(old)
