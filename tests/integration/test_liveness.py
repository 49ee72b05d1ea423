"""Liveness (core.storage.liveness): a dead engine is known by its vanished database session,
not by a lease running out; on SQLite a restarted engine continues its predecessor's runs at
its first claim.

PostgreSQL: the holder's session is closed (the process is gone) or terminated by the server
(``pg_terminate_backend``); the other ledger's one idle statement reports the owner lockless,
and its claim takes the run over at once, a 30-s lease notwithstanding.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
import structlog
from sqlalchemy import text

from agentcron.core.clock import DatabaseClock
from agentcron.core.ledger.sql import SqlRunStore
from agentcron.core.ledger.store import Outcome
from agentcron.core.runners.fake import FakeRunnerType, succeed
from agentcron.core.storage.database import Database
from agentcron.core.storage.liveness import CONFIRM_SECONDS, WATCH_SECONDS, Liveness, Suspects
from agentcron.core.storage.models import Run
from agentcron.web.engine.loop import SchedulerLoop
from tests.conftest import PgServer, clone_pg
from tests.integration.engine_kit import (
    MakeEngine,
    deliveries_of,
    fetch_run,
    wait_for,
    wait_status,
)
from tests.integration.test_clock import add_schedule
from tests.integration.test_leases import STEPS, command_started, read_steps, wait_state
from tests.integration.test_webhook import Receiver

pg_only = pytest.mark.parametrize("backend", ["postgresql"])
sqlite_only = pytest.mark.parametrize("backend", ["sqlite"])


async def running_under(
    db: Database, ledger: SqlRunStore, runner: dict[str, object], **overrides: Any
) -> Run:
    """A run of a new schedule, claimed and started by ``ledger`` (lease 30 s)."""
    await add_schedule(db, ledger.clock() - timedelta(milliseconds=100), runner=runner, **overrides)
    (run,) = (await ledger.claim_due_jobs(ledger.clock())).runs
    decision = (await ledger.admit([run]))[0]
    assert decision.action == "run" and decision.run is not None
    return decision.run


async def holder_pid(db: Database, owner: str) -> int | None:
    """The backend holding ``owner``'s liveness lock, found the way the engine looks for it."""
    statement = text(
        "SELECT pid FROM pg_locks WHERE locktype = 'advisory' AND objsubid = 1 AND granted"
        " AND ((classid::int8 << 32) | objid::int8) = hashtextextended('agentcron:' || :o, 0)"
    )
    async with db.session(write=False) as session:
        pid = (await session.execute(statement, {"o": owner})).scalar()
    return int(pid) if pid is not None else None


@asynccontextmanager
async def holding(
    db: Database, owner: str, lock_db: Database | None = None
) -> AsyncIterator[tuple[SqlRunStore, asyncio.Task[None]]]:
    """A ledger of ``owner`` (lease 30 s, on the database's clock) whose liveness lock is held
    on ``lock_db`` (else ``db``), and the task keeping it: cancelled, its session is gone."""
    clock = DatabaseClock()
    await clock.measure(db)
    holder = SqlRunStore(db, owner=owner, lease_seconds=30, clock=clock)
    liveness = Liveness(lock_db or db, owner)
    keeping = asyncio.create_task(liveness.keep())
    try:
        await wait_for(lambda: asyncio.sleep(0, liveness.held), within=5, what="the lock")
        yield holder, keeping
    finally:
        keeping.cancel()
        await asyncio.gather(keeping, return_exceptions=True)


@pg_only
async def test_the_same_owners_lock_in_another_database_does_not_vouch_for_its_runs(
    db: Database, fake: FakeRunnerType, pg_server: PgServer | None
) -> None:
    # Two installations on one server, one database each, whose engines share an instance id
    # (replica-0 in both): pg_locks shows both databases' locks, an advisory lock is one's.
    elsewhere = Database(await clone_pg(pg_server))
    owner = f"replica-{uuid.uuid4().hex[:6]}"
    try:
        async with holding(db, owner, lock_db=elsewhere) as (holder, _):
            other = SqlRunStore(db, owner="other", lease_seconds=30, clock=holder.clock)
            await running_under(db, holder, fake.config())  # its engine here is gone
            assert (await other.next_wakeup(liveness=True)).lockless == {holder.owner}
    finally:
        await elsewhere.dispose()
        assert pg_server is not None
        await pg_server.give_back(elsewhere.url)


