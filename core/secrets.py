"""Tenants' stored secrets: write-only values, encrypted at rest, referenced by name.

An owner stores a secret (an LLM key, a webhook signing secret, an SMTP URL) under a name; its
runner and notify configurations refer to it as ``{"secret": NAME}`` (a command's ``env``
value, a webhook's ``secret``) or through ``api_key_secret`` (openai runner) and
``smtp_url_secret`` (email channel). The value is never returned by the API, never in a run's
payload, output or error, and never in a log line; the engine resolves the references of one
attempt or delivery with one query and hands the values to the runner or notifier alone.

Encryption: Fernet (``cryptography``: AES-128-CBC with HMAC-SHA256, a versioned token with
its own IV), through ``MultiFernet`` so the operator can rotate: ``AGENTCRON_SECRETS_KEY`` is a
comma-separated list of keys, the first encrypts and every one decrypts. Fernet has no
associated data, so the owner and the name are encrypted with the value
(``v1 NUL owner NUL name NUL value``) and checked on decryption: the HMAC makes them
unforgeable, so a row copied to another owner or renamed does not decrypt. Owner names, secret
names and values cannot hold NUL, so the split is unambiguous. (AES-GCM with associated data
would bind them without the prefix, but then nonces, the token format and key rotation would
be ours to write; Fernet and MultiFernet give all three, audited.)

What the key protects: a copy of the database (a backup, a dump, a replica, SQL read access)
reveals no value. What it does not: the service process holds the key, so code running as the
service's user (a ``command`` or ``python`` agent included) can read it.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, overload

from cryptography.fernet import Fernet, InvalidToken, MultiFernet
from pydantic import SecretStr
from sqlalchemy import ColumnElement, delete, select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncSession

from core.clock import Clock, utcnow
from core.errors import (
    Conflict,
    InvalidSchedule,
    NotFound,
    RunPermanentError,
    StartupError,
    TargetUnavailable,
)
from core.logging import get_logger
from core.storage import Database, Schedule, Secret

log = get_logger(__name__)

KEY_SETTING = "AGENTCRON_SECRETS_KEY"
KEY_HINT = "make one with `agentcron secrets-key`"
NAME_PATTERN = r"[A-Za-z0-9][A-Za-z0-9._-]{0,99}"
_NAME = re.compile(NAME_PATTERN)
MAX_VALUE_BYTES = 65_536
# Shorter values are not redacted from output: replacing every "abc" in a text would mangle it
# and would tell a reader the value anyway.
MIN_REDACTED_CHARS = 4
# A runner keeps only the tail of a long output, so a value can be cut at its start; a leading
# fragment at least this long that ends the value is redacted too (shorter ones are noise).
MIN_FRAGMENT_CHARS = 8
_FRAGMENT_TRIES = 64  # candidate cut positions examined per value, bounding the cost
# Top-level keys of a runner or channel whose string value names a secret. Everywhere else a
# reference is a value ``{"secret": NAME}``.
NAME_KEYS = frozenset({"api_key_secret", "smtp_url_secret"})
_PLAINTEXT_VERSION = b"v1"
_SEP = b"\x00"


class SecretUnreadable(RunPermanentError):
    """A stored token does not decrypt under the configured keys for its owner and name."""


# -- names, values and references ------------------------------------------------------------


def check_name(name: object, field: str = "name") -> str:
    """``name`` if it is a valid secret name, else ``InvalidSchedule`` naming ``field``."""
    if not isinstance(name, str) or not _NAME.fullmatch(name):
        raise InvalidSchedule(
            "a secret name is 1-100 characters: letters, digits and . _ - "
            "(starting with a letter or digit)",
            field=field,
        )
    return name


def check_value(value: object, field: str = "value") -> str:
    """``value`` if it can be stored: a non-empty string of at most 64 KiB as UTF-8, no NUL."""
    if not isinstance(value, str) or not value:
        raise InvalidSchedule("a secret value is a non-empty string", field=field)
    if "\x00" in value:
        raise InvalidSchedule("NUL characters are not allowed", field=field)
    if len(value.encode("utf-8", errors="surrogatepass")) > MAX_VALUE_BYTES:
        raise InvalidSchedule(
            f"a secret value is at most {MAX_VALUE_BYTES:,} bytes as UTF-8", field=field
        )
    return value


def reference_name(value: object) -> str | None:
    """The name in a reference ``{"secret": NAME}`` (exactly that one key, a string), else
    None. The name is not checked here: ``check_reference`` does."""
    if isinstance(value, Mapping) and len(value) == 1:
        name = value.get("secret")
        if isinstance(name, str):
            return name
    return None


def check_reference(value: object, field: str) -> dict[str, str]:
    """The normalised reference ``{"secret": NAME}`` or ``InvalidSchedule`` naming ``field``."""
    name = reference_name(value)
    if name is None:
        raise InvalidSchedule('a secret reference is {"secret": "NAME"}', field=field)
    return {"secret": check_name(name, field)}


def secret_references(
    runner: Mapping[str, Any] | None, notify: Sequence[Any] | None
) -> list[tuple[str, str]]:
    """Every reference in a runner and its notify channels, as ``(field, name)`` in config
    order: ``{"secret": NAME}`` values anywhere, and the top-level ``NAME_KEYS``. Either
    argument may be None (not given)."""
    found: list[tuple[str, str]] = []
    if runner is not None:
        _walk_config(runner, "runner", found)
    for index, channel in enumerate(notify or ()):
        _walk_config(channel, f"notify.{index}", found)
    return found


def referenced_secrets(runner: Mapping[str, Any] | None, notify: Sequence[Any] | None) -> set[str]:
    """The names of the secrets a runner and its notify channels refer to."""
    return {name for _, name in secret_references(runner, notify)}


def _walk_config(config: object, field: str, found: list[tuple[str, str]]) -> None:
    if not isinstance(config, Mapping):
        return
    for key, value in config.items():
        if key in NAME_KEYS and isinstance(value, str):
            found.append((f"{field}.{key}", value))
        else:
            _walk(value, f"{field}.{key}", found)


def _walk(value: object, field: str, found: list[tuple[str, str]]) -> None:
    name = reference_name(value)
    if name is not None:
        found.append((field, name))
    elif isinstance(value, Mapping):
        for key, item in value.items():
            _walk(item, f"{field}.{key}", found)
    elif isinstance(value, list):
        for index, item in enumerate(value):
            _walk(item, f"{field}.{index}", found)


async def check_references(
    session: AsyncSession,
    owner: str,
    runner: Mapping[str, Any] | None,
    notify: Sequence[Any] | None,
) -> None:
    """Refuse a runner or notify configuration that refers to a secret ``owner`` has not
    stored: ``InvalidSchedule`` naming the field and the secret. None for either: not being
    changed, not checked. Another owner's secret of that name is missing like any other."""
    references = secret_references(runner, notify)
    if not references:
        return
    for field_path, name in references:
        check_name(name, field_path)
    names = {name for _, name in references}
    stored = set(
        await session.scalars(
            select(Secret.name).where(Secret.owner == owner, Secret.name.in_(names))
        )
    )
    for field_path, name in references:
        if name not in stored:
            raise InvalidSchedule(
                f"no secret named {name!r}: store it first "
                f"(PUT /api/v1/secrets/{name} or `agentcron secrets set {name}`)",
                field=field_path,
            )


