"""A store that fails reaches a host as ``SchedulerUnavailable``, whatever the failure.

Every verb a host calls (``engine.schedules``, ``engine.runs``, ``Engine.start``) and every
route of the API, MCP and the dashboard over them answer a database that refuses them with
agentcron's ``SchedulerUnavailable`` (503 over HTTP, with the documented body), the driver's
error kept as ``__cause__``: never the driver's exception, and never its text. A stop goes on
without raising. The loop carries on and runs again once the database is back.

The failures are ones no connection-level rule foresaw: PostgreSQL refusing connections to the
database (``ALLOW_CONNECTIONS false``, SQLSTATE 55000); SQLite finding that its file is not a
database (``SQLITE_NOTADB``, a ``DatabaseError``, not an ``OperationalError``).
"""

from __future__ import annotations

import asyncio
import gc
import inspect
import os
import uuid
import warnings
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from contextlib import asynccontextmanager
from datetime import UTC, datetime, timedelta
from functools import partial
from pathlib import Path
from typing import Any

import asyncpg
import httpx
import pytest
from fastapi import FastAPI
from sqlalchemy.engine import make_url
from structlog.testing import capture_logs

import agentcron
from agentcron.core.config import Settings
from agentcron.core.errors import SchedulerUnavailable
from agentcron.core.runners.handler import HandlerContext
from agentcron.core.specs import BackfillRequest, ScheduleCreate, ScheduleUpdate
from agentcron.core.storage.database import Database, sqlite_file
from agentcron.web.app import create_app
from agentcron.web.dashboard.session import COOKIE
from tests.conftest import PG_URL, app_client, issue_key
from tests.faults.test_outage import LEAKS, assert_unavailable_body
from tests.integration.engine_kit import wait_true
from tests.integration.test_library import OWNER, engine_for, finished, owner_from_header

SPEC = ScheduleCreate(
    name="n", prompt="p", trigger={"every_seconds": 3600}, runner={"type": "handler"}
)
NOT_A_DATABASE = b"this file is not a database " * 200


@pytest.fixture(autouse=True)
def collected() -> Iterator[None]:
    """After each test, the connections ``refusing`` let go of while they were checked out are
    collected here, their ResourceWarning expected: a disposed pool leaves those to the
    garbage collector, and collected in a later test the warning would fail that one."""
    yield
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ResourceWarning)
        gc.collect()


@asynccontextmanager
async def refusing(db_url: str, *databases: Database) -> AsyncIterator[None]:
    """The database refuses every request until the block ends, then serves again.

    PostgreSQL: connections to it are refused and its sessions ended. SQLite: its files are
    moved aside and one that is not a database put in their place; ``databases`` let go of
    the connections they keep open (a pooled SQLite connection would still read the old file).
    """
    if db_url.startswith("postgresql"):
        name = make_url(db_url).database
        dsn = make_url(PG_URL).set(drivername="postgresql").render_as_string(False)
        admin = await asyncpg.connect(dsn, timeout=10)
        try:
            await admin.execute(f'ALTER DATABASE "{name}" ALLOW_CONNECTIONS false')
            await admin.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = $1", name
            )
            yield
        finally:
            await admin.execute(f'ALTER DATABASE "{name}" ALLOW_CONNECTIONS true')
            await admin.close()
        return
    path = sqlite_file(db_url)
    assert path is not None
    files = [path, path.with_name(path.name + "-wal"), path.with_name(path.name + "-shm")]
    moved = [file for file in files if file.exists()]
    for file in moved:
        os.replace(file, file.with_name(file.name + ".aside"))
    path.write_bytes(NOT_A_DATABASE)
    for database in databases:
        await database.dispose()
    try:
        yield
    finally:
        for file in files:
            file.unlink(missing_ok=True)
        for file in moved:
            os.replace(file.with_name(file.name + ".aside"), file)
        for database in databases:
            await database.dispose()


def public_verbs(service: object) -> set[str]:
    """The names of a service's public coroutine methods, its own or those it offers of its
    parts (``ScheduleService``): what a host can await."""
    return {
        name
        for name, member in inspect.getmembers(service, inspect.iscoroutinefunction)
        if not name.startswith("_")
    }


