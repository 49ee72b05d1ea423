"""Three real ``agentcron serve`` replicas on one PostgreSQL database (docs/design.md, promises
3, 4, 6).

Each replica is its own OS process with its own loop, instance id and data directory. The
schedules are created over HTTP, spread over the replicas; everything else is read straight
from the database and from the file the agents append to, so the test checks what actually
happened, not what the API says happened.
"""

from __future__ import annotations

import asyncio
import math
from collections import Counter
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path

import httpx
import pytest

from agentcron.core.storage.models import Run
from tests.conftest import bearer
from tests.e2e.conftest import (
    Fleet,
    RunProbe,
    command_runner,
    engine_env,
    iso,
    make_key,
    stop_server,
    wait_for,
)

SCHEDULES = 100
REPLICAS = 3
OBSERVE_SECONDS = 15
MARGIN = timedelta(seconds=2)
# Each agent appends "<instance id> <run id>" to the log named by $1 (the server's environment,
# AGENTCRON_INSTANCE_ID included, reaches the command).
APPEND_RUN = 'echo "$AGENTCRON_INSTANCE_ID $AGENTCRON_RUN_ID $AGENTCRON_ATTEMPT" >> "$1"'


def percentile(values: list[float], fraction: float) -> float:
    """Nearest-rank percentile of a non-empty list."""
    ordered = sorted(values)
    return ordered[max(0, math.ceil(fraction * len(ordered)) - 1)]


def grid(start: datetime, every: timedelta, low: datetime, high: datetime) -> list[datetime]:
    """The due times ``start + k * every`` (k >= 0) within [low, high]."""
    k = max(0, math.ceil((low - start) / every))
    times = []
    while (due := start + k * every) <= high:
        times.append(due)
        k += 1
    return times


async def create_schedules(urls: list[str], key: str, start_at: datetime, log: Path) -> list[str]:
    """Create the schedules over HTTP, round-robin over the replicas, ten at a time."""
    ids: list[str] = []
    async with httpx.AsyncClient(timeout=30, headers=bearer(key)) as http:

        async def create(index: int) -> str:
            body = {
                "name": f"replica load {index}",
                "prompt": "append the run id",
                "trigger": {"every_seconds": 1, "start_at": iso(start_at)},
                "misfire_grace_seconds": 30,
                # A run slowed by a loaded machine must not turn the next due time into an
                # overlap skip: this test is about each due time running once, across the
                # replicas, not about the overlap policy (tested on its own).
                "overlap": "allow",
                "max_attempts": 1,
                "runner": command_runner(APPEND_RUN, "agent", str(log)),
            }
            response = await http.post(f"{urls[index % len(urls)]}/api/v1/schedules", json=body)
            assert response.status_code == 201, response.text
            schedule_id: str = response.json()["id"]
            return schedule_id

        for first in range(0, SCHEDULES, 10):
            batch = range(first, min(first + 10, SCHEDULES))
            ids.extend(await asyncio.gather(*(create(index) for index in batch)))
    return ids


