"""Opaque keyset cursors: a cursor holds every key its list is sorted by, ending with the id
that breaks the last ties, so the next page starts exactly after the last row of this one."""

from __future__ import annotations

import base64
import binascii
import json
import uuid
from dataclasses import dataclass
from datetime import datetime
from typing import Generic, TypeVar

from agentcron.core.errors import MalformedInput

T = TypeVar("T")
MAX_LIMIT = 500
NOT_A_CURSOR = "not a cursor this API returned"


@dataclass(frozen=True)
class Page(Generic[T]):
    """One page of a list and the cursor of the next page (``None`` on the last one)."""

    items: list[T]
    next_cursor: str | None


def encode_cursor(*position: datetime | uuid.UUID) -> str:
    """The cursor of ``position``: the sort keys of a page's last row, instants then its id."""
    keys = [str(key) if isinstance(key, uuid.UUID) else key.isoformat() for key in position]
    return base64.urlsafe_b64encode(json.dumps(keys).encode()).decode().rstrip("=")


def decode_cursor(cursor: str) -> tuple[datetime, uuid.UUID]:
    """The position a cursor of a list sorted by (created_at, id) names;
    ``MalformedInput(field="cursor")`` if it is not ours."""
    (created,), id = _position(cursor, 1)
    return created, id


def decode_run_cursor(cursor: str) -> tuple[datetime, datetime, uuid.UUID]:
    """The position a cursor of the run history (``core.runs``: created_at, due time, id)
    names; ``MalformedInput(field="cursor")`` if it is not ours."""
    (created, due), id = _position(cursor, 2)
    return created, due, id


def _position(cursor: str, instants: int) -> tuple[list[datetime], uuid.UUID]:
    """``instants`` aware datetimes and an id, as ``encode_cursor`` wrote them."""
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4))
        *times, id = json.loads(raw)
        position = [datetime.fromisoformat(time) for time in times], uuid.UUID(id)
    except (binascii.Error, ValueError, TypeError, AttributeError, UnicodeDecodeError):
        raise MalformedInput(NOT_A_CURSOR, field="cursor") from None
    if len(position[0]) != instants or any(time.tzinfo is None for time in position[0]):
        raise MalformedInput(NOT_A_CURSOR, field="cursor")
    return position


def check_limit(limit: int) -> int:
    if not 1 <= limit <= MAX_LIMIT:
        raise MalformedInput(f"must be between 1 and {MAX_LIMIT}", field="limit")
    return limit
