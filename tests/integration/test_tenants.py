"""Tenants get only what the operator allows (``core.policy``), through the public API: a
tenant's own command, a runner type not listed, a service variable, a private model endpoint
are each refused with a 422 naming the field and saying what is allowed; a declared agent runs
with the tenant's parameters; admin keys and the local owner keep today's freedom, so the
quickstart still works as written. The rules are the API's, before any storage: SQLite alone,
but for what the database stores of a tenant's record."""

from __future__ import annotations

import textwrap
from collections.abc import AsyncIterator
from datetime import timedelta
from ipaddress import ip_address
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi import FastAPI

from agentcron.core.config import Settings
from agentcron.core.notify.ssrf import IPAddress
from agentcron.core.policy import ExecutionPolicy, PolicyConfigError, load_agents
from agentcron.testing.kit import SettableClock
from agentcron.web.app import create_app
from tests.chat_server import ChatServer
from tests.conftest import app_client, issue_key
from tests.integration.engine_kit import assert_error, run_to_end
from tests.integration.test_secrets import created as created_schedule

AGENTS = """
[agents.echo-topic]
description = "Writes its topic, then echoes the prompt"
argv = ["sh", "-c", "echo topic=$1 $FIXED; cat", "echo-topic", "{topic}"]
env = { FIXED = "set-by-operator" }
tenant_env = ["STYLE"]

[agents.echo-topic.params.topic]
pattern = "[a-z ]{1,20}"

[agents.plain]
argv = ["sh", "-c", "cat"]
"""


@pytest.fixture
def backend() -> str:
    return "sqlite"


@pytest.fixture
def settings(settings: Settings, tmp_path: Path) -> Settings:
    """The conftest settings with the engine on and this file's operator configuration."""
    agents_file = tmp_path / "agents.toml"
    agents_file.write_text(AGENTS)
    operator = {"agents_file": agents_file, "tenant_env": "SHARED_MODEL_KEY"}
    operator |= {"tenant_endpoints": "http://127.0.0.1:11434/", "scheduler_tick_seconds": 0.2}
    return settings.model_copy(update={**operator, "disable_scheduler": False})


@pytest.fixture
async def tenant(live_app: FastAPI) -> AsyncIterator[httpx.AsyncClient]:
    async with app_client(live_app, await issue_key(live_app, "acme")) as http:
        yield http


def schedule(runner: dict[str, Any], **fields: Any) -> dict[str, Any]:
    return {
        "name": "tenant job",
        "prompt": "hello from the tenant",
        "trigger": {"every_seconds": 3600},
        "runner": runner,
        **fields,
    }


OPENAI = {"type": "openai", "base_url": "https://api.openai.com/v1", "model": "gpt-4o-mini"}


def refused(response: httpx.Response, field: str, *words: str) -> None:
    error = assert_error(response, 422, "InvalidSchedule", field=field)["error"]
    for word in words:
        assert word in error["message"], error["message"]


MAIL = {"type": "email", "to": ["a@example.org"], "from": "b@example.org"}
SHARED_KEY = {**OPENAI, "api_key_env": "SHARED_MODEL_KEY"}


async def test_a_tenants_own_command_is_refused_naming_what_is_allowed(
    tenant: httpx.AsyncClient,
) -> None:
    attack = {"type": "command", "argv": ["sh", "-c", "env; ls -R ../../; cat ../*/notes.txt"]}
    response = await tenant.post("/api/v1/schedules", json=schedule(attack))
    refused(response, "runner.argv", "a command of its own", "openai", "echo-topic", "plain")
    assert (await tenant.get("/api/v1/schedules")).json()["items"] == []


async def test_a_runner_type_the_operator_did_not_list_is_refused(
    tenant: httpx.AsyncClient,
) -> None:
    python = {"type": "python", "target": "tests.agents_fixture:greet"}
    refused(await tenant.post("/api/v1/schedules", json=schedule(python)), "runner.type")


