"""What the log says of each run (``AGENTCRON_LOG_RUNS``).

``summary`` (the default): a run that went well is counted, not logged. Every
``SUMMARY_SECONDS`` in which runs started or ended, one ``runs_summary`` line says how many
started and how many ended in each status; a run that ended in anything but success (failed,
timed out, cancelled) still has its own ``run_finished`` line, as retries, lost leases, takeovers
and deliveries have theirs. A burst of 10,000 runs that all succeed is a line or two, not
20,000 rendered JSON lines (two per run were about a seventh of the service's CPU per run).

``each``: every run's ``run_started`` and ``run_finished`` lines, as before the summary: what an
operator asks for to follow single runs through the log (every line names the run, its
schedule, its attempt and the instance). The run's record (``GET /api/v1/runs/{id}``) has its
start and end either way.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import Counter

from agentcron.core.logging import get_logger, logs_at

SUMMARY_SECONDS = 10.0

log = get_logger("agentcron.engine")
LINES = logging.getLogger("agentcron.engine")


class RunLines:
    """Which of a run's lines are written one by one (``each``), and the running count of those
    that are summarised."""

    def __init__(self, each: bool, instance_id: str, seconds: float = SUMMARY_SECONDS) -> None:
        self.each = each
        self.instance_id = instance_id
        self.seconds = seconds
        self.started = 0
        self.ended: Counter[str] = Counter()
        self._since = 0.0
        self._timer: asyncio.TimerHandle | None = None

    def kept(self) -> bool:
        """Whether the engine's info lines are kept at all (``core.logging.logs_at``)."""
        return logs_at(LINES, logging.INFO)

    def count_start(self) -> None:
        self.started += 1
        self._arm()

    def count_end(self, status: str) -> None:
        self.ended[status] += 1
        self._arm()

    def _arm(self) -> None:
        if self._timer is None:
            self._since = time.monotonic()
            self._timer = asyncio.get_running_loop().call_later(self.seconds, self.flush)

    def flush(self) -> None:
        """Write the summary of what was counted since the last one (at stop too)."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if not self.started and not self.ended:
            return
        if self.kept():
            log.info(
                "runs_summary",
                instance_id=self.instance_id,
                seconds=round(time.monotonic() - self._since, 3),
                started=self.started,
                **dict(sorted(self.ended.items())),
            )
        self.started, self.ended = 0, Counter()
