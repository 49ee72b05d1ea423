"""Resolution at run time: the secrets one attempt or delivery refers to, and their values.

It owns where a configuration refers to a stored secret (the reference ``{"secret": NAME}``
anywhere, the top-level ``NAME_KEYS`` of a runner or channel), reading and decrypting the
referenced secrets of an owner (or of a schedule's owner) with one query, and saying why each
secret that cannot be read is missing: ``Resolution`` keeps the values and the problems apart,
and the values out of its ``repr``. The rules a name or a reference must follow at save are
``core.secrets.references``.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import ScalarSelect

from agentcron.core.errors import RunPermanentError, TargetUnavailable
from agentcron.core.secrets.keyring import KEY_SETTING, Keyring, SecretUnreadable
from agentcron.core.storage.database import Database
from agentcron.core.storage.sql.schedules import schedule_owner
from agentcron.core.storage.sql.secrets import ciphertexts

# Top-level keys of a runner or channel whose string value names a secret. Everywhere else a
# reference is a value ``{"secret": NAME}``.
NAME_KEYS = frozenset({"api_key_secret", "smtp_url_secret"})


def reference_name(value: object) -> str | None:
    """The name in a reference ``{"secret": NAME}`` (exactly that one key, a string), else
    None. The name is not checked here: ``check_reference`` does."""
    if isinstance(value, Mapping) and len(value) == 1:
        name = value.get("secret")
        if isinstance(name, str):
            return name
    return None


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
    who: str | ScalarSelect[str]
    if owner is not None:
        who = owner
    elif schedule_id is not None:
        who = schedule_owner(schedule_id)
    else:
        raise ValueError("load needs an owner or a schedule id")
    async with db.session(write=False) as session:
        rows = (await session.execute(ciphertexts(who, wanted))).all()
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
