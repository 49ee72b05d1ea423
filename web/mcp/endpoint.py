"""``/mcp``: the MCP server's streamable-HTTP transport, on the service itself.

Every request needs an API key, checked by the API's own dependency before the transport sees
the request, so a missing, unknown or revoked key is the API's 401 (with its error body and
``WWW-Authenticate``). Each tool then calls the app in-process (``httpx.ASGITransport``) with
that same ``Authorization`` header: the call passes the API's auth, validation and owner
isolation exactly as a REST request would, and another owner's id is a NotFound there too.

The transport is stateless and answers JSON: every POST carries its own key and is served on
its own, so no session ties a client to one replica or to one process's memory, and nothing of
one caller's session can be reached with another's key. The route is a plain Starlette route,
so the OpenAPI document (the REST API, docs/api.md) does not list it.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import httpx
from fastapi import FastAPI
from mcp.server.streamable_http_manager import StreamableHTTPSessionManager
from mcp.server.transport_security import TransportSecuritySettings
from starlette.requests import Request
from starlette.routing import Route
from starlette.types import Receive, Scope, Send

from agentcron.core.errors import SchedulerUnavailable
from agentcron.web.api.deps import bearer, get_principal
from agentcron.web.mcp.server import Context, build_server

PATH = "/mcp"
# The in-process calls never leave the process; the name only makes them absolute URLs.
_SELF = "http://agentcron.internal"

# The SDK can refuse requests whose Host or Origin is not listed (DNS rebinding). Not here: a
# rebinding page cannot send the caller's API key, which every request needs, and the names the
# service is reached by (a proxy's, an address on the network) are the operator's, as for the
# REST API, which checks neither header either.
_TRANSPORT = TransportSecuritySettings(enable_dns_rebinding_protection=False)


class McpEndpoint:
    """The ASGI app at ``/mcp``; ``running()`` must enclose the requests it serves."""

    def __init__(self, app: FastAPI) -> None:
        self._app = app
        self._server = build_server(self._caller)
        self._manager: StreamableHTTPSessionManager | None = None

    @asynccontextmanager
    async def running(self) -> AsyncIterator[None]:
        """Serve for the length of the app's lifespan. A session manager runs only once, so
        each lifespan gets its own (an app started again, as tests do, still serves)."""
        manager = StreamableHTTPSessionManager(
            app=self._server, json_response=True, stateless=True, security_settings=_TRANSPORT
        )
        started, stop = asyncio.Event(), asyncio.Event()

        async def serve() -> None:
            async with manager.run():
                self._manager = manager
                started.set()
                await stop.wait()

        # In a task of its own: the manager holds an anyio task group, which must be left in
        # the task that entered it, and a lifespan may end in another task than it began in
        # (the tests' app fixtures do).
        task = asyncio.create_task(serve(), name="mcp-session-manager")
        waiting = asyncio.create_task(started.wait())
        await asyncio.wait({task, waiting}, return_when=asyncio.FIRST_COMPLETED)
        waiting.cancel()
        if task.done():
            task.result()  # it failed to start: raise why
        try:
            yield
        finally:
            self._manager = None
            stop.set()
            await task

    @asynccontextmanager
    async def _caller(self, ctx: Context) -> AsyncIterator[httpx.AsyncClient]:
        # The request that carried this MCP message, whose key __call__ has already checked.
        request = ctx.request
        if not isinstance(request, Request):
            raise TypeError(f"an MCP request over HTTP has no HTTP request: {request!r}")
        headers = {"Authorization": request.headers["authorization"]}
        # raise_app_exceptions=False: a fault in a route is answered as a client would see it
        # (the generic 500 body), not raised into the tool.
        transport = httpx.ASGITransport(app=self._app, raise_app_exceptions=False)
        async with httpx.AsyncClient(transport=transport, base_url=_SELF, headers=headers) as http:
            yield http

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        request = Request(scope, receive)
        # The API's own dependency; what it raises (Unauthorized, or SchedulerUnavailable when
        # the database cannot check the key) is answered by the app's error table.
        await get_principal(request, await bearer(request))
        if self._manager is None:
            raise SchedulerUnavailable("the MCP endpoint is not serving (the service is stopping)")
        await self._manager.handle_request(scope, receive, send)


def install(app: FastAPI) -> McpEndpoint:
    """Add ``/mcp`` to ``app``; the app's lifespan must run the endpoint's ``running()``."""
    endpoint = McpEndpoint(app)
    # POST only: with no sessions and JSON answers there is no stream for a GET to open and no
    # session for a DELETE to end, and the protocol's answer to both is then 405.
    app.router.routes.append(Route(PATH, endpoint, methods=["POST"]))
    return endpoint
