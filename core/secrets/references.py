"""Secret names, values and references: what may be stored, and where a configuration refers
to a stored secret.

It owns the rules for a name, a value and a reference ``{"secret": NAME}``, and refuses a
configuration that refers to a secret its owner has not stored (finding the references is
``core.secrets.resolution``'s, as reading them at run time is). Nothing here reads a value.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

from sqlalchemy.ext.asyncio import AsyncSession

from agentcron.core.errors import InvalidSchedule
from agentcron.core.secrets.resolution import reference_name, secret_references
from agentcron.core.storage.sql.secrets import stored_names

NAME_PATTERN = r"[A-Za-z0-9][A-Za-z0-9._-]{0,99}"
_NAME = re.compile(NAME_PATTERN)
MAX_VALUE_BYTES = 65_536


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


def check_reference(value: object, field: str) -> dict[str, str]:
    """The normalised reference ``{"secret": NAME}`` or ``InvalidSchedule`` naming ``field``."""
    name = reference_name(value)
    if name is None:
        raise InvalidSchedule('a secret reference is {"secret": "NAME"}', field=field)
    return {"secret": check_name(name, field)}


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
    stored = set(await session.scalars(stored_names(owner, names)))
    for field_path, name in references:
        if name not in stored:
            raise InvalidSchedule(
                f"no secret named {name!r}: store it first "
                f"(PUT /api/v1/secrets/{name} or `agentcron secrets set {name}`)",
                field=field_path,
            )
