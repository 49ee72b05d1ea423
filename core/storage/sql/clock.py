"""Statements on the database's clock (``core.clock.DatabaseClock``)."""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import Select, func, select

from agentcron.core.storage.types import UTCDateTime


def database_now() -> Select[datetime]:
    """The database's clock, the one time of every replica (``core.clock.DatabaseClock``).
    ``clock_timestamp()``, not ``now()``: the instant the statement runs, whatever the
    transaction."""
    return select(func.clock_timestamp(type_=UTCDateTime()))
