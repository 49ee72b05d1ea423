"""The MCP server as an agent's host uses it: the SDK's own client against a real
``agentcron serve`` process, over stdio (a real ``agentcron mcp`` process started from the
README's client configuration) and over the streamable-HTTP transport at ``/mcp`` (the README's
URL and header). One server serves the whole module; each test keeps to its own schedules.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import AsyncIterator, Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import httpx2
import pytest
from mcp import Client, StdioServerParameters
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError
from mcp_types import CallToolResult, TextContent, TextResourceContents

from agentcron.web.mcp.tools import TOOLS
from tests.e2e.conftest import (
    AGENTCRON,
    Server,
    free_port,
    make_key,
    migrate,
    sqlite_env,
    start_server,
    wait_for,
)
from tests.e2e.test_serve import readme_block

# The module's tests share one server: `make test` (--dist loadgroup) keeps them on one
# xdist worker, or each worker that got one of them would start a server of its own.
pytestmark = pytest.mark.xdist_group("mcp-server")

TRANSPORTS = ("stdio", "http")
ECHO = {"type": "command", "argv": ["sh", "-c", "echo agent got: $(cat)"]}
FINISHED = {"succeeded", "failed", "timed_out", "cancelled", "skipped"}
README_KEY = "ac_3f9c1e07a2b4_Yq0…"


@dataclass
class Service:
    server: Server
    key: str  # owner "local" (trusted: may run commands)
    other_key: str  # owner "bob"


@pytest.fixture(scope="module")
def service(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Service]:
    tmp = tmp_path_factory.mktemp("mcp")
    env = sqlite_env(tmp)
    migrate(env)
    # Both keys at once: each is a real `agentcron keys create` process, a second or two.
    with ThreadPoolExecutor(2) as pool:
        keys = tuple(pool.map(lambda owner: make_key(env, owner), ("local", "bob")))
    server = start_server(env, tmp / "server.log")
    try:
        yield Service(server, *keys)
    finally:
        server.stop()


def readme_config(marker: str) -> dict[str, Any]:
    """The one MCP server of the README's client configuration block ``marker``."""
    servers: dict[str, Any] = json.loads(readme_block(marker, "json"))["mcpServers"]
    assert list(servers) == ["agentcron"]
    config: dict[str, Any] = servers["agentcron"]
    return config


def stdio_client(service: Service, key: str) -> Client:
    """``agentcron mcp`` as the README configures it, this service's URL and ``key`` in."""
    config = readme_config("mcp-stdio")
    assert config["command"] == "agentcron"
    env = {
        name: value.replace("http://127.0.0.1:8000", service.server.url).replace(README_KEY, key)
        for name, value in config["env"].items()
    }
    return Client(StdioServerParameters(command=AGENTCRON, args=config["args"], env=env))


@asynccontextmanager
async def http_client(service: Service, key: str | None) -> AsyncIterator[Client]:
    """The README's HTTP configuration: its URL on this service, its header with ``key``."""
    config = readme_config("mcp-http")
    assert config["type"] == "http"
    url = config["url"].replace("http://127.0.0.1:8000", service.server.url)
    headers: dict[str, str] = {}
    if key is not None:
        headers = {
            name: value.replace(README_KEY, key) for name, value in config["headers"].items()
        }
    async with (
        httpx2.AsyncClient(headers=headers) as http,
        Client(streamable_http_client(url, http_client=http)) as client,
    ):
        yield client


Connect = Callable[[str], AbstractAsyncContextManager[Client]]


@pytest.fixture(params=TRANSPORTS)
def connect(request: pytest.FixtureRequest, service: Service) -> Connect:
    """Opens an MCP client session of one transport, calling as the owner of a key."""
    if request.param == "stdio":
        return lambda key: stdio_client(service, key)
    return lambda key: http_client(service, key)


def text(result: CallToolResult) -> str:
    return "".join(block.text for block in result.content if isinstance(block, TextContent))


