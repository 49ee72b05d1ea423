"""The engine's Prometheus metrics, served at ``/metrics`` (no key, like the probes).

One registry per app, not the library's global one: several apps in one process (tests, an
embedding host) must not share or collide on counters.
"""

from __future__ import annotations

from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

# Start delay and claim duration live in milliseconds to seconds; run duration up to hours.
_FAST = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)
_RUNS = (0.1, 0.5, 1.0, 5.0, 15.0, 30.0, 60.0, 300.0, 900.0, 1800.0, 3600.0, 7200.0)
_BATCH = (1, 2, 4, 8, 16, 32, 64, 128, 256, 500)


class EngineMetrics:
    """Every metric the engine updates; ``registry`` is what ``/metrics`` renders."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        self.runs = Counter(
            "agentcron_runs",
            "Runs that reached a final status here, by status and trigger.",
            ["status", "trigger"],
            registry=r,
        )
        # The child of ``runs`` per (status, trigger): ``labels()`` validates and locks on
        # every call, and the engine counts every run it ends.
        self._ended: dict[tuple[str, str], Any] = {}
        self.start_delay = Histogram(
            "agentcron_run_start_delay_seconds",
            "From a scheduled run's due time to the start of its attempt.",
            buckets=_FAST,
            registry=r,
        )
        self.duration = Histogram(
            "agentcron_run_duration_seconds",
            "From an attempt's start to its recorded outcome.",
            buckets=_RUNS,
            registry=r,
        )
        self.claim_size = Histogram(
            "agentcron_claim_batch_size",
            "Runs taken by one claim that found work.",
            buckets=_BATCH,
            registry=r,
        )
        self.claim_duration = Histogram(
            "agentcron_claim_duration_seconds",
            "Time of one claim transaction.",
            buckets=_FAST,
            registry=r,
        )
        self.in_flight = Gauge(
            "agentcron_runs_in_flight", "Attempts executing in this process now.", registry=r
        )
        self.lease_recoveries = Counter(
            "agentcron_lease_recoveries",
            "Runs taken over from another replica's expired lease.",
            registry=r,
        )
        self.delivery_recoveries = Counter(
            "agentcron_delivery_recoveries",
            "Runs whose deliveries were taken over after their deliverer's lease ran out.",
            registry=r,
        )
        self.deliveries = Counter(
            "agentcron_deliveries",
            "Deliveries that reached a final status here, by channel and status.",
            ["channel", "status"],
            registry=r,
        )
        self.pruned = Counter(
            "agentcron_runs_pruned",
            "Finished runs deleted by retention (AGENTCRON_RETENTION_DAYS).",
            registry=r,
        )
        self.clock_skew = Gauge(
            "agentcron_clock_skew_seconds",
            "The database's clock minus this host's, last measured (PostgreSQL; 0 on SQLite).",
            registry=r,
        )
        self.iterations = Counter(
            "agentcron_loop_iterations", "Wake-ups of the scheduling loop.", registry=r
        )
        self.errors = Counter(
            "agentcron_loop_errors", "Wake-ups of the loop that ended in an error.", registry=r
        )
        self.task_restarts = Counter(
            "agentcron_task_restarts",
            "Crashes of the engine's long-lived tasks (loop, heartbeat, listen, retention, "
            "clock), each followed by a restart, by task.",
            ["task"],
            registry=r,
        )
        self.leases_lost = Counter(
            "agentcron_leases_lost",
            "Attempts stopped here because their lease was taken over or could not be renewed "
            "before it ran out.",
            registry=r,
        )

    def ended(self, status: str, trigger: str) -> None:
        """Count a run that reached a final status here (``runs``, by status and trigger)."""
        child = self._ended.get((status, trigger))
        if child is None:
            child = self._ended[(status, trigger)] = self.runs.labels(status, trigger)
        child.inc()
