"""The dashboard: server-rendered pages at ``/`` over the same ``core`` calls as the API.

``install`` adds its routes (left out of the OpenAPI document: they are pages, not API) and
its static files to an app. Pages sign in with an API key kept in an HttpOnly cookie.
"""

from __future__ import annotations

from pathlib import Path

from fastapi import FastAPI
from fastapi.staticfiles import StaticFiles

from agentcron.web.dashboard.routes import router

STATIC_DIR = Path(__file__).with_name("static")


def install(app: FastAPI) -> None:
    """Serve the dashboard pages and ``/static`` from ``app``; the OpenAPI document is unchanged."""
    app.include_router(router, include_in_schema=False)
    app.mount("/static", StaticFiles(directory=STATIC_DIR), name="static")


__all__ = ["install"]
