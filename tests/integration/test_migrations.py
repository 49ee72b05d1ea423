"""Migrations are the only schema path: a fresh database at head matches the models exactly."""

from __future__ import annotations

import asyncio
from typing import Any

from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from sqlalchemy import Connection, inspect
from sqlalchemy.ext.asyncio import create_async_engine

from agentcron.core.storage.database import Database
from agentcron.core.storage.migrate import current_revision, head_revision, upgrade
from agentcron.core.storage.models import Base
from tests.conftest import pg_url_for


def _diff(connection: Connection) -> list[Any]:
    context = MigrationContext.configure(connection, opts={"compare_type": True})
    return list(compare_metadata(context, Base.metadata))


def _partial(connection: Connection) -> dict[str, str]:
    """The runs table's partial indexes, by name, with their condition as reflected."""
    return {
        index["name"]: str(index["dialect_options"]["postgresql_where"])
        for index in inspect(connection).get_indexes("runs")
        if "postgresql_where" in index.get("dialect_options", {})
    }


def _tables(connection: Connection) -> set[str]:
    return set(inspect(connection).get_table_names())


def _at_head(connection: Connection) -> None:
    """The schema is the models' exactly, and every table of agentcron's is there."""
    assert _diff(connection) == []
    assert {"schedules", "runs", "tasks", "deliveries", "alembic_version"} <= _tables(connection)


async def test_upgrade_head_matches_models(backend: str, db_url: str) -> None:
    # The SQLite database is a copy of one migrated from empty (tests/conftest.py).
    engine = create_async_engine(db_url)
    try:
        async with engine.connect() as conn:
            await conn.run_sync(_at_head)
    finally:
        await engine.dispose()


async def test_upgrade_creates_the_sqlite_directory(tmp_path: Any) -> None:
    # `make run` on a bare machine: ./var does not exist yet when `agentcron migrate` runs.
    url = f"sqlite+aiosqlite:///{tmp_path / 'not' / 'yet' / 'agentcron.db'}"
    await asyncio.to_thread(upgrade, url)
    assert (tmp_path / "not" / "yet" / "agentcron.db").exists()


async def test_upgrade_into_a_schema_matches_models_and_keeps_its_stamp_there(
    empty_pg: str,
) -> None:
    # AGENTCRON_DATABASE_SCHEMA: the schema is made, and everything of agentcron's is in it.
    url = pg_url_for(empty_pg)
    await asyncio.to_thread(upgrade, url, schema="agentcron")
    db, plain = Database(url, schema="agentcron"), Database(url)
    try:
        async with db.engine.connect() as conn:
            await conn.run_sync(_at_head)
            # Only the rows their queries look for (0011): a finished run leaves the first.
            partial = await conn.run_sync(_partial)
            assert sorted(partial) == [
                "ix_runs_deliver_until",
                "ix_runs_replay_of",
                "ix_runs_status_available",
            ]
            assert "pending" in partial["ix_runs_status_available"]
            assert "running" in partial["ix_runs_status_available"]
        assert await current_revision(db) == head_revision()
        async with plain.engine.connect() as conn:  # the connection's own search_path: nothing
            assert await conn.run_sync(_tables) == set()
    finally:
        await db.dispose()
        await plain.dispose()
