"""Smoke test of the benchmark harness, so it cannot rot (no wall-clock assertions).

Every adapter fires a tiny burst on each database it supports (APScheduler ones only if
``make bench`` already made their virtualenvs; the tests never create them; the served
agentcron a burst of 2,000, so its API client has a burst to read during), and every
workload runs once at toy size (idle on both databases, the others on PostgreSQL), all at
the same time through the harness's own workload functions, on scratch databases of the
PostgreSQL server under test and SQLite temp files. T0 is so close that populating may end
after it: the runs then start late, which the checks do not mind.
The checks are about correctness and shape: every run succeeded once, none lost or doubled,
the figures each table needs are there; then the summaries and tables are built from them.
"""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy.engine import make_url

from bench import report, workloads
from bench.harness import single
from bench.infra import CONTENDERS, ROOT, admin_dsn, sql, venv_ready
from tests.conftest import PG_URL, PgServer, clone_pg

COUNT = 20
# agentcron-serve: its client must send three requests during the burst (one every 50 ms from
# T0, so 100 ms). Since the no-op runs as a coroutine, the service runs about 3,000 a second on
# this machine, so 200 runs could end in 70 ms; 2,000 take about 0.65 s, time for a dozen.
SERVE = "agentcron-serve"
SERVE_COUNT = 2000
SERVE_MIN_REQUESTS = 3
FLOOR = "agentcron-floor"
LEAD = 1.5

# Every adapter and workload in one test: about 30 s idle, over 360 s on a loaded
# machine; the bound is a hang guard, not a speed check.
pytestmark = [pytest.mark.pg, pytest.mark.slow, pytest.mark.timeout(900)]


# On PostgreSQL only here: their adapters' SQLite paths are those agentcron and agentcron-c64
# already take, and every process this test starts shares two cores with the others.
POSTGRESQL_ONLY = ("agentcron-c256", "agentcron-c256-thread", SERVE)


def _bursts() -> list[tuple[str, str]]:
    """(contender, database) pairs whose adapter can run here."""
    return [
        (name, database)
        for name, contender in CONTENDERS.items()
        if name != "apscheduler3-defaults"
        and (contender.venv is None or venv_ready(contender.venv))
        for database in contender.databases
        if database == "postgresql" or name not in POSTGRESQL_ONLY
    ]


async def _bigidle(admin: str) -> dict[str, dict[str, Any]]:
    template, _ = await workloads.bigidle_template(admin, 200)
    try:
        return await workloads.bigidle(admin, template, 200, COUNT, lead=LEAD)
    finally:
        await sql(admin, f'DROP DATABASE IF EXISTS "{template}" WITH (FORCE)')


def _count(name: str) -> int:
    return SERVE_COUNT if name == SERVE else COUNT


def _check_burst(figures: dict[str, Any], count: int = COUNT) -> None:
    assert figures["count"] == count, figures
    assert figures["started"] == count, figures
    assert figures["succeeded"] == count, figures
    assert figures["lost"] == 0, figures
    assert figures["duplicated"] == 0, figures
    postgresql = figures["database"] == "postgresql"
    assert (figures["commits_per_fire"] is not None) == postgresql, figures
    if figures["contender"].startswith("agentcron"):
        assert figures["executed"] == count, figures
        assert figures["max_loop_lag_ms"] is not None, figures
        _check_slot_gaps(figures)
        if figures["contender"] == SERVE:
            _check_api(figures)
        elif figures["contender"] != FLOOR:  # the floor's store has no database
            assert figures["statements_per_fire"] > 0, figures


def _check_slot_gaps(figures: dict[str, Any]) -> None:
    """Every run after the first C filled a slot another had just freed (the burst keeps
    every slot busy), so each gives one gap, and none is negative: a run starting before any
    slot was free would mean more runs at once than slots."""
    slots = figures["concurrency"]
    if figures.get("processes", 1) > 1:  # the engines shared the burst: gaps are per process
        assert figures["slot_gaps"] is None, figures
        return
    if figures["count"] <= slots:  # never saturated (c64 and c256 at toy size): no gap
        assert figures["slot_gaps"] == 0 and figures["slot_gap_p50_ms"] is None, figures
        return
    assert figures["slot_gaps"] == figures["count"] - slots, figures
    assert 0 <= figures["slot_gap_p50_ms"] <= figures["slot_gap_p99_ms"], figures


def _check_api(figures: dict[str, Any]) -> None:
    assert figures["api_requests"] >= SERVE_MIN_REQUESTS, figures
    assert figures["api_errors"] == 0, figures  # every list answered 200
    assert 0 < figures["api_p50_ms"] <= figures["api_p99_ms"] <= figures["api_max_ms"], figures
    assert figures["peak_rss_mb"] is not None, figures  # the service's, written from inside


IDLE_WINDOW = 3.0  # seconds of the idle workloads: three ticks of 1 s


