"""``SqlRunStore.claim_due_jobs`` on both databases with an explicit ``now``, for what only SQL
can break: statements per batch, a poison pill beside good schedules, the run key, replicas
at once. What a claim takes and leaves is the contract suite's (tests/contract)."""

from __future__ import annotations

import asyncio
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from sqlalchemy import insert, select, update
from structlog.testing import capture_logs

from agentcron.core import triggers
from agentcron.core.ledger.sql import SqlRunStore
from agentcron.core.ledger.store import Claim
from agentcron.core.storage.database import Database
from agentcron.core.storage.models import Run, Schedule
from tests.factories import schedule_values
from tests.integration.engine_kit import set_row, statements

T0 = datetime(2025, 1, 6, 0, 0, tzinfo=UTC)
S = timedelta(seconds=1)
DUE = T0 + 60 * S  # every schedule below is due here ...
NOW = T0 + 70 * S  # ... and claimed 10 s later, well inside the 60 s misfire grace
RUNNER = {"type": "command", "argv": ["true"]}


def schedule_rows(count: int, every: int = 60) -> list[dict[str, Any]]:
    trigger = triggers.trigger_to_dict(triggers.IntervalTrigger(every_seconds=every, start_at=T0))
    return [
        schedule_values(T0, name=f"bulk {i}", trigger=trigger, runner=RUNNER, next_run=DUE)
        for i in range(count)
    ]


async def add_schedules(db: Database, count: int) -> list[uuid.UUID]:
    rows = schedule_rows(count)
    async with db.session() as session:
        await session.execute(insert(Schedule), rows)
    return [row["id"] for row in rows]


async def all_runs(db: Database) -> list[Run]:
    async with db.session(write=False) as session:
        return list((await session.execute(select(Run))).scalars())


def doubled(runs: list[Run]) -> int:
    """How many runs repeat a (schedule, due time) another run has."""
    return len(runs) - len({(run.schedule_id, run.due_at) for run in runs})


def fixed(now: datetime) -> Any:
    return lambda: now


async def test_claims_1200_due_schedules_in_batches_with_constant_statements(
    db: Database,
) -> None:
    ids = await add_schedules(db, 1200)
    ledger = SqlRunStore(db, owner="replica-a", lease_seconds=30, clock=fixed(NOW))

    claims: list[Claim] = []
    per_batch: list[int] = []
    for _ in range(5):
        with statements(db.engine) as sent:
            claim = await ledger.claim_due_jobs(NOW, limit=500)
        claims.append(claim)
        per_batch.append(len(sent))
        if not claim.full:
            break

    assert [len(c.runs) for c in claims] == [500, 500, 200]
    assert [c.full for c in claims] == [True, True, False]
    # The same five statements per batch, whatever its size and on both databases, never one
    # per schedule: the select, the runs' insert, their tasks', the schedules' advance and the
    # look for runs nobody holds.
    # SQLite's BEGIN IMMEDIATE is a statement of its own.
    assert max(per_batch) <= 5 + (db.capabilities.dialect == "sqlite"), per_batch

    claimed = [run for c in claims for run in c.runs]
    assert len({run.id for run in claimed}) == 1200
    assert {run.schedule_id for run in claimed} == set(ids)
    # Each run's due time, status and lease: contract::
    # test_a_claim_makes_one_run_per_due_time_and_moves_the_timetable.

    runs = await all_runs(db)
    assert len(runs) == 1200
    assert {run.id for run in runs} == {run.id for run in claimed}
    assert all(run.payload["runner"] == RUNNER for run in runs)
    async with db.session(write=False) as session:
        next_runs = set((await session.execute(select(Schedule.next_run))).scalars())
    assert next_runs == {T0 + 120 * S}  # advanced past now, on the grid

    # Claiming again at the same instant finds nothing and writes nothing.
    with statements(db.engine) as sent:
        again = await ledger.claim_due_jobs(NOW, limit=500)
    assert again.runs == [] and not again.full
    assert not [s for s in sent if s.lstrip().upper().startswith("INSERT")]
    assert len(await all_runs(db)) == 1200


async def test_an_unplannable_schedule_is_taken_off_the_timetable_not_the_claim(
    db: Database,
) -> None:
    """A schedule whose stored trigger no longer reads (a poison pill) must not fail the claim
    of the schedules due beside it: it leaves the timetable (``next_run`` NULL), they run."""
    ids = await add_schedules(db, 3)
    await set_row(db, Schedule, ids[1], trigger={"kind": "nonsense"})
    ledger = SqlRunStore(db, owner="replica-a", clock=fixed(NOW))
    with capture_logs() as logs:  # captured: the console would spend seconds on the traceback
        claim = await ledger.claim_due_jobs(NOW)
    assert sorted(run.schedule_id for run in claim.runs) == sorted([ids[0], ids[2]])
    (logged,) = [line for line in logs if line["event"] == "schedule_unplannable"]
    assert logged["schedule_id"] == str(ids[1]) and logged["exc_info"] is True
    async with db.session(write=False) as session:
        next_runs = dict((await session.execute(select(Schedule.id, Schedule.next_run))).all())
    assert next_runs == {ids[0]: T0 + 120 * S, ids[1]: None, ids[2]: T0 + 120 * S}
    assert len(await all_runs(db)) == 2
    # The next claim finds nothing left due.
    assert (await ledger.claim_due_jobs(NOW)).runs == []


async def test_a_stale_next_run_never_doubles_a_due_time(db: Database) -> None:
    # A replica that planned from an old next_run (say, a clock behind) must not create a
    # second run for a due time that already has one: the UNIQUE constraint decides.
    ids = await add_schedules(db, 3)
    ledger = SqlRunStore(db, owner="replica-a", clock=fixed(NOW))
    first = await ledger.claim_due_jobs(NOW)
    assert len(first.runs) == 3
    async with db.session() as session:
        await session.execute(update(Schedule).values(next_run=DUE))
    second = await ledger.claim_due_jobs(NOW)
    assert second.runs == []
    runs = await all_runs(db)
    assert sorted(run.schedule_id for run in runs) == sorted(ids)
    assert doubled(runs) == 0


@pytest.mark.parametrize("backend", ["postgresql"])  # replicas share a database only there
async def test_concurrent_replicas_claim_disjoint_runs(db: Database) -> None:
    await add_schedules(db, 1200)
    other_db = Database(db.url)
    try:
        ledgers = [
            SqlRunStore(db, owner="replica-a", clock=fixed(NOW)),
            SqlRunStore(other_db, owner="replica-b", clock=fixed(NOW)),
        ]

        async def drain(ledger: SqlRunStore) -> list[Run]:
            got: list[Run] = []
            while True:
                claim = await ledger.claim_due_jobs(NOW, limit=100)
                got.extend(claim.runs)
                if not claim.runs and not claim.full:
                    return got

        a, b = await asyncio.gather(*(drain(ledger) for ledger in ledgers))
    finally:
        await other_db.dispose()

    ids_a, ids_b = {run.id for run in a}, {run.id for run in b}
    assert len(ids_a) == len(a) and len(ids_b) == len(b)
    assert ids_a.isdisjoint(ids_b)
    runs = await all_runs(db)
    assert len(runs) == 1200
    assert ids_a | ids_b == {run.id for run in runs}
    owners = {run.id: run.lease_owner for run in runs}
    assert all(owners[i] == "replica-a" for i in ids_a)
    assert all(owners[i] == "replica-b" for i in ids_b)
    assert doubled(runs) == 0
