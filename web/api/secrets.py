"""Secret endpoints: store (create or replace), list by name, delete. Write-only: no answer
carries a value.

Every route acts on the secrets of the key's owner, an admin key's included: secrets are
per owner and an admin key acts as its own owner here, as when it creates a schedule. (An
admin editing another owner's schedule references that owner's secrets, which the admin can
neither list nor read.)
"""

from __future__ import annotations

from fastapi import APIRouter, Request, Response, status

from agentcron.core.secrets.keyring import Keyring
from agentcron.core.secrets.store import SecretInfo, delete_secret, list_secrets, put_secret
from agentcron.core.specs import SecretPut
from agentcron.core.storage.database import Database
from agentcron.web.api.deps import AuthDep, PrincipalDep
from agentcron.web.api.schedules import ERRORS
from agentcron.web.api.schemas import SecretList, SecretOut

router = APIRouter(
    prefix="/api/v1/secrets", tags=["secrets"], responses=ERRORS, dependencies=[AuthDep]
)


def _db(request: Request) -> Database:
    db: Database = request.app.state.db
    return db


def _out(info: SecretInfo) -> SecretOut:
    return SecretOut(name=info.name, created_at=info.created_at, updated_at=info.updated_at)


@router.get("")
async def list_stored_secrets(request: Request, principal: PrincipalDep) -> SecretList:
    """The caller's owner's secrets: names and times only."""
    return SecretList(
        items=[_out(info) for info in await list_secrets(_db(request), principal.owner)]
    )


@router.put("/{name}")
async def store_secret(
    name: str, body: SecretPut, request: Request, principal: PrincipalDep
) -> SecretOut:
    """Create or replace the secret ``name``; 409 when the service has no
    AGENTCRON_SECRETS_KEY to encrypt it with."""
    keyring: Keyring | None = request.app.state.keyring
    info = await put_secret(_db(request), principal.owner, name, body.value, keyring=keyring)
    return _out(info)


@router.delete("/{name}", status_code=status.HTTP_204_NO_CONTENT)
async def remove_secret(name: str, request: Request, principal: PrincipalDep) -> Response:
    """Delete the secret ``name`` (404 when there is none). Schedules that refer to it keep the
    reference; their next run or delivery fails naming it."""
    await delete_secret(_db(request), principal.owner, name)
    return Response(status_code=status.HTTP_204_NO_CONTENT)