@pg_only
async def test_a_vanished_session_makes_its_owner_dead_and_its_runs_taken_at_once(
    db: Database, fake: FakeRunnerType
) -> None:
    async with holding(db, f"holder-{uuid.uuid4().hex[:6]}") as (holder, keeping):
        clock = holder.clock
        other = SqlRunStore(db, owner="other", lease_seconds=30, clock=clock)
        run = await running_under(db, holder, fake.config())
        alive = await other.next_wakeup(liveness=True)
        assert alive.watching and alive.lockless == frozenset()
        # Named dead by mistake, a live owner keeps its runs: the claim checks the lock again.
        assert (await other.claim_due_jobs(clock(), dead={holder.owner})).runs == []
        assert await holder_pid(db, holder.owner) is not None

        keeping.cancel()  # the process is gone: its connection closes with it
        await asyncio.gather(keeping, return_exceptions=True)
        gone = time.monotonic()
        suspects = Suspects()
        dead: frozenset[str] = frozenset()
        while not dead:
            wakeup = await other.next_wakeup(liveness=True)
            dead = suspects.observe(wakeup.lockless, time.monotonic())
            assert time.monotonic() - gone < 2, "the dead owner was not noticed within 2 s"
            await asyncio.sleep(0.05)
        assert dead == {holder.owner}
        assert time.monotonic() - gone >= CONFIRM_SECONDS  # seen twice, not once

        claim = await other.claim_due_jobs(clock(), dead=dead)
        assert [taken.id for taken in claim.runs] == [run.id] and claim.recovered == 1
        before = run.attempt
        decision = (await other.admit([run]))[0]
        assert decision.action == "run" and decision.run is not None
        assert decision.run.attempt == before + 1 == 2
        assert decision.run.task_id == run.task_id
        assert (await fetch_run(db, run.id)).lease_owner == "other"
        print(f"\nliveness: owner dead and run taken {time.monotonic() - gone:.2f} s after")


async def finished_with_a_delivery_owed(
    db: Database, ledger: SqlRunStore, url: str, secret: str
) -> Run:
    """A run ``ledger`` ran and recorded ``succeeded``, its webhook delivery leased to it for
    30 s and not made: the state its process leaves when it dies right after recording."""
    notify = [{"type": "webhook", "url": url, "secret": secret}]
    run = await running_under(
        db, ledger, {"type": "python", "callable": "os:getcwd"}, notify=notify
    )
    (done,) = await ledger.record([Outcome(run, "succeeded", output="five bullets")])
    assert done is not None and done.deliverer == ledger.owner
    assert done.deliver_until is not None and done.deliver_until > ledger.clock()
    return done


async def delivered(db: Database, receiver: Receiver, run: Run) -> bool:
    """The run's one delivery made, and its delivery lease cleared."""
    return bool(receiver.requests) and (await fetch_run(db, run.id)).deliver_until is None


@pg_only
async def test_a_vanished_deliverers_deliveries_are_taken_at_once(
    db: Database, make_engine: MakeEngine, receiver: Receiver, secret: str
) -> None:
    async with holding(db, f"holder-{uuid.uuid4().hex[:6]}") as (holder, keeping):
        run = await finished_with_a_delivery_owed(db, holder, receiver.url(), secret)
        with structlog.testing.capture_logs() as logs:
            make_engine("other", lease=30, liveness=True, allow_private=True)
            # Alive, the holder keeps its deliveries: the other engine watches and takes none.
            await asyncio.sleep(2 * WATCH_SECONDS + CONFIRM_SECONDS)
            assert receiver.requests == []
            keeping.cancel()  # the process is gone: its connection closes with it
            await asyncio.gather(keeping, return_exceptions=True)
            gone = time.monotonic()
            await wait_for(lambda: delivered(db, receiver, run), within=20, what="the delivery")
        took = time.monotonic() - gone
    print(f"\nliveness: a dead deliverer's delivery made {took:.2f} s after it vanished")
    # Well inside its 30-s delivery lease: taken because the session was gone, not the lease.
    assert took < 10
    assert [request.headers["webhook-id"] for request in receiver.requests] == [f"{run.id}.0"]
    (delivery,) = await deliveries_of(db, run.id)
    assert (delivery.status, delivery.attempts) == ("delivered", 1)
    recovered = [entry for entry in logs if entry["event"] == "deliveries_recovered"]
    assert sum(entry["runs"] for entry in recovered) == 1
    after = await fetch_run(db, run.id)
    assert (after.status, after.deliverer) == ("succeeded", None)


