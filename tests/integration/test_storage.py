"""Storage behaves the same on SQLite and PostgreSQL: aware UTC times, the run key, rollback."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import pytest
from sqlalchemy import func, select
from sqlalchemy.exc import IntegrityError, StatementError
from structlog.testing import capture_logs

from agentcron.core.errors import SchedulerUnavailable
from agentcron.core.storage.database import Database
from agentcron.core.storage.models import Run, Schedule
from tests.contract.conftest import run_values
from tests.factories import schedule_values


def schedule_row(**overrides: Any) -> Schedule:
    return Schedule(**schedule_values(owner="o", **overrides))


def run_row(schedule_id: uuid.UUID, due_at: datetime | None) -> Run:
    return Run(**run_values(schedule_id, datetime.now(UTC), trigger="schedule", due_at=due_at))


def logged_with_its_traceback(logs: list[dict[str, Any]], error: str) -> bool:
    """One ``database_error`` line naming ``error``, the traceback with it. (Captured, so the
    console renderer does not spend seconds drawing the traceback.)"""
    (line,) = [line for line in logs if line["event"] == "database_error"]
    return line["error"] == error and line["exc_info"] is not None


async def test_datetimes_come_back_aware_utc(db: Database) -> None:
    shanghai = timezone(timedelta(hours=8))
    local = datetime(2026, 3, 1, 8, 0, 0, 123456, tzinfo=shanghai)
    row = schedule_row(next_run=local)
    async with db.session() as session:
        session.add(row)
    async with db.session(write=False) as session:
        stored = await session.scalar(select(Schedule.next_run).where(Schedule.id == row.id))
    assert stored is not None
    assert stored.tzinfo is not None and stored.utcoffset() == timedelta(0)
    assert stored == local
    assert stored.isoformat() == "2026-03-01T00:00:00.123456+00:00"


async def test_time_order_survives_storage(db: Database) -> None:
    base = datetime(2026, 1, 1, tzinfo=UTC)
    # Offsets differ, so a naive text comparison of local times would order these wrongly.
    times = [
        base.astimezone(timezone(timedelta(hours=-5))),
        (base + timedelta(minutes=1)).astimezone(timezone(timedelta(hours=9))),
        base + timedelta(minutes=2),
    ]
    async with db.session() as session:
        session.add_all(schedule_row(next_run=t) for t in times)
    async with db.session(write=False) as session:
        soon = select(Schedule.next_run).where(Schedule.next_run <= base + timedelta(minutes=1))
        due = list(await session.scalars(soon.order_by(Schedule.next_run)))
    assert due == times[:2]


async def test_naive_datetime_is_refused(db: Database) -> None:
    # Refused before it reaches the database; like any failure of the store, it leaves the
    # session as SchedulerUnavailable with SQLAlchemy's error as the cause, logged once.
    with pytest.raises(SchedulerUnavailable) as refused, capture_logs() as logs:
        async with db.session() as session:
            session.add(schedule_row(next_run=datetime(2026, 1, 1)))
    assert isinstance(refused.value.__cause__, StatementError)
    assert logged_with_its_traceback(logs, "StatementError")
    assert "aware" in str(refused.value.__cause__)
    async with db.session(write=False) as session:
        assert await session.scalar(select(func.count()).select_from(Schedule)) == 0


async def test_one_run_per_due_time_is_a_constraint(db: Database) -> None:
    parent = schedule_row()
    due = datetime(2026, 1, 1, 8, tzinfo=UTC)
    async with db.session() as session:
        session.add(parent)
    async with db.session() as session:
        session.add(run_row(parent.id, due))
    with pytest.raises(IntegrityError):
        async with db.session(conflicts=True) as session:
            session.add(run_row(parent.id, due))
    # Unless the caller says it handles one, a broken constraint is a failure like any other.
    with pytest.raises(SchedulerUnavailable) as failed, capture_logs() as logs:
        async with db.session() as session:
            session.add(run_row(parent.id, due))
    assert isinstance(failed.value.__cause__, IntegrityError)
    assert logged_with_its_traceback(logs, "IntegrityError")
    # Manual and replay runs have no due time and may repeat.
    async with db.session() as session:
        session.add_all([run_row(parent.id, None), run_row(parent.id, None)])
    async with db.session(write=False) as session:
        assert await session.scalar(select(func.count()).select_from(Run)) == 3


async def test_failed_unit_of_work_writes_nothing(db: Database) -> None:
    with pytest.raises(RuntimeError):
        async with db.session() as session:
            session.add(schedule_row())
            await session.flush()
            raise RuntimeError("boom")
    async with db.session(write=False) as session:
        assert await session.scalar(select(func.count()).select_from(Schedule)) == 0
