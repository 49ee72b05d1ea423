"""A host's own PostgreSQL database: agentcron's tables in a schema of their own
(``database_schema``), or a start refused with the clash named when they would meet the host's.

The host's database here is a new one holding the host's own ``runs`` and ``tasks`` tables (a
host keeps a ``Task`` model of its own), as a host's would before agentcron arrives.
"""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path
from typing import Any

import asyncpg
import pytest
from sqlalchemy.engine import make_url

import agentcron
from agentcron.core.clock import utcnow
from agentcron.core.errors import StartupError
from agentcron.core.retention import RetentionPolicy, prune_runs, take_turn
from agentcron.core.storage.database import Database
from agentcron.core.storage.migrate import upgrade
from agentcron.core.storage.wakeups import announce_change, listen
from agentcron.web.api.hosting import ConfigurationError
from tests.conftest import _dsn, pg_url_for, run_sql
from tests.integration.engine_kit import wait_for
from tests.integration.test_library import OWNER, engine_for, finished, handler_schedule

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
    await run_sql(url, HOST_TABLES)
    return url


async def fetch(url: str, query: str, *args: Any) -> list[tuple[Any, ...]]:
    conn = await asyncpg.connect(_dsn(url), timeout=10)
    try:
        return [tuple(row) for row in await conn.fetch(query, *args)]
    finally:
        await conn.close()


async def tables(url: str, schema: str) -> set[str]:
    """The tables of ``schema`` in the database at ``url``."""
    query = "SELECT table_name FROM information_schema.tables WHERE table_schema = $1"
    return {name for (name,) in await fetch(url, query, schema)}


async def host_rows(url: str) -> dict[str, list[tuple[Any, ...]]]:
    return {
        "runs": await fetch(url, "SELECT id, note FROM public.runs ORDER BY id"),
        "tasks": await fetch(url, "SELECT id, title FROM public.tasks ORDER BY id"),
    }


def handled(ctx: object) -> str:
    return "ok"


SPEC = handler_schedule(name="every second", trigger={"every_seconds": 1})


@pytest.mark.parametrize("name", ["Jobs", "1jobs", "pg_jobs", "jobs-x", 'x"; DROP', "j" * 44])
def test_a_schema_name_agentcron_does_not_take_is_refused_naming_the_setting(name: str) -> None:
    with pytest.raises(ConfigurationError, match=r"^setting database_schema: .* is not a schema"):
        agentcron.Engine(database_url="postgresql://u@localhost/db", database_schema=name)


def test_sqlite_refuses_a_schema_rather_than_ignore_it(tmp_path: Path) -> None:
    with pytest.raises(ConfigurationError, match="^setting database_schema: SQLite has no schemas"):
        agentcron.Engine(database_url=f"sqlite:///{tmp_path}/x.db", database_schema="jobs")
    # Empty is unset (AGENTCRON_DATABASE_SCHEMA= in an env file).
    assert agentcron.Engine(database_url=f"sqlite:///{tmp_path}/x.db", database_schema="")


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
    await run_sql(url, "CREATE TABLE alembic_version (version_num varchar(32) PRIMARY KEY);")
    await run_sql(url, "INSERT INTO alembic_version VALUES ('a1b2c3d4e5f6');")
    for migrate in (True, False):
        engine = engine_for(url, tmp_path, handled, migrate=migrate)
        with pytest.raises(StartupError) as refused:
            await engine.start()
        message = refused.value.message
        assert "a1b2c3d4e5f6" in message and "database_schema" in message, message
    assert await tables(url, "public") == {"alembic_version"}


# "user" is also an SQL keyword: the name is quoted wherever agentcron writes it.
@pytest.mark.parametrize("schema", ["agentcron", "user"])
async def test_in_a_schema_of_its_own_agentcron_runs_beside_the_hosts_tables(
    host_url: str, tmp_path: Path, schema: str
) -> None:
    engine = engine_for(host_url, tmp_path, handled, migrate=True, database_schema=schema)
    async with engine:
        schedule = await engine.schedules.create(SPEC, OWNER)
        runs = await finished(engine, schedule.id, 2)
    assert {run.trigger for run in runs} == {"schedule"}
    assert all(run.status == "succeeded" and run.output == "ok" for run in runs)
    ours = await tables(host_url, schema)
    assert {"alembic_version", "schedules", "runs", "tasks", "deliveries"} <= ours
    assert await tables(host_url, "public") == {"runs", "tasks"}
    assert await host_rows(host_url) == HOST_ROWS
    # Started again without migrating: the schema's own stamp says it is at head.
    again = engine_for(host_url, tmp_path, handled, database_schema=schema)
    async with again:
        page = await again.runs.list_runs(schedule.id, OWNER, limit=50)
        assert len(page.items) >= 2


