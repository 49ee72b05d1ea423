"""The stored secrets of an owner: put, list, delete, and re-encryption after a key rotation.

It owns the ``secrets`` rows as the API and the CLI change them. A value is encrypted before
it reaches a session and nothing here decrypts one for a reader: ``SecretInfo`` (a name and
its times) is all that is ever returned.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import datetime

from sqlalchemy.exc import IntegrityError

from agentcron.core.clock import Clock, utcnow
from agentcron.core.errors import Conflict, NotFound
from agentcron.core.extras import have, missing
from agentcron.core.logging import get_logger
from agentcron.core.secrets.keyring import KEY_HINT, KEY_SETTING, Keyring
from agentcron.core.secrets.references import check_name, check_value
from agentcron.core.storage.database import Database
from agentcron.core.storage.models import Secret
from agentcron.core.storage.sql.secrets import (
    delete_secret_row,
    secret_locked,
    secrets_batch,
    secrets_listed,
)

log = get_logger(__name__)


def _disabled() -> Conflict:
    # A Conflict (409), not a 503: retrying does not help until the operator sets the key.
    if not have("secrets"):  # the key could not be set either: say what to install first
        return Conflict(f"secrets cannot be stored: {missing('secrets', 'storing a secret')}")
    return Conflict(
        f"secrets cannot be stored: the service has no {KEY_SETTING} (the operator sets it; "
        f"{KEY_HINT})"
    )


@dataclass(frozen=True)
class SecretInfo:
    """What may be shown of a stored secret: its name and when it was stored."""

    name: str
    created_at: datetime
    updated_at: datetime


def _info(row: Secret) -> SecretInfo:
    return SecretInfo(row.name, row.created_at, row.updated_at)


async def put_secret(
    db: Database,
    owner: str,
    name: str,
    value: str,
    *,
    keyring: Keyring | None,
    clock: Clock = utcnow,
) -> SecretInfo:
    """Store ``value`` as ``owner``'s secret ``name``, creating it or replacing its value
    (``created_at`` kept). Raises ``InvalidSchedule`` (field ``name`` or ``value``) for bad
    input and ``Conflict`` (409) without a keyring; nothing is written then."""
    check_name(name)
    check_value(value)
    if keyring is None:
        raise _disabled()
    ciphertext = keyring.encrypt(owner, name, value)
    # Two first PUTs of one name race to insert; the loser finds the row and replaces it.
    for attempt in range(2):
        now = clock()
        try:
            async with db.session(conflicts=attempt == 0) as session:
                row = (await session.execute(secret_locked(owner, name))).scalar_one_or_none()
                created = row is None
                if row is None:
                    row = Secret(
                        id=uuid.uuid4(),
                        owner=owner,
                        name=name,
                        ciphertext=ciphertext,
                        created_at=now,
                        updated_at=now,
                    )
                    session.add(row)
                else:
                    row.ciphertext = ciphertext
                    row.updated_at = now
        except IntegrityError:
            continue
        log.info("secret_stored", owner=owner, name=name, created=created)
        return _info(row)
    raise AssertionError("unreachable")  # pragma: no cover


async def list_secrets(db: Database, owner: str) -> list[SecretInfo]:
    """``owner``'s secrets by name: names and times only, nothing decrypted."""
    async with db.session(write=False) as session:
        rows = (await session.execute(secrets_listed(owner))).all()
    return [SecretInfo(name, created, updated) for name, created, updated in rows]


async def delete_secret(db: Database, owner: str, name: str) -> None:
    """Delete ``owner``'s secret ``name``; ``NotFound`` if it has none of that name. Schedules
    that refer to it keep the reference: their next run or delivery fails naming it."""
    check_name(name)
    async with db.session() as session:
        result = await session.execute(delete_secret_row(owner, name))
        if not getattr(result, "rowcount", 0):
            raise NotFound("secret", name)
    log.info("secret_deleted", owner=owner, name=name)


async def reencrypt_all(db: Database, keyring: Keyring, *, batch: int = 500) -> int:
    """Re-encrypt every stored secret under the keyring's first key; the count rewritten.

    After it, the other keys can be dropped from ``AGENTCRON_SECRETS_KEY``. Raises
    ``SecretUnreadable`` (and rewrites nothing of that batch) if a token decrypts under no key.
    """
    done = 0
    after: uuid.UUID | None = None
    while True:
        async with db.session() as session:
            rows = list(await session.scalars(secrets_batch(after, batch)))
            for row in rows:
                row.ciphertext = keyring.rotate(row.ciphertext)
        done += len(rows)
        if len(rows) < batch:
            log.info("secrets_reencrypted", count=done)
            return done
        after = rows[-1].id
