"""A replica dies or stops mid-run; another continues the same run (docs/design.md, promises 6,
7, 13).

Real ``agentcron serve`` processes on one PostgreSQL database (and, for Ctrl-C at a terminal,
one SQLite file restarted). The agent is a shell script that logs each attempt to a file and
behaves differently on its first attempt ($AGENTCRON_ATTEMPT), so the log shows which process
ran which attempt, and whether anything ran twice.
"""

from __future__ import annotations

import asyncio
import signal
import subprocess
import time
import uuid
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path

import asyncpg
import httpx
import pytest
from sqlalchemy.engine import make_url

from agentcron.core.storage.models import Run
from tests.conftest import PG_URL, bearer
from tests.e2e.conftest import (
    AGENTCRON,
    Fleet,
    RunProbe,
    Server,
    command_runner,
    engine_env,
    iso,
    json_events,
    kill_processes_with,
    kill_server,
    make_key,
    processes_with,
    stop_server,
    wait_for,
)

# $1: the attempt log. $2: how long the first attempt sleeps. $0 is a marker unique to the test,
# so the agent's shell can be found in /proc after its server is gone.
AGENT = """
echo "$AGENTCRON_INSTANCE_ID $AGENTCRON_RUN_ID $AGENTCRON_ATTEMPT start" >> "$1"
if [ "$AGENTCRON_ATTEMPT" = 1 ]; then sleep "$2"; fi
echo "$AGENTCRON_INSTANCE_ID $AGENTCRON_RUN_ID $AGENTCRON_ATTEMPT end" >> "$1"
"""


async def create_one_shot(
    server: Server, key: str, runner: dict[str, object], delay: float = 2
) -> str:
    """A one-shot schedule due ``delay`` seconds from now (one due time, so one run)."""
    at = datetime.now(UTC) + timedelta(seconds=delay)
    body = {"name": "crash", "prompt": "work", "trigger": {"at": iso(at)}, "runner": runner}
    async with httpx.AsyncClient(timeout=30, headers=bearer(key)) as http:
        response = await http.post(f"{server.url}/api/v1/schedules", json=body)
    assert response.status_code == 201, response.text
    schedule_id: str = response.json()["id"]
    return schedule_id


def attempt_lines(log: Path) -> list[tuple[str, str, str, str]]:
    """(instance, run id, attempt, start|end) for each line the agent wrote."""
    if not log.exists():
        return []
    lines = []
    for line in log.read_text().splitlines():
        instance, run_id, attempt, phase = line.split()
        lines.append((instance, run_id, attempt, phase))
    return lines


async def running_on(probe: RunProbe, schedule_id: str, owner: str, log: Path) -> Run | None:
    """The schedule's single run once it is running under ``owner`` and its agent has begun."""
    runs = await probe.runs(schedule_id)
    if len(runs) != 1:
        return None
    run = runs[0]
    started = any(line[1] == str(run.id) for line in attempt_lines(log))
    if run.status == "running" and run.lease_owner == owner and started:
        return run
    return None


async def finished(probe: RunProbe, run_id: uuid.UUID) -> Run | None:
    run = await probe.run(run_id)
    return run if run.status not in ("pending", "running") else None


