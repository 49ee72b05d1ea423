"""Smoke test of the benchmark adapters, so the harness cannot rot (no wall-clock assertions).

Each adapter populates a tiny burst (20 one-shot schedules due a few seconds ahead) in a
cloned, migrated PostgreSQL database and fires it in its own process, like ``make bench``
does; the test checks the JSON line says every run succeeded, none lost, none doubled. The
APScheduler adapter runs only if its virtualenv already exists (``make bench`` creates it;
the test suite never does).
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import PgServer, clone_pg

ROOT = Path(__file__).resolve().parent.parent
APS_PYTHON = ROOT / "bench" / ".venvs" / "apscheduler3" / "bin" / "python"
COUNT = 20

pytestmark = [pytest.mark.pg, pytest.mark.slow]


async def _adapter(python: str, module: str, command: str, dsn: str, t0: datetime) -> str:
    process = await asyncio.create_subprocess_exec(
        python,
        "-m",
        module,
        command,
        "--dsn",
        dsn,
        "--count",
        str(COUNT),
        "--at",
        t0.isoformat(),
        "--give-up-after",
        "20",
        cwd=ROOT,
        env=dict(os.environ, PYTHONPATH=str(ROOT)),
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await process.communicate()
    assert process.returncode == 0, err.decode()[-2000:]
    return out.decode()


async def _burst(python: str, module: str, dsn: str, t0: datetime) -> dict[str, Any]:
    await _adapter(python, module, "populate", dsn, t0)
    out = await _adapter(python, module, "fire", dsn, t0)
    figures: dict[str, Any] = json.loads(out.strip().splitlines()[-1])
    return figures


async def test_adapters_fire_every_run_once(pg_server: PgServer | None) -> None:
    adapters = [(sys.executable, "bench.adapters.agentcron"), (sys.executable, "bench.ceiling")]
    if APS_PYTHON.exists():
        adapters.append((str(APS_PYTHON), "bench.adapters.apscheduler3"))
    urls = [await clone_pg(pg_server) for _ in adapters]
    t0 = datetime.now(UTC) + timedelta(seconds=4)
    results = await asyncio.gather(
        *(
            _burst(python, module, url, t0)
            for (python, module), url in zip(adapters, urls, strict=True)
        )
    )
    for figures in results:
        assert figures["count"] == COUNT, figures
        assert figures["started"] == COUNT, figures
        assert figures["succeeded"] == COUNT, figures
        assert figures["lost"] == 0, figures
        assert figures["duplicated"] == 0, figures
