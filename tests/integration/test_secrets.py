"""Stored secrets end to end, on SQLite and PostgreSQL: the write-only API, owners kept apart,
encryption at rest, references resolved by the engine (a real ``sh`` command, a real chat
server, a real webhook receiver), redaction, rotation, and the operator's key.

Every value used here is unique to the test, so "the value appears nowhere" is checked by a
plain substring search over every answer, row, log line and output the flow produced.
"""

from __future__ import annotations

import asyncio
import functools
import io
import json
import secrets as random
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import structlog
from cryptography.fernet import Fernet
from fastapi import FastAPI
from pydantic import SecretStr
from sqlalchemy import select, update

from agentcron.core.config import Settings
from agentcron.core.errors import StartupError
from agentcron.core.secrets.keyring import Keyring, SecretUnreadable
from agentcron.core.secrets.resolution import load, resolve
from agentcron.core.secrets.store import list_secrets, put_secret, reencrypt_all
from agentcron.core.storage.database import Database
from agentcron.core.storage.models import Run, Schedule, Secret
from agentcron.web.app import create_app
from agentcron.web.cli import main as cli_main
from tests.chat_server import ChatServer, Reply, completion
from tests.conftest import app_client, issue_key
from tests.integration.delivery_kit import created, owner, schedule_body, serving
from tests.integration.engine_kit import API, assert_error, finished, run_now, run_to_end
from tests.integration.test_edit_keeps_fields import _AppTransport
from tests.integration.test_webhook import Receiver, new_secret
from tests.network import SSH_BANNER, listening

KEY = Fernet.generate_key().decode()
ORIGIN = "http://agentcron.test"
ROOT = Path(__file__).resolve().parents[2]  # the checkout: `python -m web.cli` runs from there


def fresh_value(label: str = "value") -> str:
    return f"{label}-{random.token_urlsafe(18)}"


@pytest.fixture
def settings(settings: Settings) -> Settings:
    """The conftest settings with an operator's key (this module's tests store secrets)."""
    # These owners' own commands are the agents here: what tenants may run is test_tenants.py's
    # subject (core.policy).
    update = {"secrets_key": SecretStr(KEY), "trusted_owners": "local,alice,bob"}
    return settings.model_copy(update=update)


@pytest.fixture
async def engine_app(settings: Settings) -> AsyncIterator[FastAPI]:
    """The app with its engine running and loopback webhooks allowed."""
    async with serving(settings, allow_private_webhooks=True) as app:
        yield app