@pytest.mark.pg
@pytest.mark.slow
async def test_sigkilled_replica_run_is_continued_by_another(
    pg_url: str, fleet: Fleet, tmp_path: Path, probe_factory: Callable[[str], RunProbe]
) -> None:
    marker = f"agentcron-crash-{uuid.uuid4().hex}"
    log = tmp_path / "attempts.log"
    probe = probe_factory(pg_url)
    env_a = engine_env(pg_url, tmp_path / "data-a", "crash-a", LEASE_SECONDS="2")
    env_b = engine_env(pg_url, tmp_path / "data-b", "crash-b", LEASE_SECONDS="2")
    try:
        key = await asyncio.to_thread(make_key, env_a)
        a = await asyncio.to_thread(fleet.start, env_a, "a")
        schedule_id = await create_one_shot(a, key, command_runner(AGENT, marker, str(log), "4"))
        run = await wait_for(
            lambda: running_on(probe, schedule_id, "crash-a", log), "the run to start on A"
        )
        assert run.attempt == 1 and run.task_id is not None

        assert kill_server(a) == -signal.SIGKILL
        orphans = processes_with(marker)
        print(f"\ncrash: agent processes still alive after SIGKILL of their server: {orphans}")

        b = await asyncio.to_thread(fleet.start, env_b, "b")
        done = await wait_for(lambda: finished(probe, run.id), "B to finish the run", within=40)
        assert done.status == "succeeded", (done.status, done.error)
        assert done.attempt == 2
        assert done.task_id == run.task_id
        assert done.started_at == run.started_at  # the first start is kept
        runs = await probe.runs(schedule_id)
        assert [r.id for r in runs] == [run.id]  # no second run row for that due time
        assert stop_server(b) in (0, -signal.SIGTERM)
        assert "leases_recovered" in b.log()

        lines = attempt_lines(log)
        assert ("crash-a", str(run.id), "1", "start") in lines
        assert ("crash-b", str(run.id), "2", "start") in lines
        assert ("crash-b", str(run.id), "2", "end") in lines
        assert not [line for line in lines if line[2] not in ("1", "2")]
        # The orphan (if any) finishes its first attempt on its own: report what it did.
        if orphans:
            await asyncio.sleep(4.5)
        print(
            f"crash: orphan finished attempt 1 after the takeover: "
            f"{('crash-a', str(run.id), '1', 'end') in attempt_lines(log)}"
        )
    finally:
        fleet.close()  # no server may start the agent again
        kill_processes_with(marker)


@pytest.mark.pg
@pytest.mark.slow
async def test_sigterm_releases_a_long_run_for_another_replica(
    pg_url: str, fleet: Fleet, tmp_path: Path, probe_factory: Callable[[str], RunProbe]
) -> None:
    marker = f"agentcron-drain-{uuid.uuid4().hex}"
    log = tmp_path / "attempts.log"
    probe = probe_factory(pg_url)
    env_a = engine_env(
        pg_url, tmp_path / "data-a", "drain-a", LEASE_SECONDS="3", DRAIN_TIMEOUT_SECONDS="1"
    )
    env_b = engine_env(pg_url, tmp_path / "data-b", "drain-b", LEASE_SECONDS="3")
    try:
        key = await asyncio.to_thread(make_key, env_a)
        a = await asyncio.to_thread(fleet.start, env_a, "a")
        schedule_id = await create_one_shot(a, key, command_runner(AGENT, marker, str(log), "30"))
        run = await wait_for(
            lambda: running_on(probe, schedule_id, "drain-a", log), "the run to start on A"
        )

        assert run.started_at is not None and run.due_at is not None
        delay = (run.started_at - run.due_at).total_seconds() * 1000
        print(f"\ndrain: the one-shot started {delay:.1f} ms after its due time (idle PG)")
        assert delay >= 0
        began = time.monotonic()
        code = await asyncio.to_thread(stop_server, a, 20)
        took = time.monotonic() - began
        print(f"drain: A exited {took:.1f} s after SIGTERM (drain timeout 1 s)")
        assert code in (0, -signal.SIGTERM)
        assert "drain_timeout" in a.log() and "run_released" in a.log()
        assert processes_with(marker) == []  # the agent was stopped, not orphaned

        released = await probe.run(run.id)
        assert released.status == "pending"
        assert released.lease_owner is None and released.lease_expires_at is None
        assert released.attempt == 1 and released.finished_at is None

        await asyncio.to_thread(fleet.start, env_b, "b")
        done = await wait_for(lambda: finished(probe, run.id), "B to finish the run", within=40)
        assert done.status == "succeeded", (done.status, done.error)
        assert done.attempt == 2 and done.task_id == run.task_id
        assert [r.id for r in await probe.runs(schedule_id)] == [run.id]
        lines = attempt_lines(log)
        assert ("drain-a", str(run.id), "1", "end") not in lines
        assert ("drain-b", str(run.id), "2", "end") in lines
    finally:
        fleet.close()  # no server may start the agent again
        kill_processes_with(marker)