# -- the operator's key ----------------------------------------------------------------------


def generate_key() -> str:
    """A fresh random key for ``AGENTCRON_SECRETS_KEY``."""
    return Fernet.generate_key().decode("ascii")


class Keyring:
    """The operator's keys: the first encrypts, every one decrypts (rotation).

    Tokens bind the value to its owner and name (see the module docstring). The keys are not
    in ``repr`` and no error message quotes them.
    """

    def __init__(self, keys: Sequence[str]) -> None:
        if not keys:
            raise ValueError("a keyring needs at least one key")
        self._fernet = MultiFernet([Fernet(key.encode("ascii")) for key in keys])
        self.size = len(keys)

    def __repr__(self) -> str:
        return f"Keyring(keys={self.size})"

    @classmethod
    def from_setting(cls, setting: SecretStr | str | None) -> Keyring | None:
        """The keyring of ``AGENTCRON_SECRETS_KEY``; None when it is unset or blank.

        Raises ``StartupError`` saying which key of the list is malformed, never quoting it.
        """
        text = setting.get_secret_value() if isinstance(setting, SecretStr) else setting
        if text is None or not text.strip():
            return None
        keys = [part.strip() for part in text.split(",") if part.strip()]
        if not keys:
            raise StartupError(f"{KEY_SETTING} lists no key ({KEY_HINT})")
        for position, key in enumerate(keys, start=1):
            try:
                Fernet(key.encode("ascii"))
            except (ValueError, UnicodeEncodeError):
                raise StartupError(
                    f"{KEY_SETTING} is not valid: key {position} of {len(keys)} is not a "
                    f"Fernet key (32 url-safe base64-encoded bytes; {KEY_HINT})"
                ) from None  # the cause would carry the key
        return cls(keys)

    def encrypt(self, owner: str, name: str, value: str) -> str:
        """The token stored for ``value`` as ``owner``'s secret ``name``."""
        plain = _SEP.join(
            (_PLAINTEXT_VERSION, owner.encode(), name.encode(), value.encode("utf-8"))
        )
        return self._fernet.encrypt(plain).decode("ascii")

    def decrypt(self, owner: str, name: str, token: str) -> str:
        """The value of ``token`` if it was made for ``owner``'s secret ``name`` under one of
        the keys; ``SecretUnreadable`` otherwise (wrong key, altered or moved row)."""
        try:
            plain = self._fernet.decrypt(token.encode("ascii"))
        except (InvalidToken, UnicodeEncodeError):
            raise SecretUnreadable(_unreadable(name)) from None
        parts = plain.split(_SEP, 3)
        if len(parts) != 4 or parts[:3] != [_PLAINTEXT_VERSION, owner.encode(), name.encode()]:
            raise SecretUnreadable(_unreadable(name))
        return parts[3].decode("utf-8")

    def rotate(self, token: str) -> str:
        """``token`` re-encrypted under the first key (same owner, name and value)."""
        try:
            return self._fernet.rotate(token.encode("ascii")).decode("ascii")
        except (InvalidToken, UnicodeEncodeError):
            raise SecretUnreadable("a stored secret does not decrypt under any key") from None