async def test_naming_a_service_variable_is_refused(tenant: httpx.AsyncClient) -> None:
    stolen = {**OPENAI, "api_key_env": "AGENTCRON_DATABASE_URL"}
    response = await tenant.post("/api/v1/schedules", json=schedule(stolen))
    refused(response, "runner.api_key_env", "AGENTCRON_DATABASE_URL", "SHARED_MODEL_KEY")
    mail = {**MAIL, "smtp_url_env": "OPENAI_API_KEY"}
    response = await tenant.post("/api/v1/schedules", json=schedule(SHARED_KEY, notify=[mail]))
    refused(response, "notify.0.smtp_url_env", "OPENAI_API_KEY")
    assert (await tenant.post("/api/v1/schedules", json=schedule(SHARED_KEY))).status_code == 201


@pytest.mark.parametrize("backend", ["sqlite", "postgresql"])  # compared with what was stored
async def test_a_tenants_unchanged_record_put_again_moves_nothing(
    live_app: FastAPI, tenant: httpx.AsyncClient
) -> None:
    # The tenant rules rewrite what a tenant stores (an openai runner gets private_endpoints):
    # the record put again must still compare equal to what was stored from it.
    clock = SettableClock()
    live_app.state.schedules.context.clock = clock
    body = schedule(SHARED_KEY, notify=[{**MAIL, "smtp_url_env": "SHARED_MODEL_KEY"}])
    first = await tenant.put("/api/v1/schedules/by-key/job", json=body)
    assert first.status_code == 201, first.text
    clock.jump_to(clock() + timedelta(minutes=20))
    again = await tenant.put("/api/v1/schedules/by-key/job", json=body)
    assert again.status_code == 200, again.text
    assert again.json() == first.json()


async def test_a_private_model_endpoint_is_refused_unless_the_operator_allows_it(
    tenant: httpx.AsyncClient,
) -> None:
    # Which endpoints are private or the operator's: tests/unit/test_tenant_endpoints.py.
    runner = {**SHARED_KEY, "base_url": "http://169.254.169.254/"}
    refused(await tenant.post("/api/v1/schedules", json=schedule(runner)), "runner.base_url")
    local = {**runner, "base_url": "http://127.0.0.1:11434/v1"}  # AGENTCRON_TENANT_ENDPOINTS
    assert (await tenant.post("/api/v1/schedules", json=schedule(local))).status_code == 201


async def test_a_declared_agent_takes_only_its_parameters_and_variables(
    tenant: httpx.AsyncClient,
) -> None:
    ai = {"topic": "ai"}
    # The runner's fields besides type and agent (echo-topic unless named), the field refused
    # and what its message says.
    for fields, field, says in [
        ({}, "runner.params.topic", "needs"),
        ({"params": {"topic": "--exec=rm"}}, "runner.params.topic", "[a-z ]{1,20}"),
        ({"params": {**ai, "flag": "x"}}, "runner.params.flag", "topic"),
        ({"params": ai, "env": {"LD_PRELOAD": "/tmp/x.so"}}, "runner.env.LD_PRELOAD", "STYLE"),
        ({"params": ai, "argv": ["sh"]}, "runner.argv", "not both"),
        ({"agent": "rootshell"}, "runner.agent", "echo-topic"),
    ]:
        runner = {"type": "command", "agent": "echo-topic", **fields}
        refused(await tenant.post("/api/v1/schedules", json=schedule(runner)), field, says)

    good = {"type": "command", "agent": "echo-topic", "params": {"topic": "ai news"}}
    good["env"] = {"STYLE": "terse"}
    created = await tenant.post("/api/v1/schedules", json=schedule(good))
    assert created.status_code == 201, created.text
    assert created.json()["runner"] == good


async def test_a_tenant_cannot_patch_its_way_to_a_command(tenant: httpx.AsyncClient) -> None:
    runner = {"type": "command", "agent": "plain"}
    created = (await tenant.post("/api/v1/schedules", json=schedule(runner))).json()
    patch = {"runner": {"type": "command", "argv": ["sh", "-c", "env"]}}
    response = await tenant.patch(f"/api/v1/schedules/{created['id']}", json=patch)
    refused(response, "runner.argv")
    stored = (await tenant.get(f"/api/v1/schedules/{created['id']}")).json()
    assert stored["runner"] == runner
    # A change that does not touch the runner is not held against it.
    renamed = await tenant.patch(f"/api/v1/schedules/{created['id']}", json={"name": "x"})
    assert renamed.status_code == 200, renamed.text


