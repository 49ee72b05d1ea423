"""API keys: who may call the HTTP API, and as which owner.

A key reads ``ac_<prefix>_<secret>``. ``prefix`` is 12 random hex digits: public, unique, it
finds the key's row and tells keys apart in ``agentcron keys list``. ``secret`` is 32 random
bytes (base64url, 43 characters). The database keeps only the SHA-256 of the whole token: the
plaintext exists once, in the output of ``create_key``.

Why a plain SHA-256 and not bcrypt/scrypt/argon2: a slow KDF exists to make guessing a
*low-entropy* password from its hash expensive. These secrets are 256 uniformly random bits, so
a leaked hash cannot be inverted by guessing whatever the hash speed, and a fast hash keeps the
per-request check cheap (one lookup by prefix, one digest, one constant-time compare).

Owners: every schedule, run and task belongs to one owner (a name). A key acts as its owner;
an *admin* key sees and changes every owner's objects (``Principal.scope`` is None, which the
service layer reads as "no owner filter") but what it creates belongs to its own owner.
"""

from __future__ import annotations

import hashlib
import hmac
import re
import secrets
import uuid
from dataclasses import dataclass
from datetime import datetime, timedelta

from sqlalchemy import ColumnElement, or_, select, update
from sqlalchemy.exc import IntegrityError

from agentcron.core.clock import Clock, utcnow
from agentcron.core.errors import NotFound, SchedulerUnavailable
from agentcron.core.logging import get_logger
from agentcron.core.storage.database import Database
from agentcron.core.storage.models import ApiKey

log = get_logger(__name__)

# The owner of everything made without naming one: `agentcron example`, the key `make run` prints.
LOCAL_OWNER = "local"

_PREFIX_HEX_DIGITS = 12
_SECRET_BYTES = 32
# base64url of 32 bytes without padding is exactly 43 characters.
_TOKEN = re.compile(r"ac_([0-9a-f]{12})_([A-Za-z0-9_-]{43})")
_OWNER = re.compile(r"[A-Za-z0-9][A-Za-z0-9._@:-]{0,199}")
# last_used_at is bookkeeping for people reading `keys list`; writing it on every request
# would turn each read into a write (on SQLite: the database's single write lock).
LAST_USED_RESOLUTION = timedelta(seconds=60)


@dataclass(frozen=True)
class Principal:
    """The caller an API key stands for."""

    owner: str
    admin: bool
    key_id: uuid.UUID | None = None

    @property
    def scope(self) -> str | None:
        """The owner filter for the service layer: None (every owner) for an admin key."""
        return None if self.admin else self.owner


def hash_token(token: str) -> str:
    """The stored form of a token: hex SHA-256 (see the module docstring for why not a KDF)."""
    return hashlib.sha256(token.encode("utf-8")).hexdigest()


def check_owner(owner: str) -> str:
    """``owner`` if it is a valid owner name, else ``ValueError`` saying what is allowed.

    Names are 1-200 characters of letters, digits and ``. _ @ : -``, starting with a letter or
    digit: they appear in every schedule response and in logs, so nothing that needs escaping.
    """
    if not _OWNER.fullmatch(owner):
        raise ValueError(
            "an owner is 1-200 characters: letters, digits and . _ @ : - "
            "(starting with a letter or digit)"
        )
    return owner


def display_prefix(record: ApiKey) -> str:
    """How a key is shown without its secret: ``ac_<prefix>_…``."""
    return f"ac_{record.prefix}_…"