async def test_two_installations_in_two_schemas_never_meet(host_url: str, tmp_path: Path) -> None:
    # The same instance id in both: only the schema tells their locks apart.
    same: dict[str, Any] = {"migrate": True, "instance_id": "replica-0"}
    one, two = (
        engine_for(host_url, tmp_path / schema, handled, database_schema=schema, **same)
        for schema in ("team_one", "team_two")
    )
    async with one, two:
        # Both hold their liveness lock: neither waits on the other's.
        for engine in (one, two):
            assert engine.loop is not None
            liveness = engine.loop.liveness
            assert liveness is not None
            await wait_for(liveness.changed.wait, 10, "the liveness lock")
            assert liveness.held
        schedule = await one.schedules.create(SPEC, OWNER)
        await finished(one, schedule.id, 1)
        assert (await two.schedules.list(OWNER, limit=50)).items == []
        assert (await one.schedules.list(OWNER, limit=50)).items != []


async def two_schemas(url: str) -> tuple[Database, Database]:
    """Two installations migrated into schemas ``team_one`` and ``team_two`` of ``url``."""
    for schema in ("team_one", "team_two"):
        await asyncio.to_thread(upgrade, url, schema=schema)
    return Database(url, schema="team_one"), Database(url, schema="team_two")


async def test_a_change_in_one_schema_wakes_no_listener_of_another(host_url: str) -> None:
    one, two = await two_schemas(host_url)
    woken: list[str] = []
    stopped = asyncio.Event()
    listening = asyncio.create_task(
        listen(two, lambda: woken.append("two"), stopped, asyncio.sleep)
    )
    try:
        await wait_for(lambda: asyncio.sleep(0, woken), 10, "the listener")  # woken on connect
        woken.clear()
        async with one.session() as session:
            await announce_change(one, session)
        await asyncio.sleep(0.5)
        assert woken == []
        async with two.session() as session:
            await announce_change(two, session)
        await wait_for(lambda: asyncio.sleep(0, woken), 10, "its own schema's wake-up")
    finally:
        stopped.set()
        await listening
        await one.dispose()
        await two.dispose()


async def test_retention_takes_turns_only_within_one_schema(host_url: str) -> None:
    one, two = await two_schemas(host_url)
    again = Database(host_url, schema="team_one")
    try:
        async with one.session() as session:
            assert await take_turn(one, session)  # team_one's pass is under way
            assert not (await prune_runs(two, utcnow(), RetentionPolicy())).yielded
            assert (await prune_runs(again, utcnow(), RetentionPolicy())).yielded
    finally:
        for db in (one, two, again):
            await db.dispose()


async def test_a_role_that_may_not_create_schemas_is_told_so_and_uses_one_made_for_it(
    empty_pg: str, tmp_path: Path
) -> None:
    role = f"agentcron_role_{uuid.uuid4().hex[:8]}"
    await run_sql(pg_url_for(empty_pg), f'CREATE ROLE "{role}" LOGIN')
    try:
        url = make_url(pg_url_for(empty_pg)).set(username=role).render_as_string(False)
        engine = engine_for(url, tmp_path, handled, migrate=True, database_schema="jobs")
        with pytest.raises(StartupError) as refused:
            await engine.start()
        message = refused.value.message
        assert 'cannot create the schema "jobs"' in message and "AUTHORIZATION" in message
        # An administrator makes it, as the message says: the role migrates into it.
        await run_sql(pg_url_for(empty_pg), f'CREATE SCHEMA jobs AUTHORIZATION "{role}"')
        async with engine_for(url, tmp_path, handled, migrate=True, database_schema="jobs"):
            pass
        assert "runs" in await tables(url, "jobs")
    finally:
        drop = f'DROP SCHEMA IF EXISTS jobs CASCADE; DROP OWNED BY "{role}"; DROP ROLE "{role}"'
        await run_sql(pg_url_for(empty_pg), drop)
