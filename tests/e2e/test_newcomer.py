"""A newcomer's first minutes, with the real ``agentcron`` executable as a user runs it: the
database URL as they paste it, a database that is missing or not migrated, commands run from
another directory. Each answer is one plain line and an exit status, never a traceback."""

from __future__ import annotations

import os
import subprocess
import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from sqlalchemy.engine import make_url

from tests.conftest import PG_URL, PgServer, clone_pg
from tests.e2e.conftest import AGENTCRON, _pg_admin

pytestmark = pytest.mark.slow


def agentcron(
    *args: str, database_url: str, cwd: Path, timeout: float = 60
) -> subprocess.CompletedProcess[str]:
    """``agentcron ARGS`` in ``cwd`` with only ``AGENTCRON_DATABASE_URL`` set (of agentcron's
    variables), as in a newcomer's shell."""
    env = {key: value for key, value in os.environ.items() if not key.startswith("AGENTCRON_")}
    env["AGENTCRON_DATABASE_URL"] = database_url
    return subprocess.run(
        [AGENTCRON, *args], env=env, cwd=cwd, capture_output=True, text=True, timeout=timeout
    )


def assert_plain(done: subprocess.CompletedProcess[str], status: int) -> str:
    """The exit status is ``status`` and nothing printed a traceback; returns all the output."""
    output = done.stdout + done.stderr
    assert done.returncode == status, output
    assert "Traceback" not in output, output
    return output


def server_url(database: str, scheme: str) -> str:
    """A URL of ``database`` on the test PostgreSQL server, spelled with ``scheme``."""
    url = make_url(PG_URL).set(database=database)
    return f"{scheme}://{url.render_as_string(hide_password=False).split('://', 1)[1]}"


@pytest.fixture
async def empty_pg(pg_server: PgServer | None) -> AsyncIterator[str]:
    """The name of a new, empty PostgreSQL database (not migrated), dropped afterwards."""
    if pg_server is None:
        await clone_pg(pg_server)  # skips (or fails under AGENTCRON_REQUIRE_PG=1)
    name = f"agentcron_nc_{uuid.uuid4().hex[:12]}"
    await _pg_admin(f'CREATE DATABASE "{name}"')
    try:
        yield name
    finally:
        await _pg_admin(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


# -- 1. the URL spellings people paste ---------------------------------------------------------


async def test_postgresql_urls_without_a_driver_use_asyncpg(empty_pg: str, tmp_path: Path) -> None:
    migrated = agentcron("migrate", database_url=server_url(empty_pg, "postgresql"), cwd=tmp_path)
    assert_plain(migrated, 0)
    made = agentcron(
        "keys",
        "create",
        "--owner",
        "alice",
        database_url=server_url(empty_pg, "postgres"),
        cwd=tmp_path,
    )
    assert_plain(made, 0)
    assert made.stdout.strip().splitlines()[-1].startswith("ac_")


def test_a_sqlite_url_without_a_driver_uses_aiosqlite(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'plain.db'}"
    assert_plain(agentcron("migrate", database_url=url, cwd=tmp_path), 0)
    listed = agentcron("keys", "list", database_url=url, cwd=tmp_path)
    assert "no API keys" in assert_plain(listed, 0)
