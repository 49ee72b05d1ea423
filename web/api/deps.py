"""Dependencies shared by the routers (``Annotated`` aliases, as in the FastAPI template)."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import Depends, Request, Security
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from agentcron.core.errors import Unauthorized
from agentcron.core.keys import LOCAL_OWNER as LOCAL_OWNER  # re-exported: the name callers knew
from agentcron.core.keys import Principal, authenticate
from agentcron.core.runs import RunService
from agentcron.core.schedules.service import ScheduleService
from agentcron.core.storage.database import Database

# Declares the bearer scheme in the OpenAPI document. auto_error=False: a missing or non-Bearer
# header comes through as None so the answer is our 401 error body, not FastAPI's own.
bearer = HTTPBearer(
    scheme_name="apiKey",
    bearerFormat="ac_<prefix>_<secret>",
    description="An API key from `agentcron keys create --owner NAME [--admin]`.",
    auto_error=False,
)


def _engine(request: Request) -> Any:
    """Where the services are: the host's engine when the router is mounted in a host's app
    (``Engine.router`` puts it on the request), else the service's app state."""
    return getattr(request.state, "agentcron", None) or request.app.state


def get_schedules(request: Request) -> ScheduleService:
    service: ScheduleService = _engine(request).schedules
    return service


def get_runs(request: Request) -> RunService:
    runs: RunService = _engine(request).runs
    return runs


async def get_principal(
    request: Request,
    credentials: Annotated[HTTPAuthorizationCredentials | None, Security(bearer)],
) -> Principal:
    """The caller behind ``Authorization: Bearer <key>``; ``Unauthorized`` (401) otherwise.

    Raises ``SchedulerUnavailable`` (503) when the key cannot be checked because the database
    is down: an outage is not the caller's fault.
    """
    # In a host's app with its own auth (``Engine.router(principal=...)``): the host decided.
    chosen: Principal | None = getattr(request.state, "agentcron_principal", None)
    if chosen is not None:
        return chosen
    if credentials is None:
        raise Unauthorized("an API key is required: send Authorization: Bearer <key>")
    db: Database = _engine(request).db
    principal = await authenticate(db, credentials.credentials)
    if principal is None:
        # Deliberately one message for unknown, malformed and revoked keys, none echoing it.
        raise Unauthorized("the API key is not valid (unknown or revoked)")
    return principal


def get_owner(principal: Annotated[Principal, Depends(get_principal)]) -> str | None:
    """The owner filter for ``core``: the caller's owner, or None (everyone) for an admin."""
    return principal.scope


SchedulesDep = Annotated[ScheduleService, Depends(get_schedules)]
RunsDep = Annotated[RunService, Depends(get_runs)]
PrincipalDep = Annotated[Principal, Depends(get_principal)]
OwnerDep = Annotated[str | None, Depends(get_owner)]
# For routers: every route under them needs a valid key, whether or not its handler reads it.
AuthDep = Depends(get_principal)
