"""What every adapter shares: the CLI, the event-loop lag probe, peak RSS, the result line.

The CLI is the same for every contender, so the harness treats them alike::

    python -m bench.adapters.<name> populate --dsn URL --count N --at ISO
    python -m bench.adapters.<name> fire --dsn URL --count N --at ISO [--give-up-after S]

``populate`` stores N one-shot schedules due at ``--at`` (not timed). ``fire`` starts the
scheduler (before ``--at``), runs until all N runs are done or the timeout passes, and prints
one JSON line (``result``). ``--dsn`` is a ``postgresql://`` or ``sqlite:///<file>`` URL; each
adapter picks its own driver (``with_driver``). The agentcron adapter alone also knows the
other workloads' commands and options (``idle``, ``steady``, ``create``, ``--shape`` ...).
Standard library only: the peers' virtualenvs import this module.
"""

from __future__ import annotations

import argparse
import asyncio
import heapq
import json
import os
import resource
import statistics
import time
from collections.abc import Sequence
from datetime import datetime
from typing import Any

# The python runner's target in agentcron's adapters: the no-op as a coroutine, run on the event
# loop as the peers run it; ``bench.noop:run`` (agentcron-c256-thread) runs it in a worker thread.
NOOP_TARGET = os.environ.get("BENCH_NOOP_TARGET", "bench.noop:arun")
HEARTBEAT_SECONDS = 0.010
# Before an idle window: longer than PostgreSQL's 10 s idle stats flush (PGSTAT_IDLE_INTERVAL),
# so the start-up transactions are counted before the window opens, not inside it.
IDLE_WARMUP_SECONDS = 11.0
_READY: list[float] = []


def mark_ready() -> None:
    """Note the instant the scheduler was started (reported as the margin before T0)."""
    _READY.append(time.time())


def parse_args(
    argv: Sequence[str] | None = None, commands: Sequence[str] = ("populate", "fire")
) -> argparse.Namespace:
    """``populate``/``fire`` with ``--dsn`` (a ``postgresql[+driver]://`` or
    ``sqlite[+driver]:///`` URL), ``--count``, ``--at`` (ISO time with offset: T0, the instant
    every schedule is due). The options after ``--give-up-after`` serve the agentcron-only
    workloads; other adapters ignore them."""
    parser = argparse.ArgumentParser()
    parser.add_argument("command", choices=list(commands))
    parser.add_argument("--dsn", required=True)
    parser.add_argument("--count", type=int, default=0)
    parser.add_argument("--at", type=datetime.fromisoformat)
    parser.add_argument(
        "--give-up-after", type=float, default=600.0, help="fire: stop at T0 + this (s)"
    )
    parser.add_argument("--shape", choices=["burst", "idle", "steady"], default="burst")
    parser.add_argument("--every", type=int, default=60, help="steady: interval of each (s)")
    parser.add_argument("--idle-rows", type=int, default=0, help="populate: + rows due in 30 d")
    parser.add_argument("--seconds", type=float, default=60.0, help="idle/steady: window (s)")
    parser.add_argument("--replicas", type=int, default=1, help="fire: engine processes")
    args = parser.parse_args(argv)
    needs_t0 = args.command in ("populate", "fire", "steady")
    if needs_t0 and (args.at is None or args.at.tzinfo is None):
        parser.error("--at (with a UTC offset) is required")
    return args


def backend(dsn: str) -> str:
    """``postgresql`` or ``sqlite``: the database behind a URL, whatever its driver."""
    return dsn.partition(":")[0].split("+")[0]


def with_driver(dsn: str, driver: str | None) -> str:
    """The same database URL with scheme ``<backend>`` or ``<backend>+<driver>``."""
    name, rest = backend(dsn), dsn.partition(":")[2]
    return f"{name if driver is None else f'{name}+{driver}'}:{rest}"


def cpu_seconds() -> float:
    """User plus system CPU time of this process so far (all its threads)."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def process_cpu_seconds(pid: int) -> float | None:
    """User plus system CPU time so far of process ``pid`` (every thread; not its children),
    from ``/proc/<pid>/stat`` in clock ticks (10 ms on most kernels); None if it is gone."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            # The command name (field 2) may hold spaces: count the fields after its ")".
            fields = stat.read().rpartition(")")[2].split()
    except OSError:
        return None
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


# The ``application_name`` of an adapter's own database connection (progress polls, final
# counts): the harness leaves its backend out of PostgreSQL's CPU per run.
PROBE_APPLICATION = "bench-probe"
# After the burst-done line, how long an adapter leaves its database alone (no final counts,
# no shutdown) so the harness's last reading of PostgreSQL's counters sees the burst only.
BURST_DONE_PAUSE_SECONDS = 0.3


async def burst_done() -> None:
    """Tell the harness the burst is over (every run recorded): a ``{"event": "burst_done"}``
    line, on which it takes its last reading of PostgreSQL's cost (``bench.pgcost``); then
    wait a moment before the adapter's own wrap-up queries."""
    emit({"event": "burst_done"})
    await asyncio.sleep(BURST_DONE_PAUSE_SECONDS)


