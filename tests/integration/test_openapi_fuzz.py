"""Schemathesis against the app's own OpenAPI document, on SQLite and PostgreSQL.

Every operation of ``/openapi.json`` gets generated requests (schema-valid and not) sent to a
real uvicorn server on a free loopback port, on this test's fresh database, with an API key;
each response must not be a server error and must match the response schema the document
declares for its status (a 500 fails the test, so does an undeclared body). Example counts are
bounded so the file stays well under a minute on two cores.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
import schemathesis
import uvicorn
from hypothesis import HealthCheck, settings
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import response_schema_conformance

from agentcron.core.config import Settings
from agentcron.core.keys import LOCAL_OWNER, create_key
from agentcron.core.storage.database import Database
from agentcron.web.app import create_app
from tests.conftest import bearer
from tests.integration.engine_kit import run_now
from tests.integration.test_schedules_api import create

SCHEMA_SETTINGS = Settings(
    database_url="sqlite+aiosqlite:///:memory:", disable_scheduler=True, log_format="console"
)
schema = schemathesis.openapi.from_dict(create_app(SCHEMA_SETTINGS).openapi())
CHECKS = [not_a_server_error, response_schema_conformance]


class LiveServer:
    """The app under uvicorn in a thread, on 127.0.0.1 and a port the OS picks."""

    def __init__(self, app_settings: Settings) -> None:
        config = uvicorn.Config(
            create_app(app_settings), host="127.0.0.1", port=0, log_level="warning", lifespan="on"
        )
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(target=self.server.run, name="uvicorn", daemon=True)

    def __enter__(self) -> str:
        self.thread.start()
        deadline = time.monotonic() + 30
        while not self.server.started:
            assert self.thread.is_alive(), "uvicorn stopped during start-up"
            assert time.monotonic() < deadline, "uvicorn did not start within 30 s"
            time.sleep(0.01)
        port = self.server.servers[0].sockets[0].getsockname()[1]
        return f"http://127.0.0.1:{port}"

    def __exit__(self, *exc: object) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=30)
        assert not self.thread.is_alive(), "uvicorn did not stop within 30 s"


@pytest.fixture
async def live(settings: Settings, db: Database) -> AsyncIterator[dict[str, Any]]:
    """A served app with one schedule and one run in it, so generated ids sometimes exist,
    and an API key of owner "local" to call it with."""
    key, _record = await create_key(db, LOCAL_OWNER)
    headers = bearer(key)
    with LiveServer(settings) as base_url:
        async with httpx.AsyncClient(base_url=base_url, headers=headers) as http:
            schedule = await create(http, runner={"type": "command", "argv": ["cat"]})
            run = await run_now(http, schedule["id"])
            ids = {"schedule_id": schedule["id"], "run_id": run["id"]}
            yield {"base_url": base_url, "headers": headers, **ids}


VALID_TRIGGERS = [
    {"cron": "30 2 * * 1-5", "timezone": "America/New_York"},
    {"cron": "*/15 * * * *", "timezone": "Australia/Lord_Howe"},
    {"every_seconds": 90},
    {"every_seconds": 3600, "start_at": "2030-01-01T00:00:00+05:45"},
    {"at": "2099-12-31T23:59:00-03:30"},
]


def _aim(case: schemathesis.Case, live: dict[str, Any]) -> None:
    """Point about half the cases at what exists and is valid, so the fuzzing reaches past the
    first check: path ids of the seeded schedule and run, and a valid trigger, runner and
    notify list in an object body (its other fields stay as generated). The choice depends on
    the case's own content, so it is as deterministic as the case."""
    pick = uuid.uuid5(uuid.NAMESPACE_URL, repr(case)).int
    if pick % 2:
        return
    params = case.path_parameters or {}
    if "schedule_id" in params:
        params["schedule_id"] = live["schedule_id"]
    if "run_id" in params:
        params["run_id"] = live["run_id"]
    if isinstance(case.body, dict):
        if "trigger" in case.body:
            case.body["trigger"] = VALID_TRIGGERS[pick // 2 % len(VALID_TRIGGERS)]
        if "runner" in case.body:
            case.body["runner"] = {"type": "command", "argv": ["cat"]}
        if "notify" in case.body:
            case.body["notify"] = []


@schema.parametrize()
@settings(
    max_examples=12,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=list(HealthCheck),
)
def test_every_operation_answers_within_its_schema(
    case: schemathesis.Case, live: dict[str, Any]
) -> None:
    _aim(case, live)
    case.call_and_validate(base_url=live["base_url"], headers=live["headers"], checks=CHECKS)
