"""Secret names, values and references: what may be stored, and where a configuration refers
to a stored secret.

It owns the rules for a name and a value, the reference ``{"secret": NAME}`` and the top-level
``NAME_KEYS`` of a runner or channel, finding every reference in a configuration, and refusing
a configuration that refers to a secret its owner has not stored. Nothing here reads a value.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncSession

from agentcron.core.errors import InvalidSchedule
from agentcron.core.storage.models import Secret

NAME_PATTERN = r"[A-Za-z0-9][A-Za-z0-9._-]{0,99}"
_NAME = re.compile(NAME_PATTERN)
MAX_VALUE_BYTES = 65_536
# Top-level keys of a runner or channel whose string value names a secret. Everywhere else a
# reference is a value ``{"secret": NAME}``.
NAME_KEYS = frozenset({"api_key_secret", "smtp_url_secret"})


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
