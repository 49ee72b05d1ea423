"""The active-schedule limit (``AGENTCRON_MAX_ACTIVE_SCHEDULES``) under concurrent writers, on
SQLite and PostgreSQL.

What an operator relies on: however many replicas create, apply, resume, enable or reconcile at
once, no more schedules are ever active than the limit allows, and a write the limit refuses
leaves nothing behind (a reconcile refused applies none of its records). Each test runs two
services, each on its own ``Database`` (its own engine and pool), on one database, as two
replicas do, and has them race several rounds.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable
from contextlib import asynccontextmanager
from typing import Any

from sqlalchemy import func, select, update

from agentcron.core.errors import ScheduleCapacityExceeded
from agentcron.core.schedules.service import ScheduleService
from agentcron.core.specs import ScheduleCreate, ScheduleUpdate
from agentcron.core.storage.database import Database
from agentcron.core.storage.models import Schedule
from tests.integration.test_schedule_keys import record

LIMIT = 2
ROUNDS = 5


@asynccontextmanager
async def replicas(db_url: str) -> AsyncIterator[tuple[ScheduleService, ScheduleService]]:
    """Two services with the limit ``LIMIT``, each on a database engine of its own."""
    first, second = Database(db_url), Database(db_url)
    try:
        yield ScheduleService(first, max_active=LIMIT), ScheduleService(second, max_active=LIMIT)
    finally:
        await first.dispose()
        await second.dispose()


async def active(service: ScheduleService) -> int:
    async with service.context.db.session(write=False) as session:
        count = await session.scalar(
            select(func.count())
            .select_from(Schedule)
            .where(Schedule.enabled.is_(True), Schedule.deleted_at.is_(None))
        )
    return count or 0


async def clear(service: ScheduleService) -> None:
    """Delete every schedule, so the next round starts with none active."""
    async with service.context.db.session() as session:
        await session.execute(
            update(Schedule)
            .where(Schedule.deleted_at.is_(None))
            .values(deleted_at=service.context.clock(), enabled=False, next_run=None)
        )


async def race(*writes: Awaitable[Any]) -> list[Any]:
    """The writes at once; what each returned, or the capacity refusal it raised."""
    results = await asyncio.gather(*writes, return_exceptions=True)
    for result in results:
        if isinstance(result, BaseException) and not isinstance(result, ScheduleCapacityExceeded):
            raise result
    return results


def refused(results: list[Any]) -> int:
    return sum(isinstance(result, ScheduleCapacityExceeded) for result in results)


def spec(**overrides: Any) -> ScheduleCreate:
    return ScheduleCreate.model_validate(record(**overrides))


async def test_concurrent_creates_and_applies_never_pass_the_limit(db_url: str) -> None:
    async with replicas(db_url) as (a, b):
        for round in range(ROUNDS):
            results = await race(
                a.create(spec(), "host"),
                b.create(spec(), "host"),
                a.apply("host", f"r{round}:a", record()),
                b.apply("host", f"r{round}:b", record()),
            )
            assert await active(a) == LIMIT, f"round {round}"
            assert refused(results) == 4 - LIMIT, f"round {round}"
            await clear(a)


async def test_concurrent_resumes_and_enabling_edits_never_pass_the_limit(db_url: str) -> None:
    async with replicas(db_url) as (a, b):
        for round in range(ROUNDS):
            paused = [await a.create(spec(enabled=False), "host") for _ in range(4)]
            enable = ScheduleUpdate.model_validate({"enabled": True})
            results = await race(
                a.resume(paused[0].id, "host"),
                b.resume(paused[1].id, "host"),
                a.update(paused[2].id, enable, "host"),
                b.apply("host", f"r{round}", record()),  # a new key: a create
                b.update(paused[3].id, enable, "host"),
            )
            assert await active(a) == LIMIT, f"round {round}"
            assert refused(results) == 5 - LIMIT, f"round {round}"
            await clear(a)


async def test_of_two_concurrent_reconciles_past_the_limit_one_applies_all_the_other_none(
    db_url: str,
) -> None:
    async with replicas(db_url) as (a, b):
        for round in range(ROUNDS):
            records = {f"deploy:{n}": record() for n in range(LIMIT)}
            results = await race(
                a.reconcile("first", records, scope="deploy:"),
                b.reconcile("second", records, scope="deploy:"),
            )
            assert refused(results) == 1, f"round {round}"
            assert await active(a) == LIMIT, f"round {round}"
            # The refused reconcile left none of its records behind.
            for owner in ("first", "second"):
                page = await a.list(owner)
                assert len(page.items) in (0, LIMIT), f"round {round}: {owner} half applied"
            await clear(a)


async def test_a_reconcile_that_swaps_records_at_the_limit_is_not_refused(db_url: str) -> None:
    # At the limit, a reconcile that replaces one active record by another ends at the limit:
    # the record it drops must not count against the one it adds.
    async with replicas(db_url) as (a, _):
        await a.reconcile("host", {"deploy:1": record(), "deploy:2": record()}, scope="deploy:")
        done = await a.reconcile(
            "host", {"deploy:2": record(), "deploy:3": record()}, scope="deploy:"
        )
        assert (done.created, done.deleted) == (["deploy:3"], ["deploy:1"])
        assert await active(a) == LIMIT


async def test_a_reconcile_racing_edits_and_resumes_of_its_own_schedules_never_deadlocks(
    db_url: str,
) -> None:
    # Each write takes its turn at the limit before any schedule's row, so a reconcile that
    # holds its rows and a resume or an edit that holds one of them never wait for each other
    # (PostgreSQL would end one of them with a deadlock error, a 500 to its caller).
    async with replicas(db_url) as (a, b):
        enable = ScheduleUpdate.model_validate({"enabled": True})
        for round in range(ROUNDS):
            paused = {f"deploy:{n}": record(enabled=False) for n in range(3)}
            await a.reconcile("host", paused, scope="deploy:")
            ids = [(await a.get_by_key("host", key)).id for key in sorted(paused)]
            results = await race(
                b.reconcile("host", {**paused, "deploy:0": record()}, scope="deploy:"),
                a.update(ids[0], enable, "host"),
                b.resume(ids[1], "host"),
                a.update(ids[2], enable, "host"),
                a.resume(ids[0], "host"),
            )
            # The reconcile pauses again what the others enabled before it, so how many end
            # active depends on the order; that they all finished, and within the limit, not.
            assert len(results) == 5 and await active(a) <= LIMIT, f"round {round}"
            await clear(a)
