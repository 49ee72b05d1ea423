"""What the channel and owner tests share: a schedule's JSON and its creation through the API,
a finished run for ``deliver_run``, and the private destinations a tenant's URL may not name."""

from __future__ import annotations

import ssl
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import httpx
import pytest
import trustme
from fastapi import FastAPI

from agentcron.core.config import Settings
from agentcron.core.notify.ssrf import Resolver, resolve
from agentcron.core.runs import RunService
from agentcron.core.schedules.service import ScheduleService
from agentcron.core.specs import ScheduleCreate
from agentcron.core.storage.database import Database
from agentcron.core.storage.models import Run
from agentcron.web.app import create_app
from tests.conftest import app_client, issue_key
from tests.integration.engine_kit import API, HOURLY
from tests.network import resolving

CA = trustme.CA()  # the throw-away authority of the channel tests' TLS servers
ECHO = {"type": "command", "argv": [sys.executable, "-c", "print('digest ready')"]}


def schedule_body(runner: dict[str, Any] = ECHO, **fields: Any) -> dict[str, Any]:
    """A schedule never due during a test (its runs come from run now)."""
    return {"name": "digest", "prompt": "do the work", "trigger": HOURLY, "runner": runner} | fields


@asynccontextmanager
async def serving(settings: Settings, **update: Any) -> AsyncIterator[FastAPI]:
    """The app with its engine running (a fast tick), ``update`` applied to ``settings``."""
    running = {"disable_scheduler": False, "scheduler_tick_seconds": 0.2, **update}
    app = create_app(settings.model_copy(update=running))
    async with app.router.lifespan_context(app):
        yield app


@asynccontextmanager
async def owner(
    app: FastAPI, name: str, *, admin: bool = False
) -> AsyncIterator[httpx.AsyncClient]:
    """A client of ``app`` with a new key of owner ``name``."""
    async with app_client(app, await issue_key(app, name, admin=admin)) as http:
        yield http


async def created(http: httpx.AsyncClient, body: dict[str, Any]) -> dict[str, Any]:
    response = await http.post(f"{API}/schedules", json=body)
    assert response.status_code == 201, response.text
    schedule: dict[str, Any] = response.json()
    return schedule


async def finished_run(
    db: Database, notify: list[dict[str, Any]], name: str = "digest", output: str = "five bullets"
) -> Run:
    """A succeeded run (never executed) of a new schedule whose channels are ``notify``."""
    spec = ScheduleCreate(**schedule_body(notify=notify, name=name))
    schedule = await ScheduleService(db, allow_private=True).create(spec, "local")
    queued = await RunService(db).run_now(schedule.id, None)
    async with db.session() as session:
        run = await session.get(Run, queued.id)
        assert run is not None
        run.status, run.output, run.attempt = "succeeded", output, 1
    return run


# Spellings of loopback, and a name with a loopback record: each is refused before any
# connection. Which address is of which kind is the table of tests/unit/test_ssrf.py.
PRIVATE_HOSTS = pytest.mark.parametrize(
    ("host", "said"),
    [
        ("127.0.0.1", "a loopback address"),
        ("[::ffff:127.0.0.1]", "a loopback (IPv4-mapped) address"),
        ("localhost", "a loopback address"),
        ("2130706433", "a loopback address"),  # 127.0.0.1 spelled as one number
        ("127.1", "a loopback address"),
        # The public record comes first; the name's owner orders them, so every one counts.
        ("rebind.example.test", "rebind.example.test resolves to a loopback address"),
    ],
)


def server_context(*names: str) -> ssl.SSLContext:
    """A TLS server's context, its certificate for ``names`` issued by ``CA``."""
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    CA.issue_cert(*names).configure_cert(context)
    return context


def dns_for(host: str) -> Resolver:
    """A name of ``.test`` gets the test's DNS answer; the literals are judged as they are."""
    return resolving("93.184.216.34", "127.0.0.1") if host.endswith(".test") else resolve
