"""Smoke test of the benchmark harness, so it cannot rot (no wall-clock assertions).

Every adapter fires a tiny burst on each database it supports (APScheduler ones only if
``make bench`` already made their virtualenvs; the tests never create them), and every
workload runs once at toy size (idle on both databases, the others on PostgreSQL), all at
the same time through the harness's own workload functions, on scratch databases of the
PostgreSQL server under test and SQLite temp files. T0 is so close that populating may end
after it: the runs then start late, which the checks do not mind.
The checks are about correctness and shape: every run succeeded once, none lost or doubled,
the figures each table needs are there; then the summaries and tables are built from them.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from sqlalchemy.engine import make_url

from bench import report, workloads
from bench.harness import parse, single
from bench.infra import CONTENDERS, admin_dsn, sql, venv_ready
from tests.conftest import PG_URL, PgServer, clone_pg

COUNT = 20
LEAD = 1.5

pytestmark = [pytest.mark.pg, pytest.mark.slow]


def _bursts() -> list[tuple[str, str]]:
    """(contender, database) pairs whose adapter can run here."""
    return [
        (name, database)
        for name, contender in CONTENDERS.items()
        if name != "apscheduler3-defaults"
        and (contender.venv is None or venv_ready(contender.venv))
        for database in contender.databases
    ]


async def _bigidle(admin: str) -> dict[str, dict[str, Any]]:
    template, _ = await workloads.bigidle_template(admin, 200)
    try:
        return await workloads.bigidle(admin, template, 200, COUNT, lead=LEAD)
    finally:
        await sql(admin, f'DROP DATABASE IF EXISTS "{template}" WITH (FORCE)')


def _check_burst(figures: dict[str, Any]) -> None:
    assert figures["count"] == COUNT, figures
    assert figures["started"] == COUNT, figures
    assert figures["succeeded"] == COUNT, figures
    assert figures["lost"] == 0, figures
    assert figures["duplicated"] == 0, figures
    postgresql = figures["database"] == "postgresql"
    assert (figures["commits_per_fire"] is not None) == postgresql, figures
    if figures["contender"] == "agentcron":
        assert figures["statements_per_fire"] > 0, figures
        assert figures["executed"] == COUNT, figures


IDLE_WINDOW = 3.0  # seconds of the idle workloads: three ticks of 1 s


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
            workloads.burst(CONTENDERS[name], admin, database, COUNT, lead=LEAD)
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

    for figures in bursts:
        _check_burst(figures)
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
        text = report.table(section, report.COLUMNS[workload])
        assert text.count("\n") >= 2, text
    assert "agentcron / ceiling (all started)" in sections["burst"]["ratios"]
    assert sections["replicas"]["medians"]["2 processes"]["executed_max"] == COUNT


def test_quick_is_postgresql_only_and_short() -> None:
    args = parse(["--quick"])
    assert args.workloads == "burst,idle,replicas"
    assert args.db == "postgresql"
    full = parse([])
    assert full.workloads == "burst,idle,steady,bigidle,replicas"
    assert full.db == "postgresql,sqlite"