async def ok(client: Client, tool: str, arguments: dict[str, Any]) -> Any:
    """The structured answer of a tool call that must succeed; its text says the same."""
    result = await client.call_tool(tool, arguments)
    assert not result.is_error, text(result)
    assert json.loads(text(result)) == result.structured_content
    return result.structured_content


async def refused(client: Client, tool: str, arguments: dict[str, Any]) -> str:
    """The one-line error of a tool call that must fail."""
    result = await client.call_tool(tool, arguments)
    assert result.is_error, text(result)
    assert "Traceback" not in text(result)
    return text(result)


async def wait_finished(client: Client, run_id: str) -> dict[str, Any]:
    async def done() -> dict[str, Any] | None:
        run: dict[str, Any] = await ok(client, "get_run", {"run_id": run_id})
        return run if run["status"] in FINISHED else None

    return await wait_for(done, f"run {run_id} to finish", within=20, interval=0.2)


def schedule(name: str, **fields: Any) -> dict[str, Any]:
    body = {"name": name, "prompt": "hello agent", "runner": ECHO}
    body["trigger"] = {"cron": "0 9 * * 1-5", "timezone": "Asia/Shanghai"}
    return {**body, **fields}


async def test_the_tools_are_listed_with_their_schemas(connect: Connect, service: Service) -> None:
    async with connect(service.key) as client:
        listed = {tool.name: tool for tool in (await client.list_tools()).tools}
    assert list(listed) == [tool.name for tool in TOOLS]
    for tool in TOOLS:
        # What arrives is what the tool declares: the API's models, whole (that they are the
        # API's, as JSON Schema: tests/integration/test_mcp_tools.py).
        got, want = listed[tool.name], tool.definition()
        assert got.input_schema == want.input_schema
        assert got.output_schema == want.output_schema
        assert got.description and "Example: {" in got.description


async def test_a_schedule_created_through_mcp_runs_and_its_output_is_read_back(
    connect: Connect, service: Service
) -> None:
    async with connect(service.key) as client:
        # Once, a few seconds from now (whole seconds: 3 to 4 s ahead, room for a slow call).
        due = (datetime.now(UTC) + timedelta(seconds=4)).replace(microsecond=0)
        created = await ok(
            client, "create_schedule", schedule("soon", trigger={"at": due.isoformat()})
        )
        assert created["next_run"] == due.isoformat().replace("+00:00", "Z")

        async def listed() -> list[dict[str, Any]]:
            return (await ok(client, "list_runs", {"schedule_id": created["id"]}))["items"]

        (scheduled,) = await wait_for(listed, "the scheduled run", within=20, interval=0.2)
        run = await wait_finished(client, scheduled["id"])
        assert (run["status"], run["trigger"]) == ("succeeded", "schedule")
        assert run["output"] == "agent got: hello agent\n"
        assert run["deliveries"] == []

        manual = await ok(client, "run_now", {"schedule_id": created["id"]})
        assert (manual["status"], manual["trigger"]) == ("pending", "manual")
        finished = await wait_finished(client, manual["id"])
        assert (finished["status"], finished["output"]) == ("succeeded", "agent got: hello agent\n")

        read = await client.read_resource(f"agentcron://schedules/{created['id']}/runs")
        assert isinstance(read.contents[0], TextResourceContents)
        recent = json.loads(read.contents[0].text)
        assert [item["id"] for item in recent["items"]] == [manual["id"], run["id"]]
        await ok(client, "delete_schedule", {"schedule_id": created["id"]})