def percentile(values: Sequence[float], q: float) -> float | None:
    """The nearest-rank ``q`` quantile (0..1) of ``values``; None when empty."""
    if not values:
        return None
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))]


def slot_gaps(spans: Sequence[tuple[float, float]], slots: int) -> list[float]:
    """How long a concurrency slot stayed empty between one run's end and the next run's
    start in it, in seconds, from the runs' ``(start, end)`` spans as the job noted them.

    The engine does not say which slot a run held, so ``slots`` slots are replayed: runs in
    start order, each into the slot freed earliest (a min-heap of end times). The first
    ``slots`` runs fill empty slots and have no predecessor; every later run of a burst was
    already due when the slot it takes was freed, so start minus that end is time the engine
    spent between runs (recording the outcome, admitting the next, the thread hop), not time
    it had nothing to do. A run starting before the earliest end (more runs at once than
    slots: clocks of two threads) gives no gap rather than a negative one.
    """
    ordered = sorted(spans)
    ends = [end for _, end in ordered[:slots]]
    heapq.heapify(ends)
    gaps: list[float] = []
    for start, end in ordered[slots:]:
        freed = heapq.heapreplace(ends, end)
        if start >= freed:
            gaps.append(start - freed)
    return gaps


def slot_gap_figures(spans: Sequence[tuple[float, float]], slots: int) -> dict[str, Any]:
    """``slot_gaps`` as figures: how many, median and p99 in ms (None when the burst never
    filled every slot, so no gap was measured)."""
    gaps = slot_gaps(spans, slots)
    median, p99 = percentile(gaps, 0.5), percentile(gaps, 0.99)
    return {
        "slot_gaps": len(gaps),
        "slot_gap_p50_ms": None if median is None else round(median * 1000, 3),
        "slot_gap_p99_ms": None if p99 is None else round(p99 * 1000, 3),
    }


class LagMonitor:
    """Maximum event-loop lag: how much later than asked a 10 ms sleep wakes up.

    ``keep_beats``: also keep every beat as ``(time.time(), lag s)``, for a process whose
    probe cannot be stopped when the burst ends (``bench.inside``): the reader then takes the
    maximum over the burst's own window."""

    def __init__(self, keep_beats: bool = False) -> None:
        self.max_lag = 0.0
        self.beats: list[tuple[float, float]] | None = [] if keep_beats else None
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self._task = asyncio.create_task(self._beat())

    async def _beat(self) -> None:
        while True:
            before = time.perf_counter()
            await asyncio.sleep(HEARTBEAT_SECONDS)
            lag = time.perf_counter() - before - HEARTBEAT_SECONDS
            self.max_lag = max(self.max_lag, lag)
            if self.beats is not None:
                self.beats.append((time.time(), lag))

    async def stop(self) -> float:
        """Stop the probe; the maximum lag seen, in milliseconds."""
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
        return round(self.max_lag * 1000, 1)


def peak_rss_mb() -> float:
    """Peak resident set size of this process (VmHWM), in MiB."""
    try:
        with open("/proc/self/status") as status:
            for line in status:
                if line.startswith("VmHWM:"):
                    return round(int(line.split()[1]) / 1024, 1)
    except OSError:
        pass
    return round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)


def result(
    *,
    contender: str,
    count: int,
    t0: datetime,
    starts: Sequence[float],
    finishes: Sequence[float],
    recorded: int,
    distinct: int,
    succeeded: int,
    max_lag_ms: float | None,
    own_transactions: int,
    extra: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """The figures of one burst, from per-run start and finish times (epoch seconds).

    ``recorded`` runs in the database after the burst, ``distinct`` of them for different
    schedules: lost = count - distinct, duplicated = recorded - distinct.
    ``own_transactions`` counts the adapter's own bookkeeping transactions (progress polls,
    the final count), which the harness subtracts from the database's commit counter.
    """
    base = t0.timestamp()
    started = len(starts)
    all_started = max(starts) - base if starts else None
    all_finished = max(finishes) - base if finishes else None
    lateness = sorted(start - base for start in starts)
    return {
        "contender": contender,
        "count": count,
        "started": started,
        "recorded": recorded,
        "succeeded": succeeded,
        "lost": count - distinct,
        "duplicated": recorded - distinct,
        "all_started_s": None if all_started is None else round(all_started, 4),
        "all_finished_s": None if all_finished is None else round(all_finished, 4),
        "fires_per_s": round(started / all_started, 1) if all_started else None,
        "first_lateness_ms": round(lateness[0] * 1000, 2) if lateness else None,
        "median_start_s": round(statistics.median(lateness), 4) if lateness else None,
        "peak_rss_mb": peak_rss_mb(),
        "max_loop_lag_ms": max_lag_ms,
        "own_transactions": own_transactions,
        "ready_margin_s": round(base - _READY[0], 3) if _READY else None,
        **(extra or {}),
    }


def emit(figures: dict[str, Any]) -> None:
    """The one line of JSON the harness reads (the last line of stdout)."""
    print(json.dumps(figures), flush=True)


async def sleep_until(when: datetime) -> None:
    """Sleep until the wall-clock instant ``when`` (aware)."""
    delay = when.timestamp() - time.time()
    if delay > 0:
        await asyncio.sleep(delay)