async def test_a_declared_agent_runs_with_the_tenants_parameters(tenant: httpx.AsyncClient) -> None:
    runner = {"type": "command", "agent": "echo-topic", "params": {"topic": "ai news"}}
    created = await created_schedule(tenant, schedule(runner))
    ended = await run_to_end(tenant, created["id"])
    assert ended["status"] == "succeeded", ended["error"]
    assert ended["output"] == "topic=ai news set-by-operator\nhello from the tenant"


@pytest.mark.parametrize("who", ["admin", "local"])
async def test_admin_keys_and_the_local_owner_keep_every_runner(
    live_app: FastAPI, who: str
) -> None:
    key = await issue_key(live_app, "root", admin=True) if who == "admin" else None
    key = key or await issue_key(live_app)  # owner "local": what `make run` prints
    async with app_client(live_app, key) as http:
        own = {"type": "command", "argv": ["sh", "-c", "echo hi"]}
        assert (await http.post("/api/v1/schedules", json=schedule(own))).status_code == 201
        private = {**OPENAI, "base_url": "http://127.0.0.1:9/v1", "api_key_env": "ANY_VAR"}
        response = await http.post("/api/v1/schedules", json=schedule(private))
        assert response.status_code == 201, response.text


# -- the operator's configuration ---------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ("[agents.x]\nargv = 'sh'\n", "agents.x.argv"),
        ('[agents.x]\nargv = ["sh", "{nope}"]\n', "{nope} is not a declared param"),
        ('[agents.x]\nargv = ["sh"]\n[agents.x.params.p]\npattern = "("\n', "params.p.pattern"),
        ('[agents.x]\nargv = ["sh"]\nshell = true\n', "unknown key 'shell'"),
        ("[agents\n", "not valid TOML"),
        ('[agents."bad name"]\nargv = ["sh"]\n', "a name is"),
    ],
)
def test_a_bad_agents_file_is_refused_naming_the_key(tmp_path: Path, text: str, words: str) -> None:
    path = tmp_path / "agents.toml"
    path.write_text(textwrap.dedent(text))
    with pytest.raises(PolicyConfigError) as caught:
        load_agents(path)
    assert words in caught.value.message and str(path) in caught.value.message


def test_a_bad_agents_file_refuses_the_start(tmp_path: Path) -> None:
    path = tmp_path / "agents.toml"
    path.write_text("[agents.x]\nargv = []\n")
    settings = Settings(database_url="sqlite+aiosqlite:///unused.db", agents_file=path)
    with pytest.raises(PolicyConfigError, match="agents.x.argv"):
        create_app(settings)
    missing = Settings(database_url="sqlite+aiosqlite:///u.db", agents_file=tmp_path / "no")
    with pytest.raises(PolicyConfigError, match="cannot be read"):
        ExecutionPolicy.from_settings(missing)


async def test_a_tenants_model_host_resolving_to_a_private_address_is_refused_at_run_time(
    tenant: httpx.AsyncClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A name is judged when the run connects, not only when the schedule is saved: a name
    that resolves to loopback (DNS rebinding, or a name of the service's own network) never
    receives the tenant's request."""
    async with ChatServer() as server:
        port = server.base_url.rsplit(":", 1)[1].split("/")[0]
        resolved: list[str] = []

        async def rebinding(host: str, port: int) -> list[IPAddress]:
            resolved.append(host)
            return [ip_address("127.0.0.1")]

        monkeypatch.setattr("agentcron.core.runners.openai.runner.resolve", rebinding)
        monkeypatch.setenv("SHARED_MODEL_KEY", "sk-shared")
        base_url = f"http://models.example:{port}/v1"
        runner = {**OPENAI, "base_url": base_url, "api_key_env": "SHARED_MODEL_KEY"}
        created = await created_schedule(tenant, schedule(runner))
        assert created["runner"]["private_endpoints"] is False  # confined, and says so
        ended = await run_to_end(tenant, created["id"])
        assert ended["status"] == "failed" and "loopback" in ended["error"], ended["error"]
        assert resolved == ["models.example"] and server.requests == []