def host_verbs(
    engine: agentcron.Engine, schedule_id: uuid.UUID, run_id: uuid.UUID, due: str
) -> dict[str, Callable[[], Awaitable[Any]]]:
    """One call of every public verb of ``engine.schedules`` and ``engine.runs``."""
    schedules, runs = engine.schedules, engine.runs
    now = datetime.now(UTC)
    backfill = BackfillRequest(
        start=(now - timedelta(days=1)).isoformat(), end=now.isoformat(), dry_run=True
    )
    edit = ScheduleUpdate(prompt="q")
    return {
        "schedules.create": partial(schedules.create, SPEC, OWNER),
        "schedules.get": partial(schedules.get, schedule_id, OWNER),
        "schedules.list": partial(schedules.list, OWNER),
        "schedules.update": partial(schedules.update, schedule_id, edit, OWNER),
        "schedules.delete": partial(schedules.delete, schedule_id, OWNER),
        "schedules.pause": partial(schedules.pause, schedule_id, "why", OWNER),
        "schedules.resume": partial(schedules.resume, schedule_id, OWNER),
        "schedules.plan_resume": partial(schedules.plan_resume, schedule_id, OWNER),
        "schedules.backfill": partial(schedules.backfill, schedule_id, backfill, OWNER),
        "schedules.skip_occurrence": partial(schedules.skip_occurrence, schedule_id, due, OWNER),
        "schedules.unskip_occurrence": partial(
            schedules.unskip_occurrence, schedule_id, due, OWNER
        ),
        "schedules.get_by_key": partial(schedules.get_by_key, OWNER, "k"),
        "schedules.apply": partial(schedules.apply, OWNER, "k", SPEC),
        "schedules.delete_by_key": partial(schedules.delete_by_key, OWNER, "k"),
        "schedules.reconcile": partial(schedules.reconcile, OWNER, {"k": SPEC}),
        "runs.run_now": partial(runs.run_now, schedule_id, OWNER),
        "runs.replay": partial(runs.replay, run_id, OWNER),
        "runs.cancel": partial(runs.cancel, run_id, OWNER),
        "runs.get_run": partial(runs.get_run, run_id, OWNER),
        "runs.list_runs": partial(runs.list_runs, schedule_id, OWNER),
        "runs.count_runs": partial(runs.count_runs, schedule_id),
    }


async def leaks(call: Callable[[], Awaitable[Any]]) -> str | None:
    """What is wrong with how ``call`` fails on a refusing store, or None when it raises
    ``SchedulerUnavailable`` in agentcron's words with the driver's error as its cause."""
    try:
        await call()
    except SchedulerUnavailable as exc:
        if exc.__cause__ is None:
            return "SchedulerUnavailable without the driver's error as its cause"
        return None
    except Exception as exc:
        return f"{type(exc).__module__}.{type(exc).__name__}"
    return "succeeded on a database that refuses everything"


async def test_every_host_verb_answers_a_refusing_store_with_scheduler_unavailable(
    db_url: str, tmp_path: Path
) -> None:
    engine = engine_for(db_url, tmp_path, lambda ctx: "ok")
    async with engine:
        schedule = await engine.schedules.create(SPEC, OWNER)
        run = await engine.runs.run_now(schedule.id, OWNER)
        await finished(engine, schedule.id)
        assert schedule.next_run is not None
        verbs = host_verbs(engine, schedule.id, run.id, schedule.next_run.isoformat())
        expected = {f"schedules.{name}" for name in public_verbs(engine.schedules)}
        expected |= {f"runs.{name}" for name in public_verbs(engine.runs)}
        assert set(verbs) == expected, "a public verb this test does not call"

        # Logs captured: the console would spend a second drawing each failure's traceback.
        async with refusing(db_url, engine.db):
            with capture_logs():
                wrong = {name: await leaks(call) for name, call in verbs.items()}
                # Another engine on this database: migrating it is refused in the same words.
                other = engine_for(db_url, tmp_path, None, disable_scheduler=True, migrate=True)
                wrong["Engine.start(migrate=True)"] = await leaks(other.start)
                # Without migrate it starts anyway, to serve once the database is back, and
                # stops.
                api_only = engine_for(db_url, tmp_path, None, disable_scheduler=True)
                await api_only.start()
                await api_only.stop()
        assert {name: why for name, why in wrong.items() if why} == {}

        # The loop met the failure too, and goes on once the database is back.
        again = await engine.runs.run_now(schedule.id, OWNER)
        runs = await finished(engine, schedule.id, count=2)
        assert runs[0].id == again.id and runs[0].status == "succeeded"


