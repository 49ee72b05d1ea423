"""The engine's Prometheus metrics, served at ``/metrics`` (no key, like the probes).

One registry per app, not the library's global one: several apps in one process (tests, an
embedding host) must not share or collide on counters. Without the metrics extra
(prometheus-client) every metric is an inert stand-in and ``registry`` is None: the engine
counts nothing and ``/metrics`` says which extra to install.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from agentcron.core.extras import have

if TYPE_CHECKING:
    from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

# Start delay and claim duration live in milliseconds to seconds; run duration up to hours.
_FAST = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)
_RUNS = (0.1, 0.5, 1.0, 5.0, 15.0, 30.0, 60.0, 300.0, 900.0, 1800.0, 3600.0, 7200.0)
_BATCH = (1, 2, 4, 8, 16, 32, 64, 128, 256, 500)


class _Inert:
    """A metric that records nothing: what every metric is without prometheus-client."""

    def __init__(self, *args: object, **kwargs: object) -> None:
        pass

    def labels(self, *args: object, **kwargs: object) -> _Inert:
        return self

    def inc(self, amount: float = 1) -> None:
        pass

    def dec(self, amount: float = 1) -> None:
        pass

    def set(self, value: float) -> None:
        pass

    def observe(self, amount: float) -> None:
        pass

    def set_function(self, f: Callable[[], float]) -> None:
        pass


def _kinds() -> tuple[Any, Any, Any, Any]:
    """The registry and metric classes: prometheus-client's, or the inert stand-ins."""
    if not have("metrics"):
        return (lambda: None), _Inert, _Inert, _Inert
    from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

    return CollectorRegistry, Counter, Gauge, Histogram


class EngineMetrics:
    """Every metric the engine updates; ``registry`` is what ``/metrics`` renders (None
    without the metrics extra)."""

    registry: CollectorRegistry | None
    runs: Counter
    start_delay: Histogram
    duration: Histogram
    claim_size: Histogram
    claim_duration: Histogram
    in_flight: Gauge
    lease_recoveries: Counter
    delivery_recoveries: Counter
    deliveries: Counter
    pruned: Counter
    clock_skew: Gauge
    iterations: Counter
    errors: Counter
    task_restarts: Counter
    leases_lost: Counter

    def __init__(self) -> None:
        registry, counter, gauge, histogram = _kinds()
        self.registry = registry()
        r = self.registry
        self.runs = counter(
            "agentcron_runs",
            "Runs that reached a final status here, by status and trigger.",
            ["status", "trigger"],
            registry=r,
        )
        # The child of ``runs`` per (status, trigger): ``labels()`` validates and locks on
        # every call, and the engine counts every run it ends.
        self._ended: dict[tuple[str, str], Any] = {}
        self.start_delay = histogram(
            "agentcron_run_start_delay_seconds",
            "From a scheduled run's due time to the start of its attempt.",
            buckets=_FAST,
            registry=r,
        )
        self.duration = histogram(
            "agentcron_run_duration_seconds",
            "From an attempt's start to its recorded outcome.",
            buckets=_RUNS,
            registry=r,
        )
        self.claim_size = histogram(
            "agentcron_claim_batch_size",
            "Runs taken by one claim that found work.",
            buckets=_BATCH,
            registry=r,
        )
        self.claim_duration = histogram(
            "agentcron_claim_duration_seconds",
            "Time of one claim transaction.",
            buckets=_FAST,
            registry=r,
        )
        self.in_flight = gauge(
            "agentcron_runs_in_flight", "Attempts executing in this process now.", registry=r
        )
        self.lease_recoveries = counter(
            "agentcron_lease_recoveries",
            "Runs taken over from another replica's expired lease.",
            registry=r,
        )
        self.delivery_recoveries = counter(
            "agentcron_delivery_recoveries",
            "Runs whose deliveries were taken over after their deliverer's lease ran out.",
            registry=r,
        )
        self.deliveries = counter(
            "agentcron_deliveries",
            "Deliveries that reached a final status here, by channel and status.",
            ["channel", "status"],
            registry=r,
        )
        self.pruned = counter(
            "agentcron_runs_pruned",
            "Finished runs deleted by retention (AGENTCRON_RETENTION_DAYS).",
            registry=r,
        )
        self.clock_skew = gauge(
            "agentcron_clock_skew_seconds",
            "The database's clock minus this host's, last measured (PostgreSQL; 0 on SQLite).",
            registry=r,
        )
        self.iterations = counter(
            "agentcron_loop_iterations", "Wake-ups of the scheduling loop.", registry=r
        )
        self.errors = counter(
            "agentcron_loop_errors", "Wake-ups of the loop that ended in an error.", registry=r
        )
        self.task_restarts = counter(
            "agentcron_task_restarts",
            "Crashes of the engine's long-lived tasks (loop, heartbeat, listen, retention, "
            "clock), each followed by a restart, by task.",
            ["task"],
            registry=r,
        )
        self.leases_lost = counter(
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
