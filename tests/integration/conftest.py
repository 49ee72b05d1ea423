"""Fixtures of the in-process engine tests (see engine_kit.py)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from agentcron.core.ledger.sql import SqlRunStore
from agentcron.core.runners import register_runner_type
from agentcron.core.runners.fake import FakeRunnerType
from agentcron.core.runs import RunService
from agentcron.core.schedules.service import ScheduleService
from agentcron.core.storage.database import Database
from agentcron.web.engine.loop import SchedulerLoop
from tests.integration.engine_kit import LEASE, OWNER, TICK, Engine, MakeEngine
from tests.integration.test_webhook import Receiver, new_secret


@pytest.fixture
def fake() -> FakeRunnerType:
    runner_type = FakeRunnerType()
    register_runner_type(runner_type)
    return runner_type


@pytest.fixture
async def make_engine(
    db: Database, tmp_path: Path, fake: FakeRunnerType
) -> AsyncIterator[MakeEngine]:
    loops: list[SchedulerLoop] = []

    def make(
        owner: str = OWNER,
        *,
        concurrency: int = 4,
        drain_timeout: float = 0.5,
        tick: float = TICK,
        start: bool = True,
        allow_private: bool = False,
        lease: float = LEASE,
        liveness: bool = False,
        log_runs: str = "summary",
    ) -> Engine:
        ledger = SqlRunStore(db, owner=owner, lease_seconds=lease, data_dir=tmp_path / "data")
        loop = SchedulerLoop(
            ledger,
            concurrency=concurrency,
            tick_seconds=tick,
            drain_timeout=drain_timeout,
            retry_base=0.05,
            allow_private=allow_private,
            liveness=liveness,
            log_runs=log_runs,
        )
        ledger.on_change = loop.wake
        loops.append(loop)
        if start:
            loop.start()
        schedules = ScheduleService(db, on_change=loop.wake, allow_private=allow_private)
        runs = RunService(db, on_change=loop.wake)
        return Engine(db, ledger, loop, schedules, tmp_path / "data", runs)

    try:
        yield make
    finally:
        for loop in loops:
            if loop.running:
                await loop.stop()


@pytest.fixture
async def engine(make_engine: MakeEngine) -> Engine:
    return make_engine()


# A webhook receiver on loopback, shared by the webhook and delivery-recovery tests.
@pytest.fixture
def secret() -> str:
    return new_secret()


@pytest.fixture
def receiver(secret: str) -> Iterator[Receiver]:
    server = Receiver(secret).start()
    try:
        yield server
    finally:
        server.stop()