# Alone on the machine: beside four other test workers on a loaded two-core machine its
# contenders were ready up to a minute after their T0, past the burst's misfire grace.
@pytest.mark.solo
async def test_every_adapter_and_workload(
    pg_server: PgServer | None, monkeypatch: pytest.MonkeyPatch
) -> None:
    await clone_pg(pg_server)  # skips (or fails under AGENTCRON_REQUIRE_PG) without PostgreSQL
    # A short tick, so the SQLite engine notices the outside change soon (no NOTIFY there).
    monkeypatch.setenv("AGENTCRON_SCHEDULER_TICK_SECONDS", "1")
    admin = admin_dsn(make_url(PG_URL).render_as_string(hide_password=False))
    pairs = _bursts()
    aps3_idle = (
        [workloads.idle(admin, "postgresql", COUNT, IDLE_WINDOW, CONTENDERS["apscheduler3"])]
        if venv_ready("apscheduler3")
        else []
    )
    results = await asyncio.gather(
        *(
            workloads.burst(CONTENDERS[name], admin, database, _count(name), lead=LEAD)
            for name, database in pairs
        ),
        workloads.replicas(admin, COUNT, lead=LEAD),
        _bigidle(admin),
        *(
            workloads.idle(admin, database, COUNT, IDLE_WINDOW)
            for database in ("postgresql", "sqlite")
        ),
        workloads.steady(admin, "postgresql", 10, 4.0, every=2, lead=LEAD),
        *aps3_idle,
        return_exceptions=True,  # let every workload end (and drop its databases) first
    )
    failures = [result for result in results if isinstance(result, BaseException)]
    if failures:
        raise failures[0]
    bursts = results[: len(pairs)]
    replicas, bigidle, idle_pg, idle_sqlite, steady_pg = results[len(pairs) :][:5]
    for figures in results[len(pairs) + 5 :]:  # APScheduler 3 idle: statements, commits
        # Counted (the probe saw the window), whatever the peer does when idle.
        assert isinstance(figures["statements"], int), figures
        assert figures["commits_per_min"] is not None, figures

    for (name, _), figures in zip(pairs, bursts, strict=True):
        _check_burst(figures, _count(name))
    for figures in [*replicas.values(), *bigidle.values()]:
        _check_burst(figures)
    assert sorted(row["processes"] for row in replicas.values()) == [1, 2]
    assert all(row["claims"] >= 1 for row in bigidle.values()), bigidle
    for figures in (idle_pg, idle_sqlite):
        assert figures["noticed_ms"] is not None, figures  # the outside schedule ran
        # An idle replica looks once per tick (1 s here), and on PostgreSQL also reads the
        # database's clock: at least one look in the window, at most two statements a tick
        # (plus those the window's edges cut).
        assert 1 <= figures["statements"] <= 2 * (IDLE_WINDOW + 1), figures
    assert idle_pg["commits_per_min"] is not None and idle_sqlite["commits_per_min"] is None
    assert steady_pg["measured"] > 0, steady_pg
    assert steady_pg["delay_p50_ms"] is not None, steady_pg
    assert steady_pg["dead_tuples"], steady_pg

    # The summaries and tables of every workload build from these figures.
    by_database: dict[str, dict[str, dict[str, Any]]] = {}
    for (name, database), figures in zip(pairs, bursts, strict=True):
        by_database.setdefault(database, {})[name] = figures
    sections = {
        "burst": report.summarize([by_database["postgresql"]], report.BURST_RATIOS),
        "replicas": report.summarize([replicas], report.REPLICAS_RATIOS),
        "bigidle": report.summarize([bigidle], report.bigidle_ratios(200, COUNT)),
        "idle": single(idle_pg),
        "steady": single(steady_pg),
    }
    for workload, section in sections.items():
        text = report.tables(workload, section)
        assert text.count("\n") >= 2, text
    assert "agentcron / ceiling (all started)" in sections["burst"]["ratios"]
    burst = report.tables("burst", sections["burst"])
    assert "slot gap p99 ms" in burst and "| agentcron-c256 |" in burst, burst
    assert "API p99 ms" in burst and f"| {SERVE} |" in burst.split("API p99 ms")[1], burst
    assert sections["replicas"]["medians"]["2 processes"]["executed_max"] == COUNT


PARTS_COUNT = 300  # one claim: 256 runs admitted by it, 44 left for the admissions


async def test_parts_measures_claim_admit_and_record_of_every_run(
    pg_server: PgServer | None, tmp_path: Path
) -> None:
    await clone_pg(pg_server)
    admin = admin_dsn(make_url(PG_URL).render_as_string(hide_password=False))
    out = tmp_path / "parts.json"
    argv = ["--count", str(PARTS_COUNT), "--reps", "1", "--pg", admin, "--out", str(out)]
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "bench.parts",
        *argv,
        cwd=ROOT,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    stdout, stderr = await process.communicate()
    # It exits non-zero unless every run ended succeeded once.
    assert process.returncode == 0, stderr.decode()
    assert "| claim |" in stdout.decode() and "| record |" in stdout.decode()
    summary = json.loads(out.read_text())["summary"]
    assert summary["claim"]["runs"] == summary["record"]["runs"] == PARTS_COUNT, summary
    assert summary["admit"]["runs"] == PARTS_COUNT - 256, summary
    for part in summary.values():
        assert 0 < part["cpu_us_min"] <= part["cpu_us_median"], summary
        assert 0 < part["wall_us_min"] <= part["wall_us_median"], summary
