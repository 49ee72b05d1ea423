"""Keeps the engine's ``DatabaseClock`` in step with the database (PostgreSQL only).

Measured once at start, before the loop's first claim, then every ``SYNC_SECONDS`` on a task
of its own, never on the claim path: an idle replica sends one statement per tick plus this
one a minute. The skew is exported as a gauge; past ``AGENTCRON_CLOCK_SKEW_WARN_SECONDS`` a
``clock_skew`` warning is logged once per crossing and ``/readyz`` carries a warning (it stays
200: due times and leases use the database's clock, so the engine still works correctly; the
warning says this host's clock needs fixing, which matters to everything else on it).
"""

from __future__ import annotations

import asyncio
from typing import Any

from agentcron.core.clock import DatabaseClock
from agentcron.core.logging import get_logger
from agentcron.core.storage.database import Database
from agentcron.web.engine.metrics import EngineMetrics
from agentcron.web.engine.supervisor import Supervisor, sleep_or_stop

log = get_logger("agentcron.clock")

SYNC_SECONDS = 60.0


class ClockWatch:
    """Measures ``clock`` against ``db`` now and then. ``measure`` never raises: a failed
    measurement (database down) keeps the last skew and is logged once per failure streak."""

    def __init__(
        self,
        clock: DatabaseClock,
        db: Database,
        *,
        instance_id: str,
        metrics: EngineMetrics,
        interval: float = SYNC_SECONDS,
        supervisor: Supervisor | None = None,
    ) -> None:
        self.clock = clock
        self.db = db
        self.instance_id = instance_id
        self.metrics = metrics
        self.interval = interval
        self.measurements = 0  # successful ones (diagnostics and tests)
        self._warned = False
        self._failing = False
        self._stop = asyncio.Event()
        self.supervisor = supervisor or Supervisor(metrics)

    async def measure(self) -> None:
        """Measure the skew once; update the gauge; log a crossing of the threshold."""
        try:
            skew = await self.clock.measure(self.db)
        except Exception as exc:  # the watch, like the loop, survives everything
            if not self._failing:
                log.warning(
                    "clock_skew_unmeasured",
                    error=type(exc).__name__,
                    detail=str(exc.__cause__ or exc)[:200],
                    kept_skew_seconds=round(self.clock.skew_seconds, 3),
                    instance_id=self.instance_id,
                )
            self._failing = True
            return
        self._failing = False
        self.measurements += 1
        self.metrics.clock_skew.set(skew)
        skewed = self.clock.skewed
        if skewed and not self._warned:
            log.warning(
                "clock_skew",
                skew_seconds=round(skew, 3),
                threshold_seconds=self.clock.warn_seconds,
                instance_id=self.instance_id,
            )
        elif self._warned and not skewed:
            log.info(
                "clock_skew_recovered", skew_seconds=round(skew, 3), instance_id=self.instance_id
            )
        self._warned = skewed

    @property
    def warning(self) -> dict[str, Any] | None:
        """What ``/readyz`` says while the last measured skew is past the threshold."""
        if not self.clock.skewed:
            return None
        skew = round(self.clock.skew_seconds, 3)
        return {
            "check": "clock_skew",
            "skew_seconds": skew,
            "threshold_seconds": self.clock.warn_seconds,
            "message": (
                f"this host's clock is {abs(skew):g} s {'behind' if skew > 0 else 'ahead of'} "
                "the database's; due times and leases use the database's clock"
            ),
        }

    async def start(self) -> None:
        """Measure now (returns once done, so what starts next uses the database's time),
        then every ``interval`` on a supervised task of its own (``clock``) until ``stop``."""
        await self.measure()
        self.supervisor.spawn("clock", self._run)

    async def stop(self) -> None:
        self._stop.set()
        await self.supervisor.stop("clock")

    async def _run(self) -> None:
        while not self._stop.is_set():
            await sleep_or_stop(self._stop, self.interval)
            if not self._stop.is_set():
                await self.measure()
