"""Shared fixtures: one database per test on SQLite and on PostgreSQL, and an app client that
sends an API key of owner "local".

PostgreSQL tests use ``AGENTCRON_TEST_PG_URL`` (default: the local ``test`` database). A
migrated template database is built once per session; each test gets a database of its own
(a clone, ``CREATE DATABASE ... TEMPLATE``), so tests never see each other's rows. A database
whose test is over, with no session left on it and its schema still the template's, is emptied
and handed to a later test: dropping one costs about 0.25 s (and there are hundreds), emptying
it about a millisecond. SQLite tests copy a migrated file. When PostgreSQL is unreachable its
tests are skipped with the reason, unless ``AGENTCRON_REQUIRE_PG=1``, which turns that into a
failure (CI sets it).
"""

from __future__ import annotations

import asyncio
import logging
import os
import shutil
import uuid
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path

import asyncpg
import httpx
import pytest
import structlog
from fastapi import FastAPI
from sqlalchemy.engine import make_url

from agentcron.core.config import Settings
from agentcron.core.keys import LOCAL_OWNER, create_key
from agentcron.core.storage.database import Database
from agentcron.core.storage.migrate import upgrade
from agentcron.core.storage.models import Base
from agentcron.web.app import create_app
from tests.sandbox import require_bwrap

PG_URL = os.environ.get(
    "AGENTCRON_TEST_PG_URL", "postgresql+asyncpg://postgres@127.0.0.1:5432/test"
)
REQUIRE_PG = os.environ.get("AGENTCRON_REQUIRE_PG", "").lower() in ("1", "true", "yes")
RUN_TAG = f"{os.getpid()}_{uuid.uuid4().hex[:6]}"
# The python runner admits only listed modules: the test fixtures' and the throwaway modules
# tests write (agentcron_tmp_<hex>). Tests of the list itself set their own.
os.environ["AGENTCRON_PYTHON_MODULES"] = "tests,agentcron_tmp_*"


# The agents every test app declares (core.policy): tests/agents.toml.
TEST_AGENTS = Path(__file__).parent / "agents.toml"


def _dsn(url: str) -> str:
    """The asyncpg DSN of a SQLAlchemy URL."""
    return make_url(url).set(drivername="postgresql").render_as_string(hide_password=False)


def pg_url_for(database: str) -> str:
    return make_url(PG_URL).set(database=database).render_as_string(hide_password=False)


async def run_sql(url: str, statement: str) -> None:
    """Run ``statement`` on the PostgreSQL database at ``url`` (a SQLAlchemy URL)."""
    conn = await asyncpg.connect(_dsn(url), timeout=10)
    try:
        await conn.execute(statement)
    finally:
        await conn.close()


# What must match the template's for a used database to be handed on: every column and index
# of the public schema and the migration stamp (a test that migrates down or alters a table
# leaves a database that is dropped instead).
_SHAPE = """
SELECT (SELECT string_agg(table_name || '.' || column_name || ':' || data_type || ':'
                          || coalesce(column_default, ''), ',' ORDER BY table_name, column_name)
        FROM information_schema.columns WHERE table_schema = 'public')
    || '|' || (SELECT coalesce(string_agg(indexdef, ',' ORDER BY indexdef), '')
               FROM pg_indexes WHERE schemaname = 'public')
    || '|' || (SELECT coalesce(string_agg(version_num, ','), '') FROM alembic_version)
"""
_OTHERS = "SELECT count(*) FROM pg_stat_activity WHERE datname = $1 AND pid <> pg_backend_pid()"


