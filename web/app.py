"""The FastAPI application factory. The lifespan owns the database (and, later, the loop)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from fastapi import FastAPI

from core.config import Settings, get_settings
from core.logging import configure_logging, get_logger
from core.schedules import ScheduleService
from core.storage import Database
from web.api import health, schedules
from web.api.errors import install_error_handlers

log = get_logger(__name__)


def create_app(settings: Settings | None = None) -> FastAPI:
    """Build the app for ``settings`` (default: from the environment)."""
    settings = settings or get_settings()

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        db = Database(settings.database_url)
        app.state.settings = settings
        app.state.db = db
        app.state.schedules = ScheduleService(db, max_active=settings.max_active_schedules)
        log.info("service_started", database=db.capabilities.dialect)
        try:
            yield
        finally:
            await db.dispose()
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
    return app


def app_from_env() -> FastAPI:
    """Entry point for ``uvicorn --factory web.app:app_from_env``: logging set up first."""
    settings = get_settings()
    configure_logging(settings.log_format, settings.log_level)
    return create_app(settings)
