"""The one place that reads the wall clock, so tests and callers can pass their own."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime

Clock = Callable[[], datetime]


def utcnow() -> datetime:
    """The current instant as an aware UTC datetime."""
    return datetime.now(UTC)