@sqlite_only
async def test_a_restarted_engine_continues_its_predecessors_runs_at_its_first_claim(
    db: Database, tmp_path: Path, fake: FakeRunnerType, receiver: Receiver, secret: str
) -> None:
    """Its attempt left running and a delivery it owed are both taken at the first look."""
    # The predecessor's attempt is only written (admitted), never played: the successor's is
    # the script's first.
    fake.script("long", [succeed("continued")])
    predecessor = SqlRunStore(db, owner="predecessor", lease_seconds=30, data_dir=tmp_path)
    run = await running_under(db, predecessor, fake.config("long"))
    owed = await finished_with_a_delivery_owed(db, predecessor, receiver.url(), secret)
    # The predecessor died here (its leases have 30 s to go); its successor starts.
    successor = SqlRunStore(db, owner="successor", lease_seconds=30, data_dir=tmp_path)
    # predecessors=True as web/host.py says for SQLite.
    loop = SchedulerLoop(successor, tick_seconds=30, predecessors=True, allow_private=True)
    began = time.monotonic()
    loop.start()
    try:
        done = await wait_status(db, run.id, "succeeded", within=5)
        await wait_for(lambda: delivered(db, receiver, owed), within=5, what="the delivery")
    finally:
        await loop.stop()
    took = time.monotonic() - began
    print(f"\nsqlite restart: predecessor's run and delivery done {took:.2f} s after start")
    assert done.attempt == 2 and done.task_id == run.task_id and done.output == "continued"
    assert done.started_at == run.started_at  # the first start
    assert done.lease_owner is None or done.lease_owner == "successor"
    assert [request.headers["webhook-id"] for request in receiver.requests] == [f"{owed.id}.0"]
    (delivery,) = await deliveries_of(db, owed.id)
    assert delivery.status == "delivered"


@pg_only
async def test_an_engine_that_loses_its_session_freezes_its_attempts_until_the_lock_is_back(
    make_engine: MakeEngine,
) -> None:
    """Its session ended by the server (``pg_terminate_backend``; the process lives on), the
    engine may have its runs taken within a second: its command agent is frozen at once, and
    thawed once the lock is taken again, on a new session, and a renewal confirms the lease
    still ours; the same attempt finishes."""
    engine = make_engine(start=False, lease=30, liveness=True)
    liveness = engine.loop.liveness
    assert liveness is not None
    with structlog.testing.capture_logs() as lines:
        workdir, queued, pid = await command_started(engine, STEPS)
        backend = await holder_pid(engine.db, engine.ledger.owner)
        assert backend is not None
        async with engine.db.session() as session:
            await session.execute(text("SELECT pg_terminate_backend(:p)"), {"p": backend})
        await wait_state(pid, "T", within=1)  # frozen as soon as the session is gone
        ended = await wait_status(engine.db, queued.id, "succeeded", "failed", within=15)
        again = await holder_pid(engine.db, engine.ledger.owner)  # the lock taken again
    assert again is not None and again != backend
    assert (ended.status, ended.attempt, ended.output) == ("succeeded", 1, "done\n")
    assert read_steps(workdir) == ["1", "2", "3", "4", "5", "6"]
    events = [line for line in lines if line["event"].startswith(("run_", "liveness_"))]
    names = [line["event"] for line in events]
    assert names.count("run_suspended") == 1 and names.count("run_resumed") == 1, names
    suspended = next(line for line in events if line["event"] == "run_suspended")
    assert suspended["cause"] == "liveness lock lost"
    assert names.index("liveness_lost") < names.index("run_suspended")
    assert "run_lease_lost" not in names