async def test_an_engine_stops_while_the_store_refuses_it(db_url: str, tmp_path: Path) -> None:
    async def handler(ctx: HandlerContext) -> str:
        await asyncio.sleep(60)  # until the stop cancels it
        return "late"

    # One slot: of two runs, one executes and one waits in hand, to be given back at the stop.
    engine = engine_for(
        db_url, tmp_path, handler, scheduler_concurrency=1, drain_timeout_seconds=0.5
    )
    await engine.start()
    try:
        schedule = await engine.schedules.create(SPEC, OWNER)
        for _ in range(2):
            await engine.runs.run_now(schedule.id, OWNER)
        assert engine.loop is not None
        held = engine.loop.engine.held
        await wait_true(lambda: len(held) >= 2, 10, "the two runs taken in hand")
        async with refusing(db_url, engine.db):
            with capture_logs() as logs:
                await asyncio.wait_for(engine.stop(), timeout=30)
        # Giving the waiting run back failed: the stop said so and went on.
        (kept,) = [entry for entry in logs if entry["event"] == "runs_not_released"]
        assert kept["runs"] >= 1 and kept["error"] == "the database is unavailable"
    finally:
        await engine.stop()


# Every operation of the router a host mounts, with a body its validation accepts: each reaches
# the store (preview alone needs none, and is left out).
ROUTES = [
    ("POST", "/api/v1/schedules", "create"),
    ("GET", "/api/v1/schedules", None),
    ("PUT", "/api/v1/schedules/by-key/k", "create"),
    ("GET", "/api/v1/schedules/by-key/k", None),
    ("DELETE", "/api/v1/schedules/by-key/k", None),
    ("GET", "/api/v1/schedules/{schedule_id}", None),
    ("PATCH", "/api/v1/schedules/{schedule_id}", {"prompt": "q"}),
    ("DELETE", "/api/v1/schedules/{schedule_id}", None),
    ("POST", "/api/v1/schedules/{schedule_id}/pause", {"note": "why"}),
    ("POST", "/api/v1/schedules/{schedule_id}/resume", {"catchup": "skip"}),
    ("POST", "/api/v1/schedules/{schedule_id}/backfill", "backfill"),
    ("POST", "/api/v1/schedules/{schedule_id}/skip", "due"),
    ("POST", "/api/v1/schedules/{schedule_id}/unskip", "due"),
    ("POST", "/api/v1/schedules/{schedule_id}/run", None),
    ("GET", "/api/v1/schedules/{schedule_id}/runs", None),
    ("GET", "/api/v1/runs/{run_id}", None),
    ("POST", "/api/v1/runs/{run_id}/replay", None),
    ("POST", "/api/v1/runs/{run_id}/cancel", None),
]


async def test_the_api_mcp_and_dashboard_answer_a_refusing_store_with_503(
    db_url: str, tmp_path: Path, settings: Settings
) -> None:
    engine = engine_for(db_url, tmp_path, None, disable_scheduler=True)
    host = FastAPI()
    engine.install(host, principal=owner_from_header)
    paths = host.openapi()["paths"]
    operations = {(method.upper(), path) for path, ops in paths.items() for method in ops}
    named = {(method, path.replace("/k", "/{key}")) for method, path, _ in ROUTES}
    assert operations - named == {("POST", "/api/v1/schedules/preview")}

    service = create_app(settings)
    body = SPEC.model_dump(mode="json", exclude_unset=True)
    now = datetime.now(UTC)
    async with engine, service.router.lifespan_context(service):
        key = await issue_key(service)
        schedule = await engine.schedules.create(SPEC, OWNER)
        run = await engine.runs.run_now(schedule.id, OWNER)
        assert schedule.next_run is not None
        bodies: dict[str, Any] = {
            "create": body,
            "backfill": {"start": (now - timedelta(days=1)).isoformat(), "end": now.isoformat()},
            "due": {"due_at": schedule.next_run.isoformat()},
        }
        transport = httpx.ASGITransport(app=host)
        async with (
            httpx.AsyncClient(
                transport=transport, base_url="http://host", headers={"X-User": OWNER}
            ) as http,
            app_client(service, key) as api,
            refusing(db_url, engine.db, service.state.db),
        ):
            for method, path, given in ROUTES:
                url = path.format(schedule_id=schedule.id, run_id=run.id)
                payload = bodies.get(given, given) if isinstance(given, str) else given
                assert_unavailable_body(await http.request(method, url, json=payload))
            # The service's own API and MCP check the caller's key first, in the store too.
            assert_unavailable_body(await api.get("/api/v1/schedules"))
            mcp = {"jsonrpc": "2.0", "id": 1, "method": "tools/list"}
            accept = {"Accept": "application/json, text/event-stream"}
            assert_unavailable_body(await api.post("/mcp", json=mcp, headers=accept))
            # And the dashboard, signed in with the same key.
            page = await api.get("/", headers={"Cookie": f"{COOKIE}={key}"})
            assert page.status_code == 503, page.text
            assert not [leak for leak in LEAKS if leak in page.text.lower()], page.text
        # The database is back: the same engine serves again.
        assert (await engine.schedules.get(schedule.id, OWNER)).id == schedule.id
