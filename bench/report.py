"""Summaries and Markdown tables of the rounds of a workload.

A workload's section of ``bench/results/latest.json`` holds ``per_round`` (a list of
``{variant: figures}``: a variant is a contender, or ``1 process``/``2 processes``, ...),
``medians`` (per variant, the median over rounds of every number; lost, doubled and
executed also as their maximum) and ``ratios`` (median, min and max of per-round ratios).
"""

from __future__ import annotations

import statistics
from typing import Any

Columns = list[tuple[str, str]]

BURST: Columns = [
    ("all started s", "all_started_s"),
    ("all finished s", "all_finished_s"),
    ("fires/s", "fires_per_s"),
    ("first lateness ms", "first_lateness_ms"),
    ("lost", "lost_max"),
    ("doubled", "duplicated_max"),
    ("commits/fire", "commits_per_fire"),
    ("statements/fire", "statements_per_fire"),
    ("peak RSS MB", "peak_rss_mb"),
    ("max loop lag ms", "max_loop_lag_ms"),
    ("slot gap p50 ms", "slot_gap_p50_ms"),
    ("slot gap p99 ms", "slot_gap_p99_ms"),
]
# The HTTP API read while the burst runs (agentcron-serve only): a table of its own, of the
# contenders that have these figures.
BURST_API: Columns = [
    ("API requests", "api_requests"),
    ("API errors", "api_errors"),
    ("API p50 ms", "api_p50_ms"),
    ("API p99 ms", "api_p99_ms"),
    ("API max ms", "api_max_ms"),
]
# What a run costs, per run of the burst (every contender that reports it): the CPU of the
# process that schedules and runs (the adapter's own, or the served ``agentcron serve``'s),
# and PostgreSQL's own: its client backends' CPU and the WAL bytes, of the scratch database
# (``pg_waldump``) and of the whole server (``pg_current_wal_lsn``). See ``bench.pgcost``.
BURST_COST: Columns = [
    ("CPU µs/run", "cpu_us_per_run"),
    ("PG backend CPU µs/run", "pg_cpu_us_per_run"),
    ("WAL B/run (database)", "db_wal_bytes_per_run"),
    ("WAL B/run (server)", "wal_bytes_per_run"),
    ("PG backends", "pg_backends"),
]
REPLICAS: Columns = [
    ("all started s", "all_started_s"),
    ("fires/s", "fires_per_s"),
    ("lost", "lost_max"),
    ("doubled", "duplicated_max"),
    ("executed", "executed_max"),
    ("commits/fire", "commits_per_fire"),
    ("statements/fire", "statements_per_fire"),
    ("peak RSS MB", "peak_rss_mb"),
    ("max loop lag ms", "max_loop_lag_ms"),
]
BIGIDLE: Columns = [
    ("claims", "claims"),
    ("claim ms total", "claim_ms_total"),
    ("claim ms max", "claim_ms_max"),
    ("empty claim ms", "empty_claim_ms_median"),
    ("all started s", "all_started_s"),
    ("fires/s", "fires_per_s"),
    ("lost", "lost_max"),
    ("doubled", "duplicated_max"),
    ("peak RSS MB", "peak_rss_mb"),
]
IDLE: Columns = [
    ("schedules", "count"),
    ("window s", "window_s"),
    ("statements/min", "statements_per_min"),
    ("commits/min", "commits_per_min"),
    ("noticed within ms", "noticed_ms"),
    ("CPU s/min", "cpu_s_per_min"),
    ("peak RSS MB", "peak_rss_mb"),
]
STEADY: Columns = [
    ("schedules", "count"),
    ("window s", "seconds"),
    ("fires", "fires"),
    ("not started", "not_started"),
    ("delay p50 ms", "delay_p50_ms"),
    ("delay p99 ms", "delay_p99_ms"),
    ("delay max ms", "delay_max_ms"),
    ("CPU s/1000 fires", "cpu_s_per_1000_fires"),
    ("statements/fire", "statements_per_fire"),
    ("dead runs max", "dead_runs_max"),
    ("dead schedules max", "dead_schedules_max"),
    ("peak RSS MB", "peak_rss_mb"),
]
COLUMNS = {
    "burst": BURST,
    "replicas": REPLICAS,
    "bigidle": BIGIDLE,
    "idle": IDLE,
    "steady": STEADY,
}

