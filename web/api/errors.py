"""The one table mapping agentcron errors to HTTP statuses and the error body of docs/api.md.

Every error body is ``{"error": {"type", "message", "field"}}``. Driver text and stack traces
never reach a response: unexpected exceptions are logged and answered with a generic 500.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.requests import ClientDisconnect

from agentcron.core.errors import (
    AgentcronError,
    Conflict,
    InvalidSchedule,
    MalformedInput,
    NotFound,
    RunPermanentError,
    ScheduleCapacityExceeded,
    SchedulerUnavailable,
    Unauthorized,
)
from agentcron.core.extras import missing
from agentcron.core.logging import get_logger

log = get_logger(__name__)

STATUS: dict[type[AgentcronError], int] = {
    Unauthorized: 401,
    InvalidSchedule: 422,
    NotFound: 404,
    Conflict: 409,
    ScheduleCapacityExceeded: 409,
    SchedulerUnavailable: 503,
    RunPermanentError: 422,
}

# Headers a status always carries: when to retry an outage; which scheme a 401 wants (RFC 6750).
_HEADERS: dict[int, dict[str, str]] = {
    503: {"Retry-After": "5"},
    401: {"WWW-Authenticate": "Bearer"},
}

# 400: FastAPI's own "There was an error parsing the body" (a body nested too deeply for the
# JSON parser, or not UTF-8): a malformed request like any other, not an undocumented type.
_HTTP_TYPES = {
    400: "ValidationError",
    401: "Unauthorized",
    404: "NotFound",
    405: "MethodNotAllowed",
}


def error_body(type_: str, message: str, field: str | None = None) -> dict[str, Any]:
    return {"error": {"type": type_, "message": message, "field": field}}


def extra_missing_response(extra: str, feature: str) -> JSONResponse:
    """501 ``ExtraMissing``: ``feature`` needs ``extra``, not installed here (the message
    names the pip command)."""
    return JSONResponse(error_body("ExtraMissing", missing(extra, feature)), 501)


def status_for(exc: AgentcronError) -> int:
    """The HTTP status of ``exc`` from the table above (500 for a class it does not name)."""
    for cls in type(exc).__mro__:
        if cls in STATUS:
            return STATUS[cls]
    return 500


def field_path(loc: Sequence[int | str]) -> str | None:
    """The dotted field path (``trigger.cron``) of a pydantic error location, or None.

    Shared with the dashboard, which shows the same field paths beside its form inputs.
    """
    # FastAPI prefixes the location with where the value came from; clients name fields only.
    parts = (
        [str(part) for part in loc[1:]]
        if loc and loc[0] in ("body", "query", "path")
        else [str(p) for p in loc]
    )
    return ".".join(parts) or None


async def agentcron_error(_request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, AgentcronError)
    status = status_for(exc)
    if isinstance(exc, SchedulerUnavailable):
        log.warning("scheduler_unavailable", error=exc.message)
    field = getattr(exc, "field", None)
    headers = _HEADERS.get(status)
    type_, message = type(exc).__name__, exc.message
    if isinstance(exc, MalformedInput):
        # Worded as every other malformed request is (``_validation_error``).
        type_, message = "ValidationError", f"{field}: {message}" if field else message
    return JSONResponse(error_body(type_, message, field), status, headers=headers)


def _not_json(request: Request, errors: Sequence[Mapping[str, Any]]) -> str | None:
    """The media type (``none`` when absent) a body was sent with that kept it from being read
    as JSON; None if it was read. FastAPI reads a body as JSON only under ``application/json``
    (or ``application/*+json``) and hands any other non-empty body to validation as its bytes,
    so an error about the body whose input is bytes is one of those."""
    for error in errors:
        if tuple(error.get("loc", ()))[:1] == ("body",) and isinstance(error.get("input"), bytes):
            sent = request.headers.get("content-type", "").split(";")[0].strip()
            return sent[:100] or "none"
    return None


async def _validation_error(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, RequestValidationError)
    errors = exc.errors()
    first = errors[0] if errors else {"loc": (), "msg": "invalid request"}
    sent_as = _not_json(request, errors)
    if sent_as is not None:
        message = (
            "the request body must be JSON sent with Content-Type: application/json "
            f"(the Content-Type was {sent_as})"
        )
        return JSONResponse(error_body("ValidationError", message), 415)
    if first.get("type") in ("json_invalid", "model_attributes_type") or (
        first.get("type") == "missing" and tuple(first.get("loc", ())) == ("body",)
    ):
        message = (
            "request body is not valid JSON"
            if first.get("type") == "json_invalid"
            else ("request body must be a JSON object")
        )
        return JSONResponse(error_body("ValidationError", message), 400)
    field = field_path(first.get("loc", ()))
    message = str(first.get("msg", "invalid value"))
    if field:
        message = f"{field}: {message}"
    return JSONResponse(error_body("ValidationError", message, field), 422)


async def _http_error(_request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, StarletteHTTPException)
    type_ = _HTTP_TYPES.get(exc.status_code, "HTTPError")
    return JSONResponse(
        error_body(type_, str(exc.detail)), exc.status_code, headers=getattr(exc, "headers", None)
    )


async def _client_gone(request: Request, _exc: Exception) -> Response:
    # The client closed the connection before its body arrived (a browser aborting a
    # superseded preview, a CLI interrupted): nobody reads the answer and nothing was
    # changed, so it is an info line, not an error.
    log.info("client_disconnected", method=request.method, path=request.url.path)
    return Response(status_code=499)


async def _unexpected(_request: Request, exc: Exception) -> JSONResponse:
    log.error("unhandled_error", exc_info=exc)
    return JSONResponse(error_body("InternalError", "internal error"), 500)


def install_error_handlers(app: FastAPI) -> None:
    """Register the handlers; the table above is the whole policy."""
    app.add_exception_handler(AgentcronError, agentcron_error)
    app.add_exception_handler(RequestValidationError, _validation_error)
    app.add_exception_handler(StarletteHTTPException, _http_error)
    app.add_exception_handler(ClientDisconnect, _client_gone)
    app.add_exception_handler(Exception, _unexpected)