def _unreadable(name: str) -> str:
    return (
        f"secret {name!r} cannot be decrypted with {KEY_SETTING}: the key that stored it is "
        "no longer configured, or its row was altered"
    )


def _disabled() -> Conflict:
    # A Conflict (409), not a 503: retrying does not help until the operator sets the key.
    return Conflict(
        f"secrets cannot be stored: the service has no {KEY_SETTING} (the operator sets it; "
        f"{KEY_HINT})"
    )


# -- storage ---------------------------------------------------------------------------------


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
            async with db.session() as session:
                row = (
                    await session.execute(select(Secret).where(_one(owner, name)).with_for_update())
                ).scalar_one_or_none()
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
            if attempt == 1:
                raise
            continue
        log.info("secret_stored", owner=owner, name=name, created=created)
        return _info(row)
    raise AssertionError("unreachable")  # pragma: no cover


async def list_secrets(db: Database, owner: str) -> list[SecretInfo]:
    """``owner``'s secrets by name: names and times only, nothing decrypted."""
    query = (
        select(Secret.name, Secret.created_at, Secret.updated_at)
        .where(Secret.owner == owner)
        .order_by(Secret.name)
    )
    async with db.session(write=False) as session:
        rows = (await session.execute(query)).all()
    return [SecretInfo(name, created, updated) for name, created, updated in rows]


async def delete_secret(db: Database, owner: str, name: str) -> None:
    """Delete ``owner``'s secret ``name``; ``NotFound`` if it has none of that name. Schedules
    that refer to it keep the reference: their next run or delivery fails naming it."""
    check_name(name)
    async with db.session() as session:
        result = await session.execute(delete(Secret).where(_one(owner, name)))
        if not getattr(result, "rowcount", 0):
            raise NotFound("secret", name)
    log.info("secret_deleted", owner=owner, name=name)


def _one(owner: str, name: str) -> ColumnElement[bool]:
    return (Secret.owner == owner) & (Secret.name == name)


async def reencrypt_all(db: Database, keyring: Keyring, *, batch: int = 500) -> int:
    """Re-encrypt every stored secret under the keyring's first key; the count rewritten.

    After it, the other keys can be dropped from ``AGENTCRON_SECRETS_KEY``. Raises
    ``SecretUnreadable`` (and rewrites nothing of that batch) if a token decrypts under no key.
    """
    done = 0
    after: uuid.UUID | None = None
    while True:
        async with db.session() as session:
            query = select(Secret).order_by(Secret.id).limit(batch).with_for_update()
            if after is not None:
                query = query.where(Secret.id > after)
            rows = list(await session.scalars(query))
            for row in rows:
                row.ciphertext = keyring.rotate(row.ciphertext)
        done += len(rows)
        if len(rows) < batch:
            log.info("secrets_reencrypted", count=done)
            return done
        after = rows[-1].id


# -- resolution at run time ------------------------------------------------------------------


@dataclass(frozen=True)
class Resolution:
    """The values of the secrets that could be read, and why each of the others could not.
    ``values`` is kept out of ``repr`` so a resolution can never reach a log line whole."""

    values: dict[str, str] = field(default_factory=dict, repr=False)
    problems: dict[str, RunPermanentError] = field(default_factory=dict)

    def check(self) -> dict[str, str]:
        """``values`` when every secret was read; else raise the first problem by name."""
        if self.problems:
            raise self.problems[min(self.problems)]
        return self.values