# label: (numerator variant, denominator variant, figure), per workload.
Ratios = dict[str, tuple[str, str, str]]
BURST_RATIOS: Ratios = {
    "apscheduler3 / agentcron (all started)": ("apscheduler3", "agentcron", "all_started_s"),
    "apscheduler4 / agentcron (all started)": ("apscheduler4", "agentcron", "all_started_s"),
    "agentcron / ceiling (all started)": ("agentcron", "ceiling", "all_started_s"),
    "apscheduler3 / agentcron-c64 (all started)": (
        "apscheduler3",
        "agentcron-c64",
        "all_started_s",
    ),
    "agentcron-c64 / ceiling (all started)": ("agentcron-c64", "ceiling", "all_started_s"),
    "apscheduler3 / agentcron-c256 (all started)": (
        "apscheduler3",
        "agentcron-c256",
        "all_started_s",
    ),
    "agentcron-c256 / ceiling (all started)": ("agentcron-c256", "ceiling", "all_started_s"),
    "agentcron-c256 / agentcron-floor (all started)": (
        "agentcron-c256",
        "agentcron-floor",
        "all_started_s",
    ),
    "agentcron-floor / ceiling (all started)": ("agentcron-floor", "ceiling", "all_started_s"),
    "agentcron-c256-thread / agentcron-c256 (all started)": (
        "agentcron-c256-thread",
        "agentcron-c256",
        "all_started_s",
    ),
    "agentcron-serve / agentcron (all started)": (
        "agentcron-serve",
        "agentcron",
        "all_started_s",
    ),
    # What users run (issue 33): the served contenders against APScheduler 3.11's
    # BackgroundScheduler and the ceiling; the served sync one's cost against the ceiling's.
    "apscheduler3-background / agentcron-serve-sync (all started)": (
        "apscheduler3-background",
        "agentcron-serve-sync",
        "all_started_s",
    ),
    "apscheduler3-background / agentcron-serve-sync-c256 (all started)": (
        "apscheduler3-background",
        "agentcron-serve-sync-c256",
        "all_started_s",
    ),
    "apscheduler3-background / agentcron-serve-c256 (all started)": (
        "apscheduler3-background",
        "agentcron-serve-c256",
        "all_started_s",
    ),
    "agentcron-serve-sync-c256 / ceiling (all started)": (
        "agentcron-serve-sync-c256",
        "ceiling",
        "all_started_s",
    ),
    "agentcron-serve-c256 / ceiling (all started)": (
        "agentcron-serve-c256",
        "ceiling",
        "all_started_s",
    ),
    "agentcron-serve-sync-c256 / ceiling (WAL bytes/run, database)": (
        "agentcron-serve-sync-c256",
        "ceiling",
        "db_wal_bytes_per_run",
    ),
    "agentcron-serve-sync-c256 / ceiling (PG backend CPU/run)": (
        "agentcron-serve-sync-c256",
        "ceiling",
        "pg_cpu_us_per_run",
    ),
    "apscheduler3 / ceiling (all started)": ("apscheduler3", "ceiling", "all_started_s"),
    "apscheduler4 / ceiling (all started)": ("apscheduler4", "ceiling", "all_started_s"),
}
REPLICAS_RATIOS: Ratios = {
    "2 processes / 1 process (fires/s)": ("2 processes", "1 process", "fires_per_s"),
}


def bigidle_ratios(rows: int, count: int) -> Ratios:
    big, alone = f"{count:,} due + {rows:,} idle", f"{count:,} due alone"
    return {
        "with / without the idle table (claim ms total)": (big, alone, "claim_ms_total"),
        "with / without the idle table (all started)": (big, alone, "all_started_s"),
    }


def _number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def summarize(rounds: list[dict[str, dict[str, Any]]], ratios: Ratios) -> dict[str, Any]:
    """Per-variant medians over rounds, and the medians (min-max) of per-round ratios."""
    names = sorted({name for round_ in rounds for name in round_})
    medians: dict[str, dict[str, Any]] = {}
    for name in names:
        runs = [round_[name] for round_ in rounds if name in round_]
        keys = sorted({key for run in runs for key, value in run.items() if _number(value)})
        row: dict[str, Any] = {}
        for key in keys:
            values = [run[key] for run in runs if _number(run.get(key))]
            row[key] = round(statistics.median(values), 3) if values else None
        for key in ("lost", "duplicated", "executed"):
            values = [run[key] for run in runs if _number(run.get(key))]
            row[f"{key}_max"] = max(values) if values else None
        row["rounds"] = len(runs)
        medians[name] = row
    found: dict[str, dict[str, float]] = {}
    for label, (num, den, key) in ratios.items():
        values = [
            r[num][key] / r[den][key]
            for r in rounds
            if num in r and den in r and r[num].get(key) and r[den].get(key)
        ]
        if values:
            found[label] = {
                "median": round(statistics.median(values), 3),
                "min": round(min(values), 3),
                "max": round(max(values), 3),
            }
    return {"medians": medians, "ratios": found}


def _cell(value: Any) -> str:
    if value is None:
        return "-"
    return f"{value:g}" if _number(value) else str(value)


def table(section: dict[str, Any], columns: Columns) -> str:
    """A section's medians as a Markdown table, then its ratios."""
    lines = [
        "| | " + " | ".join(title for title, _ in columns) + " |",
        "| --- |" + " ---: |" * len(columns),
    ]
    for name, row in section["medians"].items():
        cells = [_cell(row.get(key)) for _, key in columns]
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    if section.get("ratios"):
        lines.append("")
    for label, value in section.get("ratios", {}).items():
        lines.append(
            f"- {label}: median {value['median']:.2f}x (min {value['min']:.2f}, "
            f"max {value['max']:.2f})"
        )
    return "\n".join(lines)


def tables(workload: str, section: dict[str, Any]) -> str:
    """Every table of a workload's section: its main one with the ratios, and for the burst
    the cost per run (process CPU, PostgreSQL's CPU and WAL) of the contenders that report
    it and the API table of those that read the API during it (none: no such table)."""
    text = table(section, COLUMNS[workload])
    if workload == "burst":
        costed = {
            name: row
            for name, row in section["medians"].items()
            if any(row.get(key) is not None for _, key in BURST_COST)
        }
        if costed:
            text += "\n\n" + table({"medians": costed}, BURST_COST)
        served = {
            name: row
            for name, row in section["medians"].items()
            if row.get("api_requests") is not None
        }
        if served:
            text += "\n\n" + table({"medians": served}, BURST_API)  # no ratios twice
    return text