async def test_bad_input_comes_back_as_the_apis_message_and_field(
    connect: Connect, service: Service
) -> None:
    async with connect(service.key) as client:
        result = await client.call_tool(
            "create_schedule", schedule("bad", trigger={"cron": "60 8 * * *"})
        )
        assert result.is_error
        assert (
            text(result) == "InvalidSchedule: minute 60 is out of range 0-59 (field: trigger.cron)"
        )
        assert result.structured_content == {
            "error": {
                "type": "InvalidSchedule",
                "message": "minute 60 is out of range 0-59",
                "field": "trigger.cron",
            }
        }
        assert await refused(client, "create_schedule", schedule("bad", max_attempts=0)) == (
            "ValidationError: max_attempts: Input should be greater than or equal to 1"
            " (field: max_attempts)"
        )
        assert await refused(client, "create_schedule", schedule("bad", nmae="x")) == (
            "ValidationError: nmae: Extra inputs are not permitted (field: nmae)"
        )
        assert await refused(client, "list_schedules", {"limit": 0}) == (
            "ValidationError: limit: Input should be greater than or equal to 1 (field: limit)"
        )
        assert (await refused(client, "get_schedule", {"schedule_id": "../runs"})).endswith(
            "(field: schedule_id)"
        )
        assert await refused(client, "no_such_tool", {}) == (
            "NotFound: there is no tool 'no_such_tool'; the tools are "
            + ", ".join(tool.name for tool in TOOLS)
        )
        # Nothing of it was stored.
        names = [item["name"] for item in (await ok(client, "list_schedules", {}))["items"]]
        assert "bad" not in names


def enumerated(schema: dict[str, Any]) -> dict[str, tuple[list[Any], bool]]:
    """The properties of an input schema that list their values (``enum``), each with its
    values and whether it takes a list of them (an array whose items are enumerated)."""
    found: dict[str, tuple[list[Any], bool]] = {}
    for name, prop in schema["properties"].items():
        for part in prop.get("anyOf", [prop]):
            if "enum" in part:
                found[name] = (part["enum"], False)
            elif "enum" in part.get("items", {}):
                found[name] = (part["items"]["enum"], True)
    return found


async def rest_get(service: Service, path: str, params: dict[str, Any]) -> Any:
    async with httpx.AsyncClient(
        timeout=10, headers={"Authorization": f"Bearer {service.key}"}
    ) as http:
        answer = await http.get(f"{service.server.url}{path}", params=params)
    assert answer.status_code == 200, answer.text
    return answer.json()


async def test_every_value_a_tool_lists_is_accepted_as_rest_accepts_it(
    connect: Connect, service: Service
) -> None:
    # What a tool's schema offers a model must be what the API takes: each listed value, sent
    # alone, is accepted, and a filter of list_runs keeps exactly what REST's keeps.
    listing = {tool.name: enumerated(tool.definition().input_schema) for tool in TOOLS}
    calls = {"list_runs", "create_schedule", "update_schedule", "resume_schedule"}
    assert {name for name, found in listing.items() if found} == calls
    async with connect(service.key) as client:
        created = await ok(client, "create_schedule", schedule("enumerated"))
        ids = {"schedule_id": created["id"]}
        await wait_finished(client, (await ok(client, "run_now", ids))["id"])
        await ok(client, "pause_schedule", ids)
        base = {
            "list_runs": ids,
            "create_schedule": schedule("enumerated value"),
            "update_schedule": ids,
            "resume_schedule": {**ids, "dry_run": True},
        }
        for name in sorted(calls):
            for field, (values, many) in listing[name].items():
                for value in values:
                    arguments = {**base[name], field: [value] if many else value}
                    answer = await ok(client, name, arguments)
                    if name == "create_schedule":
                        await ok(client, "delete_schedule", {"schedule_id": answer["id"]})
                    if name == "list_runs":
                        path = f"/api/v1/schedules/{created['id']}/runs"
                        assert answer == await rest_get(service, path, {field: value}), arguments
        manual = await ok(client, "list_runs", {**ids, "trigger": ["manual"]})
        assert [run["trigger"] for run in manual["items"]] == ["manual"]
        await ok(client, "delete_schedule", ids)