class PgServer:
    """Creates the per-test databases of this run, empties used ones for later tests, and
    drops them all at the end."""

    def __init__(self) -> None:
        self.template = f"agentcron_tmpl_{RUN_TAG}"
        self.created: list[str] = []
        self._free: list[str] = []
        self._shape: str | None = None
        self._counter = 0

    async def clone(self) -> str:
        if self._free:
            return pg_url_for(self._free.pop())
        self._counter += 1
        name = f"agentcron_t_{RUN_TAG}_{self._counter}"
        await run_sql(PG_URL, f'CREATE DATABASE "{name}" TEMPLATE "{self.template}"')
        self.created.append(name)
        return pg_url_for(name)

    async def give_back(self, url: str) -> None:
        """Empty the database of a finished test and keep it for the next one; leave it to the
        final drop when anything of the test remains (a session, a changed schema)."""
        name = make_url(url).database
        assert name is not None
        if self._shape is None:
            self._shape = await self._read_shape(self.template)
        conn = await asyncpg.connect(_dsn(url), timeout=5)
        try:
            if await conn.fetchval(_OTHERS, name) or await conn.fetchval(_SHAPE) != self._shape:
                return
            async with conn.transaction():
                for table in reversed(Base.metadata.sorted_tables):
                    await conn.execute(f'DELETE FROM "{table.name}"')
        finally:
            await conn.close()
        self._free.append(name)

    async def _read_shape(self, database: str) -> str:
        conn = await asyncpg.connect(_dsn(pg_url_for(database)), timeout=5)
        try:
            shape: str = await conn.fetchval(_SHAPE)
            return shape
        finally:
            await conn.close()

    async def drop(self, name: str) -> None:
        await run_sql(PG_URL, f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.fixture(scope="session")
def pg_server() -> Iterator[PgServer | None]:
    """The migrated template on PostgreSQL, or None (with the reason) when unreachable."""
    server = PgServer()
    try:
        asyncio.run(run_sql(PG_URL, f'CREATE DATABASE "{server.template}"'))
    except (OSError, asyncpg.PostgresError, TimeoutError) as exc:
        reason = f"PostgreSQL unreachable at {PG_URL}: {exc!r}"
        if REQUIRE_PG:
            pytest.fail(f"{reason} (AGENTCRON_REQUIRE_PG=1)", pytrace=False)
        yield None
        return
    upgrade(pg_url_for(server.template))
    yield server

    async def cleanup() -> None:
        for name in [*server.created, server.template]:
            await server.drop(name)

    asyncio.run(cleanup())


@pytest.fixture(scope="session")
def sqlite_template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("sqlite-template") / "template.db"
    upgrade(f"sqlite+aiosqlite:///{path}")
    return path


@pytest.fixture(params=["sqlite", "postgresql"])
def backend(request: pytest.FixtureRequest) -> str:
    backend: str = request.param
    return backend


@pytest.fixture
async def db_url(
    backend: str,
    tmp_path: Path,
    sqlite_template: Path,
    pg_server: PgServer | None,
) -> AsyncIterator[str]:
    """A freshly migrated, empty database of ``backend`` for this test alone."""
    if backend == "sqlite":
        path = tmp_path / "agentcron.db"
        shutil.copy(sqlite_template, path)
        yield f"sqlite+aiosqlite:///{path}"
        return
    url = await clone_pg(pg_server)
    yield url
    assert pg_server is not None
    await pg_server.give_back(url)


async def clone_pg(pg_server: PgServer | None) -> str:
    """A fresh PostgreSQL database for one test; skipped with the reason when PostgreSQL is
    unreachable, or failed under ``AGENTCRON_REQUIRE_PG=1`` (CI) so a skip cannot hide it."""
    if pg_server is None:
        message = f"PostgreSQL unreachable at {PG_URL}"
        if REQUIRE_PG:
            pytest.fail(f"{message} (AGENTCRON_REQUIRE_PG=1)", pytrace=False)
        pytest.skip(message)
    return await pg_server.clone()


@pytest.fixture
async def empty_pg(pg_server: PgServer | None) -> AsyncIterator[str]:
    """The name of a new, empty PostgreSQL database (not migrated), dropped afterwards."""
    if pg_server is None:
        await clone_pg(pg_server)  # skips (or fails under AGENTCRON_REQUIRE_PG=1)
    name = f"agentcron_nc_{uuid.uuid4().hex[:12]}"
    await run_sql(PG_URL, f'CREATE DATABASE "{name}"')
    try:
        yield name
    finally:
        await run_sql(PG_URL, f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.fixture
async def db(db_url: str) -> AsyncIterator[Database]:
    database = Database(db_url)
    yield database
    checked_out = database.engine.sync_engine.pool.checkedout()  # type: ignore[attr-defined]
    await database.dispose()
    assert checked_out == 0, f"{checked_out} database connection(s) leaked by the test"


@pytest.fixture
def settings(db_url: str, tmp_path: Path) -> Settings:
    return Settings(
        database_url=db_url,
        disable_scheduler=True,
        data_dir=tmp_path / "data",
        log_format="console",
        agents_file=TEST_AGENTS,
        tenant_env="SMTP_URL",  # a variable of the service tenants' email channels may name
    )


def bearer(key: str) -> dict[str, str]:
    """The header that authenticates a request with ``key``."""
    return {"Authorization": f"Bearer {key}"}


async def issue_key(app: FastAPI, owner: str = LOCAL_OWNER, *, admin: bool = False) -> str:
    """A new API key (plaintext) in the database of ``app``, whose lifespan has been entered."""
    key, _record = await create_key(app.state.db, owner, admin=admin)
    return key


@asynccontextmanager
async def app_client(app: FastAPI, key: str | None) -> AsyncIterator[httpx.AsyncClient]:
    """An HTTP client bound to ``app`` in-process, sending ``key`` (None: no key) on every
    request."""
    transport = httpx.ASGITransport(app=app)
    headers = bearer(key) if key is not None else {}
    async with httpx.AsyncClient(
        transport=transport, base_url="http://agentcron", headers=headers
    ) as http:
        yield http


@pytest.fixture
async def live_app(settings: Settings) -> AsyncIterator[FastAPI]:
    """The app on this test's database with its lifespan entered (engine off by ``settings``)."""
    app = create_app(settings)
    async with app.router.lifespan_context(app):
        yield app


@pytest.fixture
async def client(live_app: FastAPI) -> AsyncIterator[httpx.AsyncClient]:
    """An HTTP client bound to a live app (lifespan entered) on this test's database.

    It authenticates as owner "local" with an ordinary (not admin) key, so it sees what that
    owner made: what every caller was before API keys, and what ``agentcron example`` makes.
    """
    async with app_client(live_app, await issue_key(live_app)) as http:
        yield http


@pytest.fixture
def bwrap() -> str:
    """bubblewrap for a sandbox test: skipped with the reason when it cannot sandbox here,
    failed instead under ``AGENTCRON_REQUIRE_SANDBOX=1`` (CI)."""
    return require_bwrap()


@pytest.fixture
def restored_logging() -> Iterator[None]:
    """For a test that calls ``configure_logging``: the root logger's handlers and level and
    structlog's configuration as they were before it, afterwards."""
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    saved = structlog.get_config()
    try:
        yield
    finally:
        root.handlers[:] = handlers
        root.setLevel(level)
        structlog.configure(**saved)
