"""Liveness and readiness probes, and the Prometheus metrics (no key needed)."""

from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, Response

from agentcron.core.errors import SchedulerUnavailable
from agentcron.core.extras import have
from agentcron.core.storage.database import Database
from agentcron.web.api.errors import extra_missing_response
from agentcron.web.engine.clockwatch import ClockWatch
from agentcron.web.engine.supervisor import Supervisor

router = APIRouter(tags=["service"])
METRICS_FEATURE = "GET /metrics"


@router.get("/healthz")
async def healthz() -> dict[str, str]:
    """The process is up and serving HTTP."""
    return {"status": "ok"}


@router.get("/readyz")
async def readyz(request: Request) -> JSONResponse:
    """Ready when the database answers, the scheduler loop (unless disabled) is running, and
    none of the engine's long-lived tasks is down (``down`` names those that crashed and wait
    for their restart).

    ``warnings`` lists what needs attention without making the service unready: a clock skew
    past ``AGENTCRON_CLOCK_SKEW_WARN_SECONDS`` (the engine uses the database's clock, so it
    still works correctly)."""
    db: Database = request.app.state.db
    checks: dict[str, str] = {}
    try:
        await db.ping()
        checks["database"] = "ok"
    except SchedulerUnavailable:
        checks["database"] = "unavailable"
    loop = request.app.state.loop
    if loop is not None:
        checks["scheduler"] = "ok" if loop.healthy else "unavailable"
    supervisor: Supervisor = request.app.state.supervisor
    down = supervisor.down
    checks["tasks"] = "ok" if not down else "unavailable"
    ready = all(value == "ok" for value in checks.values())
    watch: ClockWatch | None = request.app.state.clock_watch
    warning = watch.warning if watch is not None else None
    body = {
        "status": "ok" if ready else "unavailable",
        "checks": checks,
        "down": down,
        "warnings": [warning] if warning is not None else [],
    }
    return JSONResponse(body, 200 if ready else 503)


# Not in the OpenAPI document: it is for scrapers, in Prometheus' text format, not JSON.
@router.get("/metrics", include_in_schema=False)
async def metrics(request: Request) -> Response:
    """The engine's counters and histograms (web/engine/metrics.py) in Prometheus text format;
    without the metrics extra, 501 with the line naming it (the service logs it at start)."""
    if not have("metrics"):
        return extra_missing_response("metrics", METRICS_FEATURE)
    from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

    return Response(
        generate_latest(request.app.state.metrics.registry), media_type=CONTENT_TYPE_LATEST
    )