async def create_key(
    db: Database, owner: str, admin: bool = False, *, clock: Clock = utcnow
) -> tuple[str, ApiKey]:
    """Make a key for ``owner``; returns ``(plaintext token, stored record)``.

    The plaintext is returned once and stored nowhere; the record holds its hash. Raises
    ``ValueError`` for an invalid owner name.
    """
    check_owner(owner)
    # A 48-bit random prefix collides with negligible probability; the UNIQUE constraint turns
    # a collision into an IntegrityError, and a fresh prefix is simply drawn again.
    for attempt in range(3):
        prefix = secrets.token_hex(_PREFIX_HEX_DIGITS // 2)
        token = f"ac_{prefix}_{secrets.token_urlsafe(_SECRET_BYTES)}"
        record = ApiKey(
            id=uuid.uuid4(),
            owner=owner,
            admin=admin,
            prefix=prefix,
            key_hash=hash_token(token),
            created_at=clock(),
        )
        try:
            # A collision is drawn again twice; a third one is a failure like any other.
            async with db.session(conflicts=attempt < 2) as session:
                session.add(record)
        except IntegrityError:
            continue
        log.info("api_key_created", key_id=str(record.id), prefix=prefix, owner=owner, admin=admin)
        return token, record
    raise AssertionError("unreachable")  # pragma: no cover


async def authenticate(db: Database, token: str, *, clock: Clock = utcnow) -> Principal | None:
    """The principal of a valid, unrevoked ``token``; None for anything else.

    A malformed token is refused before any query, so hostile input (NUL bytes, megabytes)
    never reaches the database. The hash is compared in constant time. Raises
    ``SchedulerUnavailable`` only when the database cannot be read.
    """
    match = _TOKEN.fullmatch(token)
    if match is None:
        return None
    async with db.session(write=False) as session:
        record = (
            await session.execute(select(ApiKey).where(ApiKey.prefix == match.group(1)))
        ).scalar_one_or_none()
    if record is None or not hmac.compare_digest(record.key_hash, hash_token(token)):
        return None
    if record.revoked_at is not None:
        return None
    now = clock()
    if record.last_used_at is None or now - record.last_used_at >= LAST_USED_RESOLUTION:
        await _touch(db, record.id, now)
    return Principal(owner=record.owner, admin=record.admin, key_id=record.id)


async def _touch(db: Database, key_id: uuid.UUID, now: datetime) -> None:
    stale = now - LAST_USED_RESOLUTION
    try:
        async with db.session() as session:
            await session.execute(
                update(ApiKey)
                .where(
                    ApiKey.id == key_id,
                    or_(ApiKey.last_used_at.is_(None), ApiKey.last_used_at <= stale),
                )
                .values(last_used_at=now)
            )
    except SchedulerUnavailable:
        # The key was read and is valid; failing to note when it was used must not deny it.
        log.warning("api_key_last_used_not_saved", key_id=str(key_id))


async def list_keys(
    db: Database, owner: str | None = None, *, include_revoked: bool = True
) -> list[ApiKey]:
    """Keys (of ``owner``, or all), oldest first. Records only: no plaintext exists to list."""
    query = select(ApiKey).order_by(ApiKey.created_at, ApiKey.id)
    if owner is not None:
        query = query.where(ApiKey.owner == owner)
    if not include_revoked:
        query = query.where(ApiKey.revoked_at.is_(None))
    async with db.session(write=False) as session:
        return list((await session.execute(query)).scalars())


async def revoke_key(db: Database, key: str | uuid.UUID, *, clock: Clock = utcnow) -> ApiKey:
    """Revoke a key named by its id or its prefix (``3f2a...`` or ``ac_3f2a..._…``).

    Takes effect on the next request that presents it. Revoking a revoked key keeps the first
    ``revoked_at``. Raises ``NotFound`` for an unknown key.
    """
    condition = _key_condition(key)
    async with db.session() as session:
        record = (
            await session.execute(select(ApiKey).where(condition).with_for_update())
        ).scalar_one_or_none()
        if record is None:
            raise NotFound("API key", str(key))
        if record.revoked_at is None:
            record.revoked_at = clock()
    log.info("api_key_revoked", key_id=str(record.id), prefix=record.prefix, owner=record.owner)
    return record


def _key_condition(key: str | uuid.UUID) -> ColumnElement[bool]:
    if isinstance(key, uuid.UUID):
        return ApiKey.id == key
    try:
        return ApiKey.id == uuid.UUID(key)
    except ValueError:
        pass
    # The prefix as shown by `keys list` (ac_<prefix>_…), or as the bare hex digits.
    prefix = key.removeprefix("ac_").split("_", 1)[0]
    if not re.fullmatch(r"[0-9a-f]{12}", prefix):
        raise NotFound("API key", key)
    return ApiKey.prefix == prefix