@pytest.mark.pg
@pytest.mark.slow
async def test_sigterm_drains_a_run_to_completion_while_another_replica_runs(
    pg_url: str, fleet: Fleet, tmp_path: Path, probe_factory: Callable[[str], RunProbe]
) -> None:
    """The drain outlasts the lease: the draining replica must keep its lease renewed, or the
    other replica takes the run over while it is still executing (double execution)."""
    marker = f"agentcron-drain-{uuid.uuid4().hex}"
    log = tmp_path / "attempts.log"
    probe = probe_factory(pg_url)
    env_a = engine_env(
        pg_url, tmp_path / "data-a", "drain-a", LEASE_SECONDS="2", DRAIN_TIMEOUT_SECONDS="15"
    )
    env_b = engine_env(pg_url, tmp_path / "data-b", "drain-b", LEASE_SECONDS="2")
    try:
        key = await asyncio.to_thread(make_key, env_a)
        a = await asyncio.to_thread(fleet.start, env_a, "a")
        schedule_id = await create_one_shot(a, key, command_runner(AGENT, marker, str(log), "6"))
        run = await wait_for(
            lambda: running_on(probe, schedule_id, "drain-a", log), "the run to start on A"
        )
        b = await asyncio.to_thread(fleet.start, env_b, "b")

        assert await asyncio.to_thread(stop_server, a, 30) in (0, -signal.SIGTERM)
        done = await wait_for(lambda: finished(probe, run.id), "the run to finish", within=30)
        assert stop_server(b) in (0, -signal.SIGTERM)
        lines = attempt_lines(log)
        assert [line for line in lines if line[0] == "drain-b"] == []
        assert done.status == "succeeded" and done.attempt == 1, (done.status, done.attempt)
        assert ("drain-a", str(run.id), "1", "end") in lines
    finally:
        fleet.close()  # no server may start the agent again
        kill_processes_with(marker)


@pytest.mark.pg
@pytest.mark.slow
async def test_run_interrupted_by_a_database_outage_is_taken_over(
    pg_url: str, fleet: Fleet, tmp_path: Path, probe_factory: Callable[[str], RunProbe]
) -> None:
    """The outcome of an attempt cannot be recorded (the database is gone when the agent ends).
    Once the database is back, the run's lease must lapse so it is continued (contract 7), even
    while the same process keeps renewing the leases of its other runs. The long run's agent,
    still going when its lease could no longer be confirmed, is frozen (SIGSTOP) rather than
    left executing where another replica could take the run over, and thawed afterwards: it
    is still this process's run, with no work lost."""
    marker = f"agentcron-outage-{uuid.uuid4().hex}"
    log = tmp_path / "attempts.log"
    probe = probe_factory(pg_url)
    # A lease long enough that the short agent (2 s) ends before its lease would need a renewal
    # the outage prevents; the 40-s one does not.
    # Leases only: this holds the lease fence. With liveness the outage also ends the engine's
    # liveness session, which freezes every attempt at once, the short one too
    # (tests/integration/test_liveness.py::test_an_engine_that_loses_its_session_freezes_...).
    env = engine_env(pg_url, tmp_path / "data", "outage-a", LEASE_SECONDS="6", LIVENESS="false")
    # Another database's session, which the outage does not touch.
    admin = await asyncpg.connect(
        make_url(PG_URL).set(drivername="postgresql").render_as_string(False)
    )
    database = make_url(pg_url).database
    try:
        key = await asyncio.to_thread(make_key, env)
        a = await asyncio.to_thread(fleet.start, env, "a")
        # A long run keeps the process holding (and renewing) a lease throughout.
        long_id = await create_one_shot(a, key, command_runner(AGENT, marker, str(log), "40"))
        long_run = await wait_for(
            lambda: running_on(probe, long_id, "outage-a", log), "the long run to start"
        )
        short_id = await create_one_shot(a, key, command_runner(AGENT, marker, str(log), "2"))
        run = await wait_for(
            lambda: running_on(probe, short_id, "outage-a", log), "the short run to start"
        )

        await admin.execute(f'ALTER DATABASE "{database}" ALLOW_CONNECTIONS false')
        await admin.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = $1",
            database,
        )
        ended = ("outage-a", str(run.id), "1", "end")
        await wait_for(
            lambda: asyncio.sleep(0, ended in attempt_lines(log)), "attempt 1 to end", within=20
        )
        await asyncio.sleep(7)  # the attempt's outcome cannot be saved; its lease runs out
        await admin.execute(f'ALTER DATABASE "{database}" ALLOW_CONNECTIONS true')
        assert json_events(a.log(), "run_interrupted")

        done = await wait_for(lambda: finished(probe, run.id), "the run to finish", within=20)
        assert done.status == "succeeded" and done.attempt == 2, (done.status, done.attempt)
        still = await probe.run(long_run.id)
        assert still.status == "running" and still.lease_owner == "outage-a"
        suspended = json_events(a.log(), "run_suspended")
        assert [e["run_id"] for e in suspended] == [str(long_run.id)], suspended
        resumed = await wait_for(
            lambda: asyncio.sleep(0, json_events(a.log(), "run_resumed")), "the long run thawed"
        )
        assert [e["run_id"] for e in resumed] == [str(long_run.id)], resumed
        assert json_events(a.log(), "run_lease_lost") == []
        assert [r.id for r in await probe.runs(short_id)] == [run.id]
    finally:
        await admin.execute(f'ALTER DATABASE "{database}" ALLOW_CONNECTIONS true')
        await admin.close()
        fleet.close()  # no server may start the agent again
        kill_processes_with(marker)


