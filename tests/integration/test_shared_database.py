"""A host's own PostgreSQL database: agentcron's tables in a schema of their own
(``database_schema``), or a start refused with the clash named when they would meet the host's.

The host's database here is a new one holding the host's own ``runs`` and ``tasks`` tables (a
host keeps a ``Task`` model of its own), as a host's would before agentcron arrives.
"""

from __future__ import annotations

from pathlib import Path

import asyncpg
import pytest

from agentcron.core.errors import StartupError
from agentcron.core.specs import ScheduleCreate
from tests.conftest import _dsn, pg_url_for
from tests.integration.test_library import OWNER, engine_for, finished

HOST_TABLES = """
CREATE TABLE runs (id serial PRIMARY KEY, note text NOT NULL);
CREATE TABLE tasks (id serial PRIMARY KEY, title text NOT NULL);
INSERT INTO runs (note) VALUES ('the host''s run');
INSERT INTO tasks (title) VALUES ('the host''s task');
"""
HOST_ROWS = {"runs": [(1, "the host's run")], "tasks": [(1, "the host's task")]}


@pytest.fixture
async def host_url(empty_pg: str) -> str:
    """A database that already holds the host's own ``runs`` and ``tasks`` (public schema)."""
    url = pg_url_for(empty_pg)
    await _sql(url, HOST_TABLES)
    return url


async def _sql(url: str, statement: str) -> None:
    conn = await asyncpg.connect(_dsn(url), timeout=10)
    try:
        await conn.execute(statement)
    finally:
        await conn.close()


async def tables(url: str, schema: str) -> set[str]:
    """The tables of ``schema`` in the database at ``url``."""
    conn = await asyncpg.connect(_dsn(url), timeout=10)
    try:
        rows = await conn.fetch(
            "SELECT table_name FROM information_schema.tables WHERE table_schema = $1", schema
        )
    finally:
        await conn.close()
    return {row["table_name"] for row in rows}


async def host_rows(url: str) -> dict[str, list[tuple[int, str]]]:
    conn = await asyncpg.connect(_dsn(url), timeout=10)
    try:
        runs = await conn.fetch("SELECT id, note FROM public.runs ORDER BY id")
        tasks = await conn.fetch("SELECT id, title FROM public.tasks ORDER BY id")
    finally:
        await conn.close()
    return {"runs": [tuple(row) for row in runs], "tasks": [tuple(row) for row in tasks]}


def handled(ctx: object) -> str:
    return "ok"


SPEC = ScheduleCreate(
    name="every second", prompt="p", trigger={"every_seconds": 1}, runner={"type": "handler"}
)


@pytest.mark.parametrize("migrate", [True, False])
async def test_the_hosts_own_tables_refuse_the_start_naming_them(
    host_url: str, tmp_path: Path, migrate: bool
) -> None:
    engine = engine_for(host_url, tmp_path, handled, migrate=migrate)
    with pytest.raises(StartupError) as refused:
        await engine.start()
    message = refused.value.message
    assert "runs, tasks" in message and "database_schema" in message, message
    assert "\n" not in message
    assert await tables(host_url, "public") == {"runs", "tasks"}  # nothing of agentcron's
    assert await host_rows(host_url) == HOST_ROWS


async def test_another_tools_migration_stamp_is_not_taken_for_agentcrons(
    empty_pg: str, tmp_path: Path
) -> None:
    # The host migrates with Alembic too: its alembic_version holds its own revision.
    url = pg_url_for(empty_pg)
    await _sql(url, "CREATE TABLE alembic_version (version_num varchar(32) PRIMARY KEY);")
    await _sql(url, "INSERT INTO alembic_version VALUES ('a1b2c3d4e5f6');")
    for migrate in (True, False):
        engine = engine_for(url, tmp_path, handled, migrate=migrate)
        with pytest.raises(StartupError) as refused:
            await engine.start()
        message = refused.value.message
        assert "a1b2c3d4e5f6" in message and "database_schema" in message, message
    assert await tables(url, "public") == {"alembic_version"}


async def test_in_a_schema_of_its_own_agentcron_runs_beside_the_hosts_tables(
    host_url: str, tmp_path: Path
) -> None:
    engine = engine_for(host_url, tmp_path, handled, migrate=True, database_schema="agentcron")
    async with engine:
        schedule = await engine.schedules.create(SPEC, OWNER)
        runs = await finished(engine, schedule.id, 2)
    assert {run.trigger for run in runs} == {"schedule"}
    assert all(run.status == "succeeded" and run.output == "ok" for run in runs)
    assert {"alembic_version", "schedules", "runs", "tasks", "deliveries"} <= await tables(
        host_url, "agentcron"
    )
    assert await tables(host_url, "public") == {"runs", "tasks"}
    assert await host_rows(host_url) == HOST_ROWS
    # Started again without migrating: the schema's own stamp says it is at head.
    again = engine_for(host_url, tmp_path, handled, database_schema="agentcron")
    async with again:
        page = await again.runs.list_runs(schedule.id, OWNER, limit=50)
        assert len(page.items) >= 2
