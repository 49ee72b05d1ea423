"""Who may do what (issue 6): API keys, owners and admins, on SQLite and PostgreSQL.

Every ``/api/v1`` endpoint needs ``Authorization: Bearer <key>``. A key acts as its owner:
another owner's schedules, runs and tasks answer 404 on every endpoint and never appear in a
list; an admin key sees everything. Keys are stored as hashes and never reach a response or a
log line.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import subprocess
import sys
import uuid
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi import FastAPI
from sqlalchemy import select, text
from structlog.testing import capture_logs

from agentcron.core import triggers
from agentcron.core.keys import LAST_USED_RESOLUTION, authenticate, create_key, revoke_key
from agentcron.core.storage.database import Database
from agentcron.core.storage.models import ApiKey, Task
from tests.conftest import app_client, bearer, issue_key
from tests.integration.engine_kit import API, assert_error, run_now
from tests.integration.test_api_doc import operations as openapi_operations
from tests.integration.test_schedules_api import create, paged

AGENTCRON = str(Path(sys.executable).with_name("agentcron"))
SCHEDULE: dict[str, Any] = {
    "name": "digest",
    "prompt": "Summarise today's headlines.",
    "trigger": {"cron": "0 8 * * 1-5", "timezone": "Asia/Shanghai"},
    # A declared agent (tests/agents.toml): what an ordinary tenant key may run (core.policy).
    "runner": {"type": "command", "agent": "digest"},
}
PREVIEW = {"trigger": {"every_seconds": 60}}
_NOW = datetime.now(UTC)
BACKFILL = {
    "start": (_NOW - timedelta(days=3)).isoformat(),
    "end": (_NOW - timedelta(days=1)).isoformat(),
}
# A real upcoming due time of SCHEDULE, for skip and unskip.
OCCURRENCE = {
    "due_at": triggers.next_fire(  # type: ignore[union-attr]
        triggers.parse_trigger(SCHEDULE["trigger"], _NOW), _NOW + timedelta(days=1)
    ).isoformat()
}

# Every endpoint that names one owned object: (method, path, body, status for a caller who may).
OWNED: list[tuple[str, str, dict[str, Any] | None, int]] = [
    ("GET", "/api/v1/schedules/{schedule_id}", None, 200),
    ("PATCH", "/api/v1/schedules/{schedule_id}", {"name": "renamed"}, 200),
    ("DELETE", "/api/v1/schedules/{schedule_id}", None, 204),
    ("POST", "/api/v1/schedules/{schedule_id}/pause", {"note": "stop"}, 200),
    ("POST", "/api/v1/schedules/{schedule_id}/resume", None, 200),
    ("POST", "/api/v1/schedules/{schedule_id}/run", None, 202),
    ("GET", "/api/v1/schedules/{schedule_id}/runs", None, 200),
    ("POST", "/api/v1/schedules/{schedule_id}/skip", OCCURRENCE, 200),
    ("POST", "/api/v1/schedules/{schedule_id}/unskip", OCCURRENCE, 204),
    ("POST", "/api/v1/schedules/{schedule_id}/backfill", BACKFILL, 202),
    ("GET", "/api/v1/runs/{run_id}", None, 200),
    ("POST", "/api/v1/runs/{run_id}/replay", None, 202),
    ("POST", "/api/v1/runs/{run_id}/cancel", None, 202),
    ("GET", "/api/v1/tasks/{task_id}", None, 200),
    ("DELETE", "/api/v1/tasks/{task_id}", None, 204),
]
# The endpoints that name no object: lists, create, preview.
UNOWNED: list[tuple[str, str, dict[str, Any] | None, int]] = [
    ("GET", "/api/v1/schedules", None, 200),
    ("POST", "/api/v1/schedules", SCHEDULE, 201),
    ("POST", "/api/v1/schedules/preview", PREVIEW, 200),
]
# The endpoints that act on the caller's own owner's objects only, an admin key's included:
# stored secrets and schedules by key. Their isolation is tested in test_secrets.py and
# test_schedule_keys.py (another owner's is invisible and 404; an admin sees its own owner's).
MINE: list[tuple[str, str, dict[str, Any] | None, int]] = [
    ("PUT", "/api/v1/schedules/by-key/{key}", SCHEDULE, 201),
    ("GET", "/api/v1/schedules/by-key/{key}", None, 200),
    ("DELETE", "/api/v1/schedules/by-key/{key}", None, 204),
    ("GET", "/api/v1/secrets", None, 200),
    ("PUT", "/api/v1/secrets/{name}", {"value": "v"}, 200),
    ("DELETE", "/api/v1/secrets/{name}", None, 204),
]


@dataclass
class World:
    """Owners alice and bob with ordinary keys, an admin key of owner root, and alice's
    schedule with a (pending) run and a task."""

    app: FastAPI
    alice: httpx.AsyncClient
    bob: httpx.AsyncClient
    admin: httpx.AsyncClient
    nobody: httpx.AsyncClient
    ids: dict[str, str]
    bob_schedule: str

    def path(self, template: str) -> str:
        return template.format(**self.ids)

    async def snapshot(self) -> list[Any]:
        """What alice sees of her objects: any change by another caller shows up here."""
        paths = [self.path(path) for method, path, _, _ in OWNED if method == "GET"]
        answers = [await self.alice.get(path) for path in [*paths, f"{API}/schedules"]]
        return [(answer.status_code, answer.json()) for answer in answers]


async def create_schedule(http: httpx.AsyncClient, **overrides: Any) -> dict[str, Any]:
    return await create(http, **{**SCHEDULE, **overrides})


@pytest.fixture
async def world(live_app: FastAPI) -> AsyncIterator[World]:
    keys = {
        "alice": await issue_key(live_app, "alice"),
        "bob": await issue_key(live_app, "bob"),
        "admin": await issue_key(live_app, "root", admin=True),
        "nobody": None,
    }
    async with AsyncExitStack() as stack:
        clients = {
            name: await stack.enter_async_context(app_client(live_app, key))
            for name, key in keys.items()
        }
        schedule = await create_schedule(clients["alice"], name="alice's")
        run = await run_now(clients["alice"], schedule["id"])
        # The engine is off in these tests; a task is what it would make for alice's run.
        task = Task(id=uuid.uuid4(), schedule_id=uuid.UUID(schedule["id"]), owner="alice")
        task.workdir, task.conversation = "/tmp/agentcron-test-task", []
        task.created_at = task.updated_at = datetime.now(UTC)
        async with live_app.state.db.session() as session:
            session.add(task)
        bob_schedule = await create_schedule(clients["bob"], name="bob's")
        ids = {"schedule_id": schedule["id"], "run_id": run["id"], "task_id": str(task.id)}
        ids |= {"name": "alices-secret", "key": "alices-key"}  # the by-key and secret paths
        yield World(live_app, **clients, ids=ids, bob_schedule=bob_schedule["id"])


def assert_unauthorized(response: httpx.Response, presented: str | None = None) -> None:
    assert_error(response, 401, "Unauthorized")
    assert response.headers["www-authenticate"] == "Bearer"
    if presented:
        assert presented not in response.text


# -- every endpoint needs a key ---------------------------------------------------------------


def test_the_tables_here_cover_every_api_endpoint() -> None:
    # A new endpoint fails this test until it is added to OWNED, UNOWNED or MINE above, and so
    # to the 401 and isolation checks below.
    covered = {(method, path) for method, path, _body, _status in OWNED + UNOWNED + MINE}
    served = {(method, path) for method, path, _ in openapi_operations() if path.startswith(API)}
    assert served == covered


async def test_every_endpoint_without_a_key_is_401(world: World, subtests: pytest.Subtests) -> None:
    before = await world.snapshot()
    for method, path, body, _ok in OWNED + UNOWNED + MINE:
        with subtests.test(method=method, path=path):
            response = await world.nobody.request(method, world.path(path), json=body)
            assert_unauthorized(response)
            assert "Authorization: Bearer" in response.json()["error"]["message"]
    # The key is checked before the body and the query.
    bad = {**SCHEDULE, "trigger": {"cron": "61 * * * *"}, "surprise": 1}
    assert_unauthorized(await world.nobody.post(f"{API}/schedules", json=bad))
    assert_unauthorized(await world.nobody.get(f"{API}/schedules", params={"limit": "x"}))
    assert await world.snapshot() == before  # nothing happened


BAD_KEYS = [
    *("Bearer", "Bearer ", "Basic YWxpY2U6cGFzc3dvcmQ=", "Bearer not-a-key"),  # no key at all
    "bearer-ish ac_0123456789ab_" + "A" * 43,
    "Bearer ac_0123456789ab_" + "A" * 43,  # well-formed, unknown
    "Bearer ac_0123456789ab_" + "A" * 42 + "!",
    "Bearer ac_0123456789AB_" + "A" * 43,  # prefix digits are lower-case hex
    "Bearer " + "ac_" * 40_000,  # 120 kB
    "Bearer ac_0123456789ab_\x01\x02" + "A" * 41,
    "Bearer ' OR 1=1 --",
]


async def test_bad_keys_are_401_never_500(world: World, subtests: pytest.Subtests) -> None:
    # A wrong secret behind a real prefix, and a revoked key: test_keys_never_reach_a_log_line.
    for header in BAD_KEYS:
        credential = header.partition(" ")[2].strip()
        for method, path, body, _ok in [OWNED[0], UNOWNED[0], UNOWNED[1]]:
            with subtests.test(header=header[:40], method=method, path=path):
                response = await world.nobody.request(
                    method, world.path(path), json=body, headers={"Authorization": header}
                )
                assert_unauthorized(response, credential if len(credential) >= 8 else None)
    not_ascii = [(b"authorization", b"Bearer ac_\xff\xfe_\xe9t\xe9")]
    assert_unauthorized(await world.nobody.get(f"{API}/schedules", headers=not_ascii))


async def test_probes_and_the_openapi_document_need_no_key(world: World) -> None:
    assert (await world.nobody.get("/healthz")).status_code == 200
    assert (await world.nobody.get("/readyz")).status_code == 200
    assert (await world.nobody.get("/docs")).status_code == 200
    document = (await world.nobody.get("/openapi.json")).json()
    [(name, scheme)] = document["components"]["securitySchemes"].items()
    assert name == "apiKey" and scheme.pop("description")
    assert scheme == {"type": "http", "scheme": "bearer", "bearerFormat": "ac_<prefix>_<secret>"}
    for path, operations in document["paths"].items():
        for method, operation in operations.items():
            if path.startswith(API):
                assert operation.get("security") == [{"apiKey": []}], (method, path)
                assert "401" in operation["responses"], (method, path)
            else:
                assert "security" not in operation, (method, path)


# -- owners ----------------------------------------------------------------------------------


def blank(message: str, ids: dict[str, str]) -> str:
    for value in ids.values():
        message = message.replace(value, "ID")
    return message


async def test_another_owner_gets_404_and_changes_nothing(
    world: World, subtests: pytest.Subtests
) -> None:
    before = await world.snapshot()
    missing_ids = {name: str(uuid.uuid4()) for name in world.ids}
    for method, path, body, _ok in OWNED:
        with subtests.test(method=method, path=path):
            response = await world.bob.request(method, world.path(path), json=body)
            error = assert_error(response, 404, "NotFound")
            assert "alice" not in response.text
            # Exactly what a missing id answers: nothing tells "someone else's" apart.
            missing = await world.bob.request(method, path.format(**missing_ids), json=body)
            assert blank(error["error"]["message"], world.ids) == blank(
                assert_error(missing, 404, "NotFound")["error"]["message"], missing_ids
            )
    assert await world.snapshot() == before


# Each endpoint's own tests use an owner's (not an admin's) key on that owner's objects.
async def test_an_admin_may_use_every_endpoint_on_another_owners_objects(
    world: World, subtests: pytest.Subtests
) -> None:
    # One world for all: the deletions come last, the task's before its schedule's.
    deletions = [row for row in reversed(OWNED) if row[0] == "DELETE"]
    for method, path, body, ok in [row for row in OWNED if row[0] != "DELETE"] + deletions:
        with subtests.test(method=method, path=path):
            response = await world.admin.request(method, world.path(path), json=body)
            assert response.status_code == ok, response.text
            if ok != 204 and "owner" in response.json():
                assert response.json()["owner"] == "alice"  # the owner stays alice


async def test_lists_hold_only_the_callers_schedules_and_an_admin_sees_all(world: World) -> None:
    admins = await create_schedule(world.admin, name="root's")
    assert admins["owner"] == "root"  # an admin key creates as its own owner

    async def listed(http: httpx.AsyncClient) -> dict[str, str]:
        page = (await http.get(f"{API}/schedules", params={"limit": 500})).json()
        return {item["id"]: item["owner"] for item in page["items"]}

    alice_id = world.ids["schedule_id"]
    assert await listed(world.alice) == {alice_id: "alice"}
    assert await listed(world.bob) == {world.bob_schedule: "bob"}
    everyone = {alice_id: "alice", world.bob_schedule: "bob", admins["id"]: "root"}
    assert await listed(world.admin) == everyone
    # The runs list of alice's schedule: hers and the admin's to read, 404 for bob.
    runs = (await world.alice.get(f"{API}/schedules/{alice_id}/runs")).json()["items"]
    assert [run["id"] for run in runs] == [world.ids["run_id"]]
    assert (await world.admin.get(f"{API}/schedules/{alice_id}/runs")).json()["items"] == runs
    assert (await world.bob.get(f"{API}/schedules/{alice_id}/runs")).status_code == 404
    # Bob's runs of his own schedule do not include alice's.
    await world.bob.post(f"{API}/schedules/{world.bob_schedule}/run")
    bobs = (await world.bob.get(f"{API}/schedules/{world.bob_schedule}/runs")).json()["items"]
    assert len(bobs) == 1 and bobs[0]["id"] != world.ids["run_id"]
    # Page by page, newest first, the cursors do not cross owners either.
    bobs_ids = [world.bob_schedule]
    bobs_ids += [(await create_schedule(world.bob, name=f"bob {i}"))["id"] for i in range(3)]
    pages = await paged(world.bob, f"{API}/schedules", 1)
    assert [item["id"] for page in pages for item in page] == bobs_ids[::-1]


# -- secrets ---------------------------------------------------------------------------------


async def test_only_a_hash_of_the_key_is_stored(world: World, backend: str, db_url: str) -> None:
    db: Database = world.app.state.db
    key, record = await create_key(db, "dave")
    prefix, secret = key.split("_", 2)[1:]
    assert key == f"ac_{prefix}_{secret}" and len(secret) == 43
    async with db.session(write=False) as session:
        rows = (await session.execute(text("SELECT * FROM api_keys"))).mappings().all()
    (row,) = [row for row in rows if str(row["id"]).replace("-", "") == record.id.hex]
    assert row["key_hash"] == hashlib.sha256(key.encode()).hexdigest()
    assert row["prefix"] == prefix and row["owner"] == "dave" and not row["admin"]
    dumped = json.dumps([dict(r) for r in rows], default=str)
    assert secret not in dumped and key not in dumped
    if backend == "sqlite":
        # Nowhere in the database files either (main file and write-ahead log).
        path = Path(db_url.split("///", 1)[1])
        for file in path.parent.glob(path.name + "*"):
            assert secret.encode() not in file.read_bytes(), file


async def test_keys_never_reach_a_log_line(
    world: World, capsys: pytest.CaptureFixture[str], caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    db: Database = world.app.state.db
    with capture_logs() as logs:
        key, record = await create_key(db, "erin", admin=True)
        async with app_client(world.app, key) as erin:
            assert (await erin.get(f"{API}/schedules")).status_code == 200
        forged = key[:-6] + ("AAAAAA" if not key.endswith("AAAAAA") else "BBBBBB")
        for presented in (forged, key + "x", key.upper()):
            response = await world.nobody.get(f"{API}/schedules", headers=bearer(presented))
            assert_unauthorized(response, presented)
        await revoke_key(db, record.id)
        response = await world.nobody.get(f"{API}/schedules", headers=bearer(key))
        assert_unauthorized(response, key)
    assert any(event["event"] == "api_key_created" for event in logs)
    secret = key.split("_", 2)[2]
    output = capsys.readouterr()
    for seen in (repr(logs), caplog.text, output.out, output.err):
        assert secret not in seen and secret.upper() not in seen and forged not in seen


async def test_notify_secrets_are_masked_for_owners_and_admins(world: World) -> None:
    secret = "whsec_" + "MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
    mail = {"type": "email", "to": ["a@example.org"], "from": "b@example.org"}
    hook = {"type": "webhook", "url": "https://hooks.example.org/x", "secret": secret}
    notify = [hook, {**mail, "smtp_url_env": "SMTP_URL"}]
    created = await create_schedule(world.alice, notify=notify)
    answers = [
        created,
        (await world.alice.get(f"{API}/schedules/{created['id']}")).json(),
        (await world.admin.get(f"{API}/schedules/{created['id']}")).json(),
        (await world.admin.get(f"{API}/schedules")).json(),
    ]
    # The channels sent back as shown (masked) keep the secret.
    patch = {"name": "n", "notify": created["notify"]}
    patched = await world.admin.patch(f"{API}/schedules/{created['id']}", json=patch)
    assert patched.status_code == 200, patched.text
    answers.append(patched.json())
    key = secret.removeprefix("whsec_")
    for answer in answers:
        assert key not in json.dumps(answer)
    assert created["notify"][0]["secret"] == "whsec_…" + secret[-4:]
    assert patched.json()["notify"] == created["notify"]
    # Email channels hold no credentials: the SMTP URL stays in the service's environment, and
    # a password-bearing field is refused without being repeated.
    leaky = {**notify[1], "smtp_url": "smtp+starttls://me:hunter2hunter2@mail.example.org"}
    refused = await world.alice.post(f"{API}/schedules", json={**SCHEDULE, "notify": [leaky]})
    assert refused.status_code == 422 and "hunter2hunter2" not in refused.text
    bad_secret = {**notify[0], "secret": "whsec_not-base64-" + "Z" * 30}
    refused = await world.alice.post(f"{API}/schedules", json={**SCHEDULE, "notify": [bad_secret]})
    assert refused.status_code == 422 and bad_secret["secret"] not in refused.text


# -- core.keys -------------------------------------------------------------------------------


async def test_last_used_is_noted_at_most_once_a_minute(db: Database) -> None:
    key, record = await create_key(db, "frank")
    assert record.last_used_at is None
    t0 = datetime(2026, 12, 1, 9, 0, tzinfo=UTC)

    async def last_used() -> datetime | None:
        async with db.session(write=False) as session:
            return await session.scalar(select(ApiKey.last_used_at).where(ApiKey.id == record.id))

    principal = await authenticate(db, key, clock=lambda: t0)
    assert principal is not None and principal.owner == "frank" and not principal.admin
    assert principal.scope == "frank"
    assert await last_used() == t0
    await authenticate(db, key, clock=lambda: t0 + timedelta(seconds=10))
    assert await last_used() == t0
    later = t0 + LAST_USED_RESOLUTION + timedelta(seconds=1)
    await authenticate(db, key, clock=lambda: later)
    assert await last_used() == later

    admin = await authenticate(db, (await create_key(db, "ops", admin=True))[0])
    assert admin is not None and admin.admin and admin.scope is None and admin.owner == "ops"


@pytest.mark.parametrize("backend", ["sqlite"])  # refused before anything is written
@pytest.mark.parametrize("owner", ["", " ", "a b", "-x", "x" * 201, "a\x00b", "é"])
async def test_owner_names_are_checked(db: Database, owner: str) -> None:
    with pytest.raises(ValueError, match="an owner is"):
        await create_key(db, owner)


# -- the command line ------------------------------------------------------------------------


@pytest.fixture
def env(db_url: str, tmp_path: Path) -> dict[str, str]:
    """The command line's environment: this test's database, data directory, JSON logs."""
    ours = {"AGENTCRON_DATABASE_URL": db_url, "AGENTCRON_DATA_DIR": str(tmp_path / "data")}
    return {**os.environ, **ours, "AGENTCRON_LOG_FORMAT": "json"}


def cli(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [AGENTCRON, *args], env=env, capture_output=True, text=True, timeout=60, check=False
    )


@pytest.mark.parametrize("backend", ["sqlite"])
async def test_cli_keys_create_list_revoke(live_app: FastAPI, env: dict[str, str]) -> None:
    created = cli(env, "keys", "create", "--owner", "grace")
    assert created.returncode == 0, created.stderr
    key = created.stdout.strip().splitlines()[-1]
    assert key.startswith("ac_") and key.count("_") >= 2
    secret = key.split("_", 2)[2]
    assert secret not in created.stderr  # the log line names the key, never its secret

    async with app_client(live_app, key) as grace:
        made = await create_schedule(grace, name="grace's")
        assert made["owner"] == "grace"
        listed = (await grace.get(f"{API}/schedules")).json()["items"]
        assert [item["id"] for item in listed] == [made["id"]]

        listing = cli(env, "keys", "list")
        assert listing.returncode == 0, listing.stderr
        (line,) = [line for line in listing.stdout.splitlines() if "owner=grace" in line]
        assert f"ac_{key.split('_')[1]}_…" in line and "admin=no" in line
        assert secret not in listing.stdout + listing.stderr

        revoked = cli(env, "keys", "revoke", line.split()[0])
        assert revoked.returncode == 0, revoked.stderr
        assert_unauthorized(await grace.get(f"{API}/schedules"), key)

    assert cli(env, "keys", "revoke", str(uuid.uuid4())).returncode == 1
    refused = cli(env, "keys", "create", "--owner", "not valid")
    assert refused.returncode == 2 and "owner" in refused.stderr


@pytest.mark.parametrize("backend", ["sqlite"])
async def test_cli_example_prints_a_local_key_once(live_app: FastAPI, env: dict[str, str]) -> None:
    first = cli(env, "example")
    assert first.returncode == 0, first.stderr
    export = first.stdout.strip().splitlines()[-1]
    assert export.startswith("export AGENTCRON_KEY=ac_")
    key = export.removeprefix("export AGENTCRON_KEY=")
    assert key.split("_", 2)[2] not in first.stderr

    async with app_client(live_app, key) as local:
        items = (await local.get(f"{API}/schedules")).json()["items"]
    assert [item["name"] for item in items] == ["example: hello agent"]
    assert items[0]["owner"] == "local"

    again = cli(env, "example")
    assert again.returncode == 0, again.stderr
    assert "AGENTCRON_KEY=" not in again.stdout and "ac_" + key.split("_")[1] in again.stdout
    assert "agentcron keys create --owner local" in again.stdout
    # Still one example schedule, still one key.
    async with app_client(live_app, await issue_key(live_app, "root", admin=True)) as root:
        listed = await root.get(f"{API}/schedules")
    assert [item["name"] for item in listed.json()["items"]] == ["example: hello agent"]
    async with live_app.state.db.session(write=False) as session:
        owners = (await session.execute(select(ApiKey.owner))).scalars().all()
    assert sorted(owners) == ["local", "root"]