async def load(
    db: Database,
    owner: str | None,
    names: Iterable[str],
    *,
    keyring: Keyring | None,
    schedule_id: uuid.UUID | None = None,
) -> Resolution:
    """Read and decrypt the secrets ``names`` of ``owner``, or of the owner of schedule
    ``schedule_id`` (one query either way, the owner found by a subquery), without raising for
    the ones that cannot be read: they are in ``problems``. A secret that does not exist is a
    ``TargetUnavailable`` (every later run would fail the same way); one that does not
    decrypt, or any secret without a keyring, a ``RunPermanentError``."""
    wanted = set(names)
    if not wanted:
        return Resolution()
    if owner is not None:
        who: Any = owner
    elif schedule_id is not None:
        who = select(Schedule.owner).where(Schedule.id == schedule_id).scalar_subquery()
    else:
        raise ValueError("load needs an owner or a schedule id")
    query = select(Secret.owner, Secret.name, Secret.ciphertext).where(
        Secret.owner == who, Secret.name.in_(wanted)
    )
    async with db.session(write=False) as session:
        rows = (await session.execute(query)).all()
    values: dict[str, str] = {}
    problems: dict[str, RunPermanentError] = {}
    for row_owner, name, token in rows:
        if keyring is None:
            problems[name] = RunPermanentError(
                f"secret {name!r} cannot be read: {KEY_SETTING} is not set on this replica"
            )
            continue
        try:
            values[name] = keyring.decrypt(row_owner, name, token)
        except SecretUnreadable as exc:
            problems[name] = exc
    for name in wanted - values.keys() - problems.keys():
        problems[name] = TargetUnavailable(
            f"secret {name!r} no longer exists: store it again "
            f"(`agentcron secrets set {name}`) or change the schedule"
        )
    return Resolution(values, problems)


async def resolve(
    db: Database, owner: str, names: Iterable[str], *, keyring: Keyring | None
) -> dict[str, str]:
    """The values of ``owner``'s secrets ``names`` (name -> value), one query. Raises the
    first problem by name (see ``load``) when any cannot be read."""
    return (await load(db, owner, names, keyring=keyring)).check()


# -- redaction -------------------------------------------------------------------------------


@overload
def redact(text: str, secrets: Mapping[str, str]) -> str: ...
@overload
def redact(text: None, secrets: Mapping[str, str]) -> None: ...
@overload
def redact(text: str | None, secrets: Mapping[str, str]) -> str | None: ...


def redact(text: str | None, secrets: Mapping[str, str]) -> str | None:
    """``text`` with every value of ``secrets`` (of ``MIN_REDACTED_CHARS`` or more) replaced
    by ``[secret:NAME]``, and a leading fragment that ends a value (what a tail cut leaves of
    it, ``MIN_FRAGMENT_CHARS`` or more) too. Longest values first, so a value that contains
    another is replaced whole."""
    if not text or not secrets:
        return text
    ordered = sorted(secrets.items(), key=lambda item: len(item[1]), reverse=True)
    for name, value in ordered:
        if len(value) >= MIN_REDACTED_CHARS:
            text = text.replace(value, f"[secret:{name}]")
    for name, value in ordered:
        text = _redact_leading_fragment(text, name, value)
    return text


def _redact_leading_fragment(text: str, name: str, value: str) -> str:
    if len(value) <= MIN_FRAGMENT_CHARS:
        return text
    head = text[:MIN_FRAGMENT_CHARS]
    if len(head) < MIN_FRAGMENT_CHARS:
        return text
    # Smallest start first: the longest fragment of the value that the text begins with.
    start = value.find(head, 1)
    for _ in range(_FRAGMENT_TRIES):
        if start < 0:
            break
        fragment = value[start:]
        if text.startswith(fragment):
            return f"[secret:{name}]" + text[len(fragment) :]
        start = value.find(head, start + 1)
    return text


__all__ = [
    "KEY_SETTING",
    "MAX_VALUE_BYTES",
    "NAME_KEYS",
    "Keyring",
    "Resolution",
    "SecretInfo",
    "SecretUnreadable",
    "check_name",
    "check_reference",
    "check_references",
    "check_value",
    "delete_secret",
    "generate_key",
    "list_secrets",
    "load",
    "put_secret",
    "redact",
    "reencrypt_all",
    "referenced_secrets",
    "resolve",
    "secret_references",
]