async def test_another_owner_sees_nothing_of_the_first_owners(
    connect: Connect, service: Service
) -> None:
    stranger = "0f0e0d0c-0b0a-4908-8706-050403020100"
    async with connect(service.key) as owner, connect(service.other_key) as other:
        mine = await ok(owner, "create_schedule", schedule("mine"))
        run = await ok(owner, "run_now", {"schedule_id": mine["id"]})
        assert (await ok(other, "list_schedules", {}))["items"] == []
        ids = {"schedule_id": mine["id"]}
        for tool, arguments in (
            ("get_schedule", ids),
            ("update_schedule", {**ids, "name": "theirs"}),
            ("pause_schedule", ids),
            ("run_now", ids),
            ("list_runs", ids),
            ("skip_occurrence", {**ids, "due_at": "2030-01-07T09:00:00+08:00"}),
            ("delete_schedule", ids),
        ):
            assert await refused(other, tool, arguments) == (
                f"NotFound: schedule {mine['id']} not found"
            ), tool
        # Exactly what an id that names nothing answers.
        assert await refused(other, "get_schedule", {"schedule_id": stranger}) == (
            f"NotFound: schedule {stranger} not found"
        )
        assert await refused(other, "get_run", {"run_id": run["id"]}) == (
            f"NotFound: run {run['id']} not found"
        )
        kept = await ok(owner, "get_schedule", ids)
        assert (kept["name"], kept["enabled"]) == ("mine", True)
        await wait_finished(owner, run["id"])
        await ok(owner, "delete_schedule", ids)


@pytest.mark.parametrize("key", [None, "ac_000000000000_not-a-key"])
async def test_http_without_a_valid_key_is_refused(service: Service, key: str | None) -> None:
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    ping = {"jsonrpc": "2.0", "id": 1, "method": "ping"}
    async with httpx.AsyncClient(timeout=10) as http:
        answer = await http.post(f"{service.server.url}/mcp", json=ping, headers=headers)
    assert answer.status_code == 401
    assert answer.headers["www-authenticate"] == "Bearer"
    assert answer.json()["error"]["type"] == "Unauthorized"
    # The SDK's client cannot even start its session; it raises the 401 as an MCPError, inside
    # the exception groups of its task groups.
    with pytest.raises(Exception) as refusal:
        async with http_client(service, key):
            pass
    assert isinstance(refusal.value, MCPError) or refusal.group_contains(MCPError, depth=None)


async def test_http_serves_post_only(service: Service) -> None:
    # Stateless with JSON answers: no stream to GET, no session to DELETE.
    headers = {"Authorization": f"Bearer {service.key}", "accept": "text/event-stream"}
    async with httpx.AsyncClient(timeout=10) as http:
        for method in ("GET", "DELETE"):
            answer = await http.request(method, f"{service.server.url}/mcp", headers=headers)
            assert answer.status_code == 405
            assert answer.json()["error"]["type"] == "MethodNotAllowed"


def test_stdio_without_a_key_does_not_start(tmp_path: Path) -> None:
    done = subprocess.run(
        [AGENTCRON, "mcp"],
        env={"PATH": "/usr/bin:/bin", "HOME": str(tmp_path)},
        capture_output=True,
        text=True,
        timeout=60,
        stdin=subprocess.DEVNULL,
    )
    assert (done.returncode, done.stdout) == (2, "")
    assert done.stderr.startswith("agentcron: no API key: pass --key or set AGENTCRON_KEY")


async def test_stdio_says_in_each_result_that_the_service_is_not_there() -> None:
    url = f"http://127.0.0.1:{free_port()}"
    parameters = StdioServerParameters(
        command=AGENTCRON, args=["mcp", "--url", url, "--key", "ac_000000000000_unused"]
    )
    async with Client(parameters) as client:
        message = await refused(client, "list_schedules", {})
    assert message.startswith(f"Unreachable: cannot connect to {url} (")
    assert message.endswith("is `agentcron serve` running there? (--url or AGENTCRON_URL)")
