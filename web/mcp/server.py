"""The MCP server: the tools of ``web.mcp.tools`` and a resource, answered through an API caller.

The server knows nothing of transports or keys. Each request gets its caller from ``Caller``:
an ``httpx.AsyncClient`` whose base URL and ``Authorization`` header reach the REST API as the
one asking (the remote service for ``agentcron mcp``, the app itself for ``/mcp``). A tool call
is then one API request, and its answer becomes the tool's result: the API's JSON as text and
as structured content, or, for any refusal, an error result (``isError``) whose text is the
API's error in one line, ``Type: message (field: name)``, and whose structured content is the
API's error body. What is said here takes the same shape (``ValidationError`` for an id refused
before any request, ``Unreachable`` for a service that does not answer, ``NotFound`` for an
unknown tool). Nothing a model sends ends in a protocol error or a traceback: a fault here is
logged and answered ``InternalError``.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Callable
from contextlib import AbstractAsyncContextManager
from typing import Any

import httpx
from mcp.server.context import ServerRequestContext
from mcp.server.lowlevel import Server
from mcp.shared.exceptions import MCPError
from mcp_types import (
    INVALID_PARAMS,
    CallToolRequestParams,
    CallToolResult,
    ListResourcesResult,
    ListResourceTemplatesResult,
    ListToolsResult,
    PaginatedRequestParams,
    ReadResourceRequestParams,
    ReadResourceResult,
    ResourceTemplate,
    TextContent,
    TextResourceContents,
)
from pydantic import ValidationError

from agentcron.web.cli.client import (
    CliError,
    describe_error,
    error_line,
    error_summary,
    require_json,
    unreachable,
)
from agentcron.web.mcp.tools import BY_NAME, TOOLS, ApiTool

log = logging.getLogger(__name__)

Context = ServerRequestContext[Any, Any]
# The API as the one asking sees it, for the length of one MCP request.
Caller = Callable[[Context], AbstractAsyncContextManager[httpx.AsyncClient]]

INSTRUCTIONS = (
    "agentcron runs work on a timetable: a schedule hands its prompt to its runner (an agent "
    "program or a chat model) each time its trigger is due, a cron expression in a time zone, "
    "an interval or a single moment, and keeps each outcome as a run. Check a trigger with "
    "preview_trigger, create_schedule, then watch it with list_runs and get_run; run_now runs "
    "one at once. You see and change only your own schedules and runs."
)

RUNS_TEMPLATE = "agentcron://schedules/{schedule_id}/runs"
_RUNS_URI = re.compile(r"^agentcron://schedules/(?P<schedule_id>[^/]+)/runs$")
RECENT_RUNS = 20


def _refusal(body: dict[str, Any]) -> CallToolResult:
    """An error result for an error body of docs/api.md: its one line, and the body itself."""
    text = error_line(body["error"])
    return CallToolResult(content=[TextContent(text=text)], structured_content=body, is_error=True)


def _error(type_: str, message: str, field: str | None = None) -> CallToolResult:
    """An error result said here, in the shape the API's would have."""
    return _refusal({"error": {"type": type_, "message": message, "field": field}})


def _invalid(exc: ValidationError) -> CallToolResult:
    """An id refused before any request, worded as the API words a ValidationError (here, not
    borrowed from web.api.errors: `agentcron mcp` does not load FastAPI)."""
    first = exc.errors()[0]
    field = ".".join(str(part) for part in first["loc"]) or None
    message = f"{field}: {first['msg']}" if field else str(first["msg"])
    return _error("ValidationError", message, field)


async def _request(
    http: httpx.AsyncClient, tool: ApiTool, path: str, rest: dict[str, Any]
) -> httpx.Response:
    if tool.query is not None:
        return await http.request(tool.method, path, params=tool.query_params(rest))
    body = rest if tool.body is not None else None
    return await http.request(tool.method, path, json=body)


