"""Start-up checks with real processes (docs/design.md, promise 14): a configuration that
cannot work is refused at start, with a message that says what to change."""

from __future__ import annotations

import asyncio
import socket
import subprocess
from pathlib import Path

import httpx
import pytest

from tests.conftest import pg_url_for, run_sql
from tests.e2e.conftest import (
    AGENTCRON,
    Fleet,
    Server,
    captured,
    create_schedule,
    free_port,
    json_events,
    make_key,
    schedule_body,
)
from tests.integration.test_shared_database import HOST_TABLES, tables


def serve_until_exit(env: dict[str, str], timeout: float = 30) -> subprocess.CompletedProcess[str]:
    """Run ``agentcron serve`` expecting it to give up; killed (and failing) after ``timeout``."""
    return captured([AGENTCRON, "serve", "--port", str(free_port())], timeout, env=env)


def migrate(env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return captured([AGENTCRON, "migrate"], 120, env=env)


def one_line(done: subprocess.CompletedProcess[str]) -> str:
    """The one ``agentcron:`` line a refused command printed (and no traceback)."""
    assert done.returncode == 2, done.stdout + done.stderr
    assert "Traceback" not in done.stdout + done.stderr
    refusal = [line for line in done.stderr.splitlines() if line.startswith("agentcron:")]
    assert len(refusal) == 1, done.stderr
    return refusal[0]


@pytest.mark.slow
async def test_second_engine_on_one_sqlite_file_is_refused(
    server: Server, server_env: dict[str, str], fleet: Fleet
) -> None:
    second = await asyncio.to_thread(serve_until_exit, server_env)
    output = second.stdout + second.stderr
    assert second.returncode != 0, output
    assert "another agentcron engine already runs on this SQLite database" in output
    assert "PostgreSQL" in output and "AGENTCRON_DISABLE_SCHEDULER=1" in output
    assert "Traceback" not in output  # a plain message, not a stack trace
    async with httpx.AsyncClient(timeout=10, headers=server.headers) as http:
        assert (await http.get(f"{server.url}/readyz")).status_code == 200  # first unharmed

        # The remedy the message names works: an API-only process beside the engine.
        api_only = await asyncio.to_thread(
            fleet.start, dict(server_env, AGENTCRON_DISABLE_SCHEDULER="1"), "api-only"
        )
        assert (await http.get(f"{api_only.url}/readyz")).status_code == 200
        assert server.key is not None
        body = schedule_body("from the api-only process", {"cron": "0 8 * * *"})
        created = await create_schedule(api_only, server.key, body)
        listed = await http.get(f"{server.url}/api/v1/schedules/{created['id']}")
        assert listed.status_code == 200
    assert json_events(api_only.log(), "engine_disabled")
    assert not json_events(api_only.log(), "engine_started")


@pytest.mark.slow
async def test_a_sandbox_without_bubblewrap_is_refused(server_env: dict[str, str]) -> None:
    # The binary pointed at a file that does not exist stands for a machine without bwrap.
    env = dict(server_env, AGENTCRON_SANDBOX="bwrap", AGENTCRON_SANDBOX_BINARY="/nonexistent/bwrap")
    refusal = one_line(await asyncio.to_thread(serve_until_exit, env))
    assert "apt-get install bubblewrap" in refusal and "AGENTCRON_SANDBOX=none" in refusal


@pytest.mark.slow
async def test_a_hosts_database_is_refused_then_served_from_a_schema_of_agentcrons_own(
    empty_pg: str, server_env: dict[str, str], fleet: Fleet
) -> None:
    url = pg_url_for(empty_pg)
    await run_sql(url, HOST_TABLES)  # the host's own runs and tasks
    env = dict(server_env, AGENTCRON_DATABASE_URL=url)
    for command in (migrate, serve_until_exit):
        refused = await asyncio.to_thread(command, env)
        line = one_line(refused)
        assert "runs, tasks" in line and "AGENTCRON_DATABASE_SCHEMA" in line, line

    bad = one_line(await asyncio.to_thread(migrate, dict(env, AGENTCRON_DATABASE_SCHEMA="Jobs")))
    assert "AGENTCRON_DATABASE_SCHEMA" in bad and "'Jobs'" in bad, bad

    env["AGENTCRON_DATABASE_SCHEMA"] = "agentcron"
    migrated = await asyncio.to_thread(migrate, env)
    assert migrated.returncode == 0, migrated.stdout + migrated.stderr
    key = await asyncio.to_thread(make_key, env)
    server = await asyncio.to_thread(fleet.start, env, "schema")
    await create_schedule(server, key, schedule_body("in a schema", {"every_seconds": 1}))
    # Its runs there, the host's rows untouched: test_shared_database.py's, with the library.
    assert {"schedules", "runs", "tasks", "alembic_version"} <= await tables(url, "agentcron")
    assert await tables(url, "public") == {"runs", "tasks"}


@pytest.mark.slow
@pytest.mark.parametrize(
    ("host", "why"),
    [("127.0.0.1", "is in use"), ("192.0.2.1", "cannot be listened on")],  # TEST-NET-1
)
async def test_a_port_it_cannot_listen_on_is_refused_before_anything_starts(
    tmp_path: Path, server_env: dict[str, str], host: str, why: str
) -> None:
    assert (await asyncio.to_thread(migrate, server_env)).returncode == 0
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        argv = [AGENTCRON, "serve", "--host", host, "--port", str(port)]
        done = await asyncio.to_thread(captured, argv, env=server_env)
    refusal = one_line(done)
    assert refusal.startswith(f"agentcron: cannot start: port {port} on {host} {why}: "), refusal
    assert "--port" in refusal
    # Refused before the engine started: it claimed nothing and ran nothing.
    assert not json_events(done.stderr, "engine_started")


@pytest.mark.slow
async def test_an_app_start_up_that_fails_is_one_line_and_status_2(
    tmp_path: Path, server_env: dict[str, str]
) -> None:
    # A data directory that is a file passes the checks made before the app starts, and fails
    # the app's own start-up (its task directories cannot be made there).
    (tmp_path / "not-a-directory").write_text("")
    env = dict(server_env, AGENTCRON_DATA_DIR=str(tmp_path / "not-a-directory"))
    assert (await asyncio.to_thread(migrate, env)).returncode == 0
    done = await asyncio.to_thread(serve_until_exit, env)
    assert done.returncode == 2, done.stdout + done.stderr
    refusal = [line for line in done.stderr.splitlines() if line.startswith("agentcron:")]
    assert refusal == [
        "agentcron: cannot start: the application's start-up failed (the log lines above say why)"
    ], done.stderr
    assert "Not a directory" in done.stderr  # the log says why
