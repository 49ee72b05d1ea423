"""``agentcron mcp``: the MCP server on stdin and stdout, a client of a running service.

An MCP client (an agent's host) starts this command and speaks MCP on its standard streams;
each tool call is one request to the service at ``--url`` with ``--key``, like every other
HTTP command. Only the missing key is refused at start: a service that is down is said in
each tool's result, so the agent can tell its user, instead of a server that will not start.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING

import anyio
import httpx

from agentcron.web.cli.client import DEFAULT_URL, Api, CliError, KeyOption, UrlOption

if TYPE_CHECKING:
    from agentcron.web.mcp.server import Context


def mcp(url: UrlOption = DEFAULT_URL, key: KeyOption = None) -> None:
    """The MCP server for agents, on stdin/stdout: its tools call the service at --url.

    The tools list, create, change, pause, resume, delete and preview schedules, run one now,
    read runs with their output, and skip a due time, as the owner of --key. Add it to an MCP
    client as a command: see the README, "From an agent (MCP)".
    """
    from agentcron.core.extras import have, missing  # only here: the other commands load no core

    if not have("mcp"):
        raise CliError(missing("mcp", "agentcron mcp"), 2)
    api = Api.connect(url, key)
    anyio.run(_serve, api)


async def _serve(api: Api) -> None:
    # Imported here: `agentcron mcp` is the one HTTP command that needs the SDK and the schemas.
    from mcp.server.stdio import stdio_server

    from agentcron.web.mcp.server import build_server

    async with api.async_client() as http:
        # One client for the whole conversation: its connections are kept between calls.
        @asynccontextmanager
        async def caller(_ctx: Context) -> AsyncIterator[httpx.AsyncClient]:
            yield http

        server = build_server(caller)
        async with stdio_server() as (read_stream, write_stream):
            await server.run(read_stream, write_stream, server.create_initialization_options())