async def call_tool(
    http: httpx.AsyncClient, tool: ApiTool, arguments: dict[str, Any]
) -> CallToolResult:
    """Call ``tool`` with ``arguments`` through ``http``: a ``CallToolResult``, an error one
    for anything the API (or the id check) refused or a service that did not answer."""
    try:
        path, ids, rest = tool.split(arguments)
    except ValidationError as exc:
        return _invalid(exc)
    try:
        response = await _request(http, tool, path, rest)
    except (httpx.HTTPError, httpx.InvalidURL) as exc:
        return _error("Unreachable", unreachable(str(http.base_url).rstrip("/"), exc).message)
    if not response.is_success:
        if error_summary(response) is None:
            # Not the API's error body: a proxy in between, or no agentcron at that URL.
            return _error("HTTPError", describe_error(response))
        return _refusal(response.json())
    try:
        require_json(response)
    except CliError as exc:
        return _error("HTTPError", exc.message)
    if not response.content:
        # 204: a delete, the one tool whose answer has no body; said as `agentcron schedules
        # delete --json` says it.
        done = {**ids, "deleted": True}
        return CallToolResult(content=[TextContent(text=json.dumps(done))], structured_content=done)
    return CallToolResult(
        content=[TextContent(text=response.text)], structured_content=response.json()
    )


def build_server(caller: Caller) -> Server[Any]:
    """The MCP server whose every tool call and resource read goes through ``caller``."""
    definitions = [tool.definition() for tool in TOOLS]

    async def list_tools(_ctx: Context, _params: PaginatedRequestParams | None) -> ListToolsResult:
        return ListToolsResult(tools=definitions)

    async def handle_call(ctx: Context, params: CallToolRequestParams) -> CallToolResult:
        tool = BY_NAME.get(params.name)
        if tool is None:
            known = ", ".join(BY_NAME)
            return _error("NotFound", f"there is no tool {params.name!r}; the tools are {known}")
        try:
            async with caller(ctx) as http:
                return await call_tool(http, tool, params.arguments or {})
        except Exception:
            # A fault of ours, not the caller's input: its text stays in the log.
            log.exception("mcp tool %s failed", tool.name)
            return _error("InternalError", "internal error")

    async def list_resources(
        _ctx: Context, _params: PaginatedRequestParams | None
    ) -> ListResourcesResult:
        # The runs of each schedule are reached through the template below, not listed.
        return ListResourcesResult(resources=[])

    async def list_templates(
        _ctx: Context, _params: PaginatedRequestParams | None
    ) -> ListResourceTemplatesResult:
        template = ResourceTemplate(
            name="recent_runs",
            title="A schedule's recent runs",
            uri_template=RUNS_TEMPLATE,
            description=f"The {RECENT_RUNS} newest runs of a schedule, with their status, "
            "times, output and error: the first page list_runs answers, as JSON.",
            mime_type="application/json",
        )
        return ListResourceTemplatesResult(resource_templates=[template])

    async def read_resource(ctx: Context, params: ReadResourceRequestParams) -> ReadResourceResult:
        uri = str(params.uri)
        match = _RUNS_URI.match(uri)
        if match is None:
            raise MCPError(INVALID_PARAMS, f"NotFound: no resource {uri}; try {RUNS_TEMPLATE}")
        arguments = {"schedule_id": match["schedule_id"], "limit": RECENT_RUNS}
        async with caller(ctx) as http:
            result = await call_tool(http, BY_NAME["list_runs"], arguments)
        text = "".join(block.text for block in result.content if isinstance(block, TextContent))
        if result.is_error:
            raise MCPError(INVALID_PARAMS, text, data={"uri": uri})
        contents = TextResourceContents(uri=uri, text=text, mime_type="application/json")
        return ReadResourceResult(contents=[contents])

    return Server(
        "agentcron",
        version="0.1.0",
        title="agentcron",
        instructions=INSTRUCTIONS,
        on_list_tools=list_tools,
        on_call_tool=handle_call,
        on_list_resources=list_resources,
        on_list_resource_templates=list_templates,
        on_read_resource=read_resource,
    )