# Alone on the machine: three servers running 100 agent processes a second. Beside four other
# test workers on a loaded two-core machine they fell behind by more than the 30 s grace.
@pytest.mark.solo
@pytest.mark.pg
@pytest.mark.slow
@pytest.mark.timeout(480)
async def test_replicas_run_every_due_time_exactly_once(
    pg_url: str, fleet: Fleet, tmp_path: Path, probe_factory: Callable[[str], RunProbe]
) -> None:
    exec_log = tmp_path / "exec.log"
    envs = [
        engine_env(
            pg_url,
            tmp_path / f"data-{index}",
            f"replica-{index}",
            LEASE_SECONDS="3",
            SCHEDULER_TICK_SECONDS="1",
            SCHEDULER_CONCURRENCY="8",
        )
        for index in range(REPLICAS)
    ]
    key = await asyncio.to_thread(make_key, envs[0])
    servers = await asyncio.gather(
        *(asyncio.to_thread(fleet.start, env, f"replica-{i}") for i, env in enumerate(envs))
    )
    probe = probe_factory(pg_url)

    # One common grid a few seconds ahead, so every schedule exists before its first due time.
    now = datetime.now(UTC)
    start_at = now.replace(microsecond=0) + timedelta(seconds=4)
    ids = await create_schedules([server.url for server in servers], key, start_at, exec_log)
    created = datetime.now(UTC)
    window_start = max(start_at, created) + MARGIN
    await asyncio.sleep((window_start - datetime.now(UTC)).total_seconds() + OBSERVE_SECONDS)
    window_end = datetime.now(UTC) - MARGIN
    expected_times = grid(start_at, timedelta(seconds=1), window_start, window_end)
    # The window is OBSERVE_SECONDS - MARGIN long (plus the sleep's overshoot): at least that
    # many one-second due times fall in it.
    assert len(expected_times) >= OBSERVE_SECONDS - MARGIN.seconds

    def in_window(run: Run) -> bool:
        return run.due_at is not None and window_start <= run.due_at <= window_end

    # The replicas keep running meanwhile; wait until every due time of the window has run.
    async def window_done() -> tuple[int, int] | None:
        runs = [run for run in await probe.runs() if in_window(run)]
        finished = sum(1 for run in runs if run.status not in ("pending", "running"))
        want = len(expected_times) * SCHEDULES
        return (len(runs), finished) if len(runs) == finished == want else None

    try:
        await wait_for(window_done, "every run of the window to finish", within=240, interval=0.5)
    finally:
        codes = await asyncio.gather(*(asyncio.to_thread(stop_server, s) for s in servers))
    assert all(code in (0, -15) for code in codes), codes
    for server in servers:
        assert "Traceback" not in server.log(), server.log()[-4000:]

    runs = await probe.runs()
    # Shutdown left nothing half-done: runs not finished were given back (docs/design.md,
    # promise 13).
    leftover = [
        (run.status, run.lease_owner) for run in runs if run.status in ("pending", "running")
    ]
    assert set(leftover) <= {("pending", None)}, Counter(leftover)
    scheduled = [run for run in runs if run.trigger == "schedule"]
    assert {str(run.schedule_id) for run in scheduled} <= set(ids)
    keys = Counter((run.schedule_id, run.due_at) for run in scheduled)
    assert [key for key, count in keys.items() if count > 1] == []

    by_schedule: dict[str, list[Run]] = {schedule_id: [] for schedule_id in ids}
    for run in scheduled:
        if in_window(run):
            by_schedule[str(run.schedule_id)].append(run)
    for schedule_id, window_runs in by_schedule.items():
        assert sorted(run.due_at for run in window_runs if run.due_at) == expected_times, (
            f"schedule {schedule_id}: due times in the window differ from its grid"
        )
    window_runs = [run for runs_ in by_schedule.values() for run in runs_]
    statuses = Counter(run.status for run in window_runs)
    assert statuses == {"succeeded": len(expected_times) * SCHEDULES}, statuses

    # No double execution: no attempt of a run reached the agent twice (also outside the window,
    # e.g. runs released at shutdown), and every succeeded run did reach it. A run reaches it
    # again only as a new attempt after its lease was lost (docs/design.md, promise 7: a takeover).
    lines = [line.split() for line in exec_log.read_text().splitlines()]
    attempts = Counter((run_id, attempt) for _instance, run_id, attempt in lines)
    assert [key for key, count in attempts.items() if count > 1] == []
    executed = Counter(run_id for _instance, run_id, _attempt in lines)
    attempt_of = {str(run.id): run.attempt for run in scheduled}
    assert [r for r, count in executed.items() if count > attempt_of.get(r, 0)] == []
    succeeded = {str(run.id) for run in scheduled if run.status == "succeeded"}
    assert succeeded <= set(executed)
    assert set(executed) <= {str(run.id) for run in scheduled}

    # Never early: a run starts at or after its due time. The delay is reported, not asserted.
    delays = [
        (run.started_at - run.due_at).total_seconds()
        for run in window_runs
        if run.started_at is not None and run.due_at is not None
    ]
    assert len(delays) == len(window_runs)
    assert min(delays) >= 0
    takeovers = sum(1 for run in scheduled if run.attempt > 1)
    per_replica = Counter(instance for instance, _run_id, _attempt in lines)
    print(
        f"\nreplicas: {len(window_runs)} runs in a {len(expected_times)} s window "
        f"({len(scheduled)} scheduled runs in all, {takeovers} with attempt > 1); "
        f"start delay p50 {percentile(delays, 0.5) * 1000:.1f} ms, "
        f"p99 {percentile(delays, 0.99) * 1000:.1f} ms, max {max(delays) * 1000:.1f} ms; "
        f"runs per replica {dict(sorted(per_replica.items()))}"
    )
