"""Opaque keyset cursors for lists ordered newest created first (ties by id)."""

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


def encode_cursor(created_at: datetime, id: uuid.UUID) -> str:
    raw = json.dumps([created_at.isoformat(), str(id)]).encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def decode_cursor(cursor: str) -> tuple[datetime, uuid.UUID]:
    """The position a cursor names; ``MalformedInput(field="cursor")`` if it is not ours."""
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4))
        created, id = json.loads(raw)
        position = datetime.fromisoformat(created), uuid.UUID(id)
    except (binascii.Error, ValueError, TypeError, UnicodeDecodeError):
        raise MalformedInput(NOT_A_CURSOR, field="cursor") from None
    if position[0].tzinfo is None:
        raise MalformedInput(NOT_A_CURSOR, field="cursor")
    return position


def check_limit(limit: int) -> int:
    if not 1 <= limit <= MAX_LIMIT:
        raise MalformedInput(f"must be between 1 and {MAX_LIMIT}", field="limit")
    return limit
