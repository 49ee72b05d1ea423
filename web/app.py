"""The FastAPI application factory. The lifespan runs the engine (``agentcron.web.host``)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager, nullcontext

from fastapi import FastAPI
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from agentcron.core.config import Settings, get_settings
from agentcron.core.extras import have, missing
from agentcron.core.logging import configure_logging, get_logger
from agentcron.web.api import health, runs, schedules, secrets, tasks
from agentcron.web.api.errors import extra_missing_response, install_error_handlers
from agentcron.web.engine.heap import settle_heap
from agentcron.web.host import Engine

log = get_logger(__name__)


def create_app(settings: Settings | None = None, *, settle: bool = False) -> FastAPI:
    """Build the app for ``settings`` (default: from the environment). ``settle``: the
    process is this service's alone (``agentcron serve``): once started, its heap is frozen
    out of later garbage collections (``web.engine.heap``)."""
    # Built now: a bad setting, agents file or secrets key refuses the start.
    engine = Engine(settings or get_settings())

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        app.state.metrics = engine.metrics
        # One supervisor for every long-lived task of this app, so /readyz sees them all.
        app.state.supervisor = engine.supervisor
        async with engine:
            app.state.engine = engine
            app.state.settings = engine.settings
            app.state.keyring = engine.keyring
            app.state.db = engine.db
            app.state.schedules = engine.schedules
            app.state.ledger = engine.ledger
            app.state.runs = engine.runs
            app.state.loop = engine.loop
            app.state.clock_watch = engine.watch
            async with mcp_running():
                if settle:
                    settle_heap()
                yield
        log.info("service_stopped")

    app = FastAPI(
        title="agentcron",
        version="0.1.0",
        summary="Run AI-agent work on a timetable.",
        lifespan=lifespan,
    )
    install_error_handlers(app)
    app.include_router(health.router)
    app.include_router(schedules.router)
    app.include_router(runs.router)
    app.include_router(runs.schedule_runs)
    app.include_router(tasks.router)
    app.include_router(secrets.router)
    # The parts of the service whose extra may be missing: each one missing is said at start,
    # in one line naming the extra, and its URL answers 501 with the same line.
    if have("server"):
        from agentcron.web.dashboard import install as install_dashboard

        install_dashboard(app)
    else:
        _absent(app, "/", "server", "the dashboard")
    mcp_running: Callable[[], AbstractAsyncContextManager[None]] = nullcontext
    if have("mcp"):
        from agentcron.web.mcp.endpoint import install as install_mcp

        mcp_running = install_mcp(app).running
    else:
        _absent(app, "/mcp", "mcp", "the MCP endpoint (/mcp)", methods=["POST"])
    if not have("metrics"):
        log.warning("extra_missing", reason=missing("metrics", health.METRICS_FEATURE))
    return app


def _absent(
    app: FastAPI, path: str, extra: str, feature: str, methods: list[str] | None = None
) -> None:
    log.warning("extra_missing", reason=missing(extra, feature))

    async def answer(request: Request) -> Response:
        return extra_missing_response(extra, feature)

    app.router.routes.append(Route(path, answer, methods=methods))


def app_from_env() -> FastAPI:
    """Entry point for ``uvicorn --factory web.app:app_from_env``: logging set up first."""
    settings = get_settings()
    configure_logging(settings.log_format, settings.log_level)
    return create_app(settings, settle=True)