@pytest.mark.slow
async def test_ctrl_c_says_what_it_waits_for_and_a_second_one_stops_at_once(
    fleet: Fleet, tmp_path: Path, probe_factory: Callable[[str], RunProbe]
) -> None:
    """Ctrl-C at a terminal: the first SIGINT says at once what the stop waits for and for how
    long; the second ends the process at once (status 130), releasing nothing, and the next
    start takes the run over, as after a crash (README, "How runs happen")."""
    marker = f"agentcron-ctrl-c-{uuid.uuid4().hex}"
    log = tmp_path / "attempts.log"
    url = f"sqlite+aiosqlite:///{tmp_path / 'agentcron.db'}"
    probe = probe_factory(url)
    env = engine_env(url, tmp_path / "data", "ctrl-c-a", DRAIN_TIMEOUT_SECONDS="45")
    try:
        await asyncio.to_thread(
            subprocess.run, [AGENTCRON, "migrate"], env=env, check=True, capture_output=True
        )
        key = await asyncio.to_thread(make_key, env)
        a = await asyncio.to_thread(fleet.start, env, "a")
        schedule_id = await create_one_shot(a, key, command_runner(AGENT, marker, str(log), "60"))
        run = await wait_for(
            lambda: running_on(probe, schedule_id, "ctrl-c-a", log), "the run to start"
        )

        a.process.send_signal(signal.SIGINT)
        said = "waiting up to 45 s for 1 run in progress to finish"
        await wait_for(lambda: asyncio.sleep(0, said in a.log()), "the first Ctrl-C to say so", 5)
        assert "Ctrl-C again to stop at once" in a.log()
        await wait_for(lambda: asyncio.sleep(0, json_events(a.log(), "engine_stopping")), "drain")

        began = time.monotonic()
        a.process.send_signal(signal.SIGINT)
        code = await asyncio.to_thread(a.process.wait, 10)
        took = time.monotonic() - began
        print(f"\nctrl-c: exited {took:.2f} s after the second SIGINT, status {code}")
        assert code == 130 and took < 5
        assert "stopped at once" in a.log()
        assert "run_released" not in a.log() and "Traceback" not in a.log()
        await wait_for(lambda: asyncio.sleep(0, not processes_with(marker)), "the agent to die", 5)
        kept = await probe.run(run.id)  # nothing was given back: the lease is the dead one's
        assert kept.status == "running" and kept.lease_owner == "ctrl-c-a"

        env_b = dict(env, AGENTCRON_INSTANCE_ID="ctrl-c-b")
        b = await asyncio.to_thread(fleet.start, env_b, "b")
        done = await wait_for(lambda: finished(probe, run.id), "the next start to finish it", 40)
        assert done.status == "succeeded" and done.attempt == 2, (done.status, done.error)
        assert stop_server(b) in (0, -signal.SIGTERM)
        lines = attempt_lines(log)
        assert ("ctrl-c-a", str(run.id), "1", "end") not in lines
        assert ("ctrl-c-b", str(run.id), "2", "end") in lines
    finally:
        fleet.close()
        kill_processes_with(marker)
