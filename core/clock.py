"""The one place that reads the wall clock, so tests and callers can pass their own.

On PostgreSQL the engine's clock is the database's (``DatabaseClock``): replicas on several
hosts judge due times and leases by one time, not each by its own. Reading the database's time
for every comparison would cost a statement per claim; instead the skew between this host and
the database is measured now and then (``web.engine.clockwatch``) and added to the local clock.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from agentcron.core.storage.database import Database

Clock = Callable[[], datetime]


def utcnow() -> datetime:
    """The current instant as an aware UTC datetime."""
    return datetime.now(UTC)


class DatabaseClock:
    """The database's time, told without asking it: the local clock plus the last measured
    skew (database minus local). A ``Clock``: pass it wherever one is taken.

    Until a first measurement succeeds the skew is 0 (the local clock). A failed measurement
    leaves the skew as it was; only ``observe`` (through ``measure``) changes it. ``local`` may
    be replaced (tests put a deliberately wrong clock there).
    """

    def __init__(self, local: Clock = utcnow, *, warn_seconds: float = 2.0) -> None:
        self.local = local
        self.warn_seconds = warn_seconds
        self.skew = timedelta(0)
        self.round_trip: timedelta | None = None  # of the last measurement
        self.measured_at: datetime | None = None  # database time of the last measurement

    def __call__(self) -> datetime:
        return self.local() + self.skew

    @property
    def skew_seconds(self) -> float:
        return self.skew.total_seconds()

    @property
    def skewed(self) -> bool:
        """The last measured skew is beyond ``warn_seconds`` either way."""
        return abs(self.skew_seconds) > self.warn_seconds

    def observe(self, before: datetime, database_now: datetime, after: datetime) -> float:
        """Take one sample: the database read ``database_now`` while the local clock went from
        ``before`` to ``after``. The skew becomes ``database_now`` minus the midpoint, off by at
        most half the round trip (milliseconds, against leases and grace of seconds). The
        latest sample wins rather than an average: after the local clock is stepped (NTP), the
        next measurement must follow at once. Returns the skew in seconds."""
        midpoint = before + (after - before) / 2
        self.skew = database_now - midpoint
        self.round_trip = after - before
        self.measured_at = database_now
        return self.skew_seconds

    async def measure(self, db: Database) -> float:
        """Read the database's clock once and ``observe`` it; returns the skew in seconds.

        One statement in autocommit on the engine's batch pool (no BEGIN and COMMIT around
        it, which would widen the round trip). Raises ``SchedulerUnavailable`` when the
        database cannot be reached, leaving the skew unchanged.
        """
        from agentcron.core.storage.sql.clock import database_now as now_statement

        async with db.connection(single=True) as connection:
            before = self.local()
            database_now = (await connection.execute(now_statement())).scalar_one()
            after = self.local()
        return self.observe(before, database_now, after)
