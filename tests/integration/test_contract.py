"""The contract suite (``agentcron.testing``) bound to agentcron's own ``Engine``, on SQLite
and PostgreSQL: what a host running the suite against its engine gets.

The store is this test run's migrated database (``db_url``); the engine runs on a
``SettableClock``, and firing a window moves it from due time to due time while the engine's
own loop claims and runs them.
"""

from __future__ import annotations

from datetime import datetime
from pathlib import Path

import pytest

import agentcron
from agentcron.testing import OWNER, ProviderContract, SettableClock, Store, fire_engine_due_times


class TestEngineContract(ProviderContract):
    @pytest.fixture
    def contract_store(self, db_url: str, tmp_path: Path) -> Store:
        return Store(db_url, tmp_path / "data", migrated=True)

    def make_engine(self, store: Store) -> agentcron.Engine:
        return agentcron.Engine(
            database_url=store.database_url,
            data_dir=store.data_dir,
            migrate=not store.migrated,
            clock=SettableClock(),
            scheduler_tick_seconds=0.2,
            log_format="console",
        )

    async def fire_due_times(
        self, engine: agentcron.Engine, key: str, start: datetime, end: datetime
    ) -> None:
        await fire_engine_due_times(engine, OWNER, key, start, end, self.within)