def agentcron(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    """``agentcron ARGS`` in a process of its own, with only ``env`` (and a PATH)."""
    argv = [sys.executable, "-m", "agentcron.web.cli", *args]
    env = {"PATH": "/usr/bin:/bin", "AGENTCRON_LOG_FORMAT": "json", **env}
    return subprocess.run(argv, env=env, capture_output=True, text=True, timeout=60, cwd=ROOT)


def command(script: str, env: dict[str, Any]) -> dict[str, Any]:
    return {"type": "command", "argv": ["sh", "-c", script], "env": env}


def openai_runner(base_url: str) -> dict[str, Any]:
    return {"type": "openai", "base_url": base_url, "model": "m", "api_key_secret": "llm"}


def email(smtp_url_secret: str) -> dict[str, Any]:
    to, sender = ["ops@example.org"], "agentcron@example.org"
    return {"type": "email", "to": to, "from": sender, "smtp_url_secret": smtp_url_secret}


async def put(http: httpx.AsyncClient, name: str, value: str) -> httpx.Response:
    return await http.put(f"{API}/secrets/{name}", json={"value": value})


def assert_absent(value: str, *texts: Any) -> None:
    for text in texts:
        shown = text if isinstance(text, str) else json.dumps(text, default=str)
        assert value not in shown, shown


# -- the API: write-only, per owner ---------------------------------------------------------------


async def test_a_secret_is_never_in_any_answer_row_or_log_line(
    engine_app: FastAPI,
    capsys: pytest.CaptureFixture[str],
    caplog: pytest.LogCaptureFixture,
) -> None:
    value = fresh_value("token")
    async with owner(engine_app, "alice") as http:
        with structlog.testing.capture_logs() as logs:
            stored = await put(http, "agent-token", value)
            assert stored.status_code == 200, stored.text
            assert set(stored.json()) == {"name", "created_at", "updated_at"}
            listed = await http.get(f"{API}/secrets")
            assert [item["name"] for item in listed.json()["items"]] == ["agent-token"]

            # The agent gets the value in its environment and prints it: the run's record
            # shows the name instead, and the file it wrote proves what it was given.
            script = 'printf %s "$TOKEN" > seen.txt; echo "token=$TOKEN"; echo "err $TOKEN" >&2'
            runner = command(script, {"TOKEN": {"secret": "agent-token"}, "MODE": "plain"})
            schedule = await created(http, schedule_body(runner))
            assert schedule["runner"]["env"]["TOKEN"] == {"secret": "agent-token"}
            queued = await run_now(http, schedule["id"])
            run = await finished(http, queued["id"])
            assert run["status"] == "succeeded", run
            assert run["output"] == "token=[secret:agent-token]\n"
            task = (await http.get(f"{API}/tasks/{run['task_id']}")).json()
            assert (Path(task["workdir"]) / "seen.txt").read_text() == value

            answers = [stored.json(), listed.json(), schedule, queued, run, task]
            one = f"{API}/schedules/{schedule['id']}"
            read = (one, f"{API}/schedules", f"{one}/runs")
            answers += [(await http.get(path)).json() for path in read]
            answers.append((await http.get("/metrics")).text)
            # A replay re-runs the saved payload: the reference, resolved again.
            replay = await http.post(f"{API}/runs/{run['id']}/replay")
            assert replay.status_code == 202, replay.text
            replayed = await finished(http, replay.json()["id"])
            assert replayed["output"] == "token=[secret:agent-token]\n"
            answers += [replay.json(), replayed]
        db: Database = engine_app.state.db
        async with db.session(write=False) as session:
            rows = [
                {c.key: getattr(row, c.key) for c in type(row).__table__.columns}
                for model in (Run, Schedule, Secret)
                for row in (await session.scalars(select(model))).all()
            ]
    assert_absent(value, *answers, rows)
    payloads = [row["payload"] for row in rows if "payload" in row]
    assert all(p["runner"]["env"]["TOKEN"] == {"secret": "agent-token"} for p in payloads)
    assert logs, "structlog capture saw nothing: the log check would prove nothing"
    output = capsys.readouterr()
    assert_absent(value, repr(logs), caplog.text, output.out, output.err)


async def test_bad_input_is_refused_by_field_replace_keeps_created_at_delete_is_once(
    client: httpx.AsyncClient,
) -> None:
    # Which names and values are refused is tests/unit/test_secrets.py's table; here, that the
    # API names the field, and a NUL never reaches PostgreSQL.
    for name, body, field in [
        ("-dash", {"value": "v"}, "name"),
        ("ok", {"value": "a\u0000b"}, "value"),
        ("ok", {"value": 5}, "value"),
        ("ok", {"value": "v", "extra": 1}, "extra"),
    ]:
        assert_error(await client.put(f"{API}/secrets/{name}", json=body), 422, field=field)
    assert (await client.get(f"{API}/secrets")).json() == {"items": []}

    first = (await put(client, "llm", fresh_value())).json()
    second = await put(client, "llm", fresh_value())
    assert second.status_code == 200
    assert second.json()["created_at"] == first["created_at"]
    assert second.json()["updated_at"] >= first["updated_at"]
    assert len((await client.get(f"{API}/secrets")).json()["items"]) == 1

    gone = await client.delete(f"{API}/secrets/llm")
    assert gone.status_code == 204 and gone.content == b""
    again = assert_error(await client.delete(f"{API}/secrets/llm"), 404, "NotFound")
    assert again["error"] == {"type": "NotFound", "message": "secret llm not found", "field": None}
    assert (await client.get(f"{API}/secrets")).json() == {"items": []}


async def test_another_owner_cannot_see_use_or_delete_a_secret(live_app: FastAPI) -> None:
    value = fresh_value()
    runner = command("true", {"TOKEN": {"secret": "shared"}})
    async with (
        owner(live_app, "alice") as alice,
        owner(live_app, "bob") as bob,
        owner(live_app, "ops", admin=True) as admin,
    ):
        assert (await put(alice, "shared", value)).status_code == 200
        assert (await bob.get(f"{API}/secrets")).json() == {"items": []}
        assert (await admin.get(f"{API}/secrets")).json() == {"items": []}  # its own owner's
        assert (await bob.delete(f"{API}/secrets/shared")).status_code == 404

        refused = await bob.post(f"{API}/schedules", json=schedule_body(runner))
        error = assert_error(refused, 422, "InvalidSchedule", field="runner.env.TOKEN")["error"]
        assert "'shared'" in error["message"]

        # Bob's own secret of the same name is his, apart from Alice's.
        assert (await put(bob, "shared", fresh_value())).status_code == 200
        assert (await bob.post(f"{API}/schedules", json=schedule_body(runner))).status_code == 201
        listed = (await alice.get(f"{API}/secrets")).json()["items"]
        assert [item["name"] for item in listed] == ["shared"]
        keyring: Keyring = live_app.state.keyring
        found = await resolve(live_app.state.db, "alice", {"shared"}, keyring=keyring)
        assert found == {"shared": value}

        # An admin editing Alice's schedule refers to Alice's secrets, not its own.
        mine = await created(alice, schedule_body(command("true", {})))
        assert (await put(admin, "admins-only", fresh_value())).status_code == 200
        for name, status in (("admins-only", 422), ("shared", 200)):
            patch = {"runner": command("true", {"TOKEN": {"secret": name}})}
            response = await admin.patch(f"{API}/schedules/{mine['id']}", json=patch)
            assert response.status_code == status, response.text


async def test_references_are_checked_at_create_and_update(client: httpx.AsyncClient) -> None:
    openai = openai_runner("https://llm.example.com/v1")
    webhook = {"type": "webhook", "url": "https://hooks.example.com/x", "secret": {"secret": "h"}}
    cases = [
        (schedule_body(openai), "runner.api_key_secret", "llm"),
        (schedule_body(command("true", {}), notify=[webhook]), "notify.0.secret", "h"),
        (schedule_body(command("true", {}), notify=[email("s")]), "notify.0.smtp_url_secret", "s"),
    ]
    for body, field, name in cases:
        response = await client.post(f"{API}/schedules", json=body)
        error = assert_error(response, 422, field=field)["error"]
        assert repr(name) in error["message"]
        assert f"agentcron secrets set {name}" in error["message"]
    assert (await client.get(f"{API}/schedules")).json()["items"] == []

    for name in ("llm", "h", "s"):
        assert (await put(client, name, new_secret())).status_code == 200
    ids = [(await created(client, body))["id"] for body, _, _ in cases]
    shown = (await client.get(f"{API}/schedules/{ids[1]}")).json()
    assert shown["notify"][0]["secret"] == {"secret": "h"}

    patch = {"runner": {**openai, "api_key_secret": "missing"}}
    response = await client.patch(f"{API}/schedules/{ids[0]}", json=patch)
    assert_error(response, 422, field="runner.api_key_secret")
    # Deleted since: an edit that does not touch the reference still works.
    assert (await client.delete(f"{API}/secrets/llm")).status_code == 204
    renamed = await client.patch(f"{API}/schedules/{ids[0]}", json={"name": "renamed"})
    assert renamed.status_code == 200, renamed.text


# -- at rest ----------------------------------------------------------------------------------


async def test_the_value_is_encrypted_at_rest_and_bound_to_owner_and_name(
    db: Database, backend: str, db_url: str
) -> None:
    keyring = Keyring([KEY])
    value = fresh_value()
    await put_secret(db, "alice", "llm", value, keyring=keyring)
    async with db.session(write=False) as session:
        row = await session.scalar(select(Secret))
    assert row is not None and (row.owner, row.name) == ("alice", "llm")
    assert value not in row.ciphertext
    if backend == "sqlite":
        # Nowhere in the database files either (main file and write-ahead log).
        path = Path(db_url.split("///", 1)[1])
        for file in path.parent.glob(path.name + "*"):
            assert value.encode() not in file.read_bytes(), file
    assert await resolve(db, "alice", ["llm"], keyring=keyring) == {"llm": value}

    # The row moved to another owner, then renamed: it decrypts for neither.
    async with db.session() as session:
        await session.execute(update(Secret).values(owner="mallory"))
    with pytest.raises(SecretUnreadable, match="'llm' cannot be decrypted"):
        await resolve(db, "mallory", ["llm"], keyring=keyring)
    async with db.session() as session:
        await session.execute(update(Secret).values(owner="alice", name="other"))
    with pytest.raises(SecretUnreadable):
        await resolve(db, "alice", ["other"], keyring=keyring)
    missing = await load(db, "alice", ["llm"], keyring=keyring)
    assert "no longer exists" in missing.problems["llm"].message


async def test_rotation_with_two_keys(db: Database) -> None:
    old_key, new_key = KEY, Fernet.generate_key().decode()
    old, both, new = Keyring([old_key]), Keyring([new_key, old_key]), Keyring([new_key])
    values = {"a": "first value", "b": "second value"}
    await put_secret(db, "alice", "a", values["a"], keyring=old)
    await put_secret(db, "alice", "b", values["b"], keyring=both)
    assert await resolve(db, "alice", ["a", "b"], keyring=both) == values
    with pytest.raises(SecretUnreadable, match="'a'"):
        await resolve(db, "alice", ["a", "b"], keyring=new)
    assert await reencrypt_all(db, both, batch=1) == 2
    assert await resolve(db, "alice", ["a", "b"], keyring=new) == values
    assert [info.name for info in await list_secrets(db, "alice")] == ["a", "b"]


async def test_replicas_storing_one_new_secret_at_once_store_one(db: Database, db_url: str) -> None:
    # Two replicas (a database engine each) race to store a name neither has: the one the
    # unique (owner, name) refuses replaces the other's, and a value of one of them is kept.
    keyring = Keyring([KEY])
    other = Database(db_url)
    try:
        for round in range(5):
            name = f"race-{round}"
            values = [f"value {round}.{n}" for n in range(4)]
            pairs = zip([db, other, db, other], values, strict=True)
            writes = (put_secret(d, "alice", name, value, keyring=keyring) for d, value in pairs)
            stored = await asyncio.gather(*writes)
            assert {info.created_at for info in stored} == {stored[0].created_at}, round
            assert [info.name for info in await list_secrets(db, "alice")].count(name) == 1
            assert (await resolve(db, "alice", [name], keyring=keyring))[name] in values
    finally:
        await other.dispose()


# -- the operator's key -------------------------------------------------------------------------


@pytest.mark.parametrize("backend", ["sqlite"])  # the app refuses, nothing stored
async def test_without_a_key_storing_is_refused_naming_the_setting(settings: Settings) -> None:
    app = create_app(settings.model_copy(update={"secrets_key": None}))
    async with app.router.lifespan_context(app), app_client(app, await issue_key(app)) as http:
        error = assert_error(await put(http, "llm", "v"), 409, "Conflict")["error"]
        assert "AGENTCRON_SECRETS_KEY" in error["message"]
        assert "agentcron secrets-key" in error["message"]
        assert (await http.get(f"{API}/secrets")).json() == {"items": []}


@pytest.mark.parametrize("backend", ["sqlite"])
async def test_a_malformed_key_refuses_to_start(settings: Settings, tmp_path: Path) -> None:
    bad = settings.model_copy(update={"secrets_key": SecretStr("x")})
    app = create_app(bad)
    with pytest.raises(StartupError, match="AGENTCRON_SECRETS_KEY is not valid"):
        async with app.router.lifespan_context(app):
            pass
    # `agentcron serve` says so in one line, before it opens anything.
    env = {"AGENTCRON_SECRETS_KEY": "not-a-fernet-key", "AGENTCRON_DATABASE_URL": bad.database_url}
    done = await asyncio.to_thread(agentcron, env, "serve", "--port", "0")
    assert done.returncode == 2, done
    assert "cannot start: AGENTCRON_SECRETS_KEY is not valid: key 1 of 1" in done.stderr
    assert "Traceback" not in done.stderr and "not-a-fernet-key" not in done.stderr


# -- references at run time ---------------------------------------------------------------------


async def test_a_secret_deleted_since_fails_the_run_naming_it(engine_app: FastAPI) -> None:
    async with owner(engine_app, "alice") as http:
        assert (await put(http, "agent-token", fresh_value())).status_code == 200
        runner = command('echo "$TOKEN"', {"TOKEN": {"secret": "agent-token"}})
        schedule = await created(http, schedule_body(runner))
        assert (await http.delete(f"{API}/secrets/agent-token")).status_code == 204
        run = await run_to_end(http, schedule["id"])
        assert run["status"] == "failed" and run["attempt"] == 1
        assert "secret 'agent-token' no longer exists" in run["error"]
        # As any runner that can no longer work: the schedule pauses, saying why.
        after = (await http.get(f"{API}/schedules/{schedule['id']}")).json()
        assert after["enabled"] is False and "agent-token" in after["paused_note"]


async def test_openai_runner_sends_the_stored_key_and_its_echo_is_redacted(
    engine_app: FastAPI,
) -> None:
    value = fresh_value("sk")
    async with ChatServer() as server:
        server.script(Reply(json=completion(f"you gave me {value}, thanks")))
        async with owner(engine_app, "alice") as http:
            assert (await put(http, "llm", value)).status_code == 200
            runner = openai_runner(server.base_url)
            schedule = await created(http, schedule_body(runner, mode="persistent"))
            run = await run_to_end(http, schedule["id"])
            task = (await http.get(f"{API}/tasks/{run['task_id']}")).json()
    assert run["status"] == "succeeded", run
    (request,) = server.requests
    assert request.headers["authorization"] == f"Bearer {value}"
    assert run["output"] == "you gave me [secret:llm], thanks"
    assert task["conversation"][-1]["content"] == "you gave me [secret:llm], thanks"
    assert_absent(value, run, task, schedule)


async def test_a_webhook_signed_with_a_stored_secret_verifies(
    engine_app: FastAPI,
    receiver: Receiver,
    secret: str,
    capsys: pytest.CaptureFixture[str],
    caplog: pytest.LogCaptureFixture,
) -> None:
    notify = [
        {"type": "webhook", "url": receiver.url(), "secret": {"secret": "hook"}},
        {"type": "webhook", "url": receiver.url("/bad"), "secret": {"secret": "not-a-hook"}},
    ]
    with structlog.testing.capture_logs() as logs:
        async with owner(engine_app, "alice") as http:
            assert (await put(http, "hook", secret)).status_code == 200
            assert (await put(http, "not-a-hook", fresh_value("plain"))).status_code == 200
            schedule = await created(http, schedule_body(command("echo done", {}), notify=notify))
            run = await run_to_end(http, schedule["id"], delivered=True)
            shown = (await http.get(f"{API}/schedules/{schedule['id']}")).json()
    assert [d["status"] for d in run["deliveries"]] == ["delivered", "failed"]
    (got,) = receiver.requests  # the second channel never connected
    assert got.verify_error is None and got.headers["webhook-id"] == f"{run['id']}.0"
    bad = run["deliveries"][1]
    assert bad["attempts"] == 1
    assert "stored secret 'not-a-hook' is not a webhook signing secret" in bad["error"]
    assert [c["secret"] for c in shown["notify"]] == [{"secret": "hook"}, {"secret": "not-a-hook"}]
    assert logs, "structlog capture saw nothing: the log check would prove nothing"
    output = capsys.readouterr()
    assert_absent(secret, run, shown, repr(logs), caplog.text, output.out, output.err)
    assert_absent(secret.removeprefix("whsec_"), repr(logs), caplog.text, output.out, output.err)


async def test_a_stored_smtp_url_at_a_private_address_fails_its_delivery_unconnected(
    settings: Settings,
) -> None:
    """The whole path of an owner's SMTP URL with the operator's default (private destinations
    refused): stored, referred to, delivered by the engine. The delivery fails at once saying
    why, and the service behind the URL never sees a connection."""
    async with (
        serving(settings) as app,
        listening(SSH_BANNER) as service,
        owner(app, "alice") as http,
    ):
        url = f"smtp://127.0.0.1:{service.port}"
        assert (await put(http, "smtp", url)).status_code == 200
        body = schedule_body(command("echo done", {}), notify=[email("smtp")])
        schedule = await created(http, body)
        run = await run_to_end(http, schedule["id"], delivered=True)
    [delivery] = run["deliveries"]
    assert (delivery["status"], delivery["attempts"]) == ("failed", 1), delivery
    assert "127.0.0.1 is a loopback address" in delivery["error"], delivery["error"]
    assert service.connections == 0


# -- the command line ---------------------------------------------------------------------------


async def cli(app: FastAPI, monkeypatch: pytest.MonkeyPatch, key: str, *args: str) -> int:
    """``agentcron ARGS --url ... --key KEY`` in a worker thread, answered by ``app``."""
    transport = _AppTransport(app, asyncio.get_running_loop())
    monkeypatch.setattr(httpx, "Client", functools.partial(httpx.Client, transport=transport))
    return await asyncio.to_thread(cli_main, [*args, "--url", ORIGIN, "--key", key])


@pytest.mark.parametrize("backend", ["sqlite"])  # a client of the API
async def test_the_command_line_sets_lists_and_deletes_without_showing_values(
    live_app: FastAPI, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    key = await issue_key(live_app, "alice")
    keyring: Keyring = live_app.state.keyring
    piped, typed = fresh_value("piped"), fresh_value("typed")

    monkeypatch.setattr(sys, "stdin", io.StringIO(f"{piped}\n"))  # as `echo ... |` sends it
    assert await cli(live_app, monkeypatch, key, "secrets", "set", "from-stdin") == 0
    assert await cli(live_app, monkeypatch, key, "secrets", "set", "inline", "--value", typed) == 0
    found = await resolve(live_app.state.db, "alice", ["from-stdin", "inline"], keyring=keyring)
    assert found == {"from-stdin": piped, "inline": typed}
    said = capsys.readouterr()
    assert "stored secret from-stdin" in said.out and "stored secret inline" in said.out

    assert await cli(live_app, monkeypatch, key, "secrets", "list") == 0
    table = capsys.readouterr().out
    assert "from-stdin" in table and "inline" in table
    assert await cli(live_app, monkeypatch, key, "secrets", "list", "--json") == 0
    listed = json.loads(capsys.readouterr().out.splitlines()[-1])
    assert [item["name"] for item in listed["items"]] == ["from-stdin", "inline"]

    assert await cli(live_app, monkeypatch, key, "secrets", "delete", "inline", "--json") == 0
    # The last line: the in-process service's own log lines go to stdout too.
    deleted = json.loads(capsys.readouterr().out.splitlines()[-1])
    assert deleted == {"name": "inline", "deleted": True}
    assert await cli(live_app, monkeypatch, key, "secrets", "delete", "inline") == 1
    assert "HTTP 404 NotFound: secret inline not found" in capsys.readouterr().err

    monkeypatch.setattr(sys, "stdin", io.StringIO(""))
    assert await cli(live_app, monkeypatch, key, "secrets", "set", "empty") == 2
    assert "no value" in capsys.readouterr().err
    after = capsys.readouterr()
    assert_absent(piped, after.out, after.err)
    assert_absent(typed, after.out, after.err)


def test_secrets_key_prints_a_key_the_service_accepts(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli_main(["secrets-key"]) == 0
    printed = capsys.readouterr().out.strip()
    assert Keyring.from_setting(printed) is not None
    assert cli_main(["secrets-key"]) == 0
    assert capsys.readouterr().out.strip() != printed


@pytest.mark.parametrize("backend", ["sqlite"])
async def test_secrets_rotate_reencrypts_under_the_first_key(db: Database, db_url: str) -> None:
    old_key, new_key = KEY, Fernet.generate_key().decode()
    for index in range(3):
        await put_secret(db, f"owner{index}", "s", f"value {index}", keyring=Keyring([old_key]))
    env = {"AGENTCRON_SECRETS_KEY": f"{new_key},{old_key}", "AGENTCRON_DATABASE_URL": db_url}
    done = await asyncio.to_thread(agentcron, env, "secrets-rotate")
    assert done.returncode == 0, done
    assert "re-encrypted 3 secret(s)" in done.stdout
    for index in range(3):
        owner = f"owner{index}"
        found = await resolve(db, owner, ["s"], keyring=Keyring([new_key]))
        assert found == {"s": f"value {index}"}
