"""A replica stops mid-run; the same run is drained or continued (docs/design.md, promises 6,
7, 13). SIGKILL take-over is proved in ``test_takeover.py``, an outage in
``tests/faults/test_outage.py``.

Real ``agentcron serve`` processes on one PostgreSQL database (and, for Ctrl-C at a terminal,
one SQLite file restarted). The agent is a shell script that logs each attempt to a file and
behaves differently on its first attempt ($AGENTCRON_ATTEMPT), so the log shows which process
ran which attempt, and whether anything ran twice.
"""

from __future__ import annotations

import asyncio
import signal
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from agentcron.core.storage.models import Run
from tests.e2e.conftest import (
    Fleet,
    RunProbe,
    Server,
    command_runner,
    create_schedule,
    engine_env,
    finished,
    json_events,
    kill_processes_with,
    log_lines,
    make_key,
    migrate,
    one_shot,
    processes_with,
    sqlite_env,
    wait_for,
)

# $1: the attempt log. $2: how long the first attempt sleeps. $0 is a marker unique to the test,
# so the agent's shell can be found in /proc after its server is gone.
AGENT = """
echo "$AGENTCRON_INSTANCE_ID $AGENTCRON_RUN_ID $AGENTCRON_ATTEMPT start" >> "$1"
if [ "$AGENTCRON_ATTEMPT" = 1 ]; then sleep "$2"; fi
echo "$AGENTCRON_INSTANCE_ID $AGENTCRON_RUN_ID $AGENTCRON_ATTEMPT end" >> "$1"
"""


async def running_on(probe: RunProbe, schedule_id: str, owner: str, log: Path) -> Run | None:
    """The schedule's single run once it is running under ``owner`` and its agent has begun."""
    runs = await probe.runs(schedule_id)
    started = runs and any(line[1] == str(runs[0].id) for line in log_lines(log))
    running = len(runs) == 1 and runs[0].status == "running" and runs[0].lease_owner == owner
    return runs[0] if running and started else None


async def start_one_shot(
    probe: RunProbe, server: Server, key: str, owner: str, agent: dict[str, Any], log: Path
) -> Run:
    """Create a one-shot schedule of ``agent``; its run once it is running under ``owner``."""
    schedule_id = str((await create_schedule(server, key, one_shot(agent)))["id"])
    return await wait_for(
        lambda: running_on(probe, schedule_id, owner, log), f"the run to start on {owner}"
    )


@pytest.mark.pg
@pytest.mark.slow
async def test_sigterm_drains_a_short_run_and_releases_a_long_one_to_another_replica(
    pg_url: str, fleet: Fleet, tmp_path: Path, probe_factory: Callable[[str], RunProbe]
) -> None:
    """The drain outlasts the lease: the draining replica must keep its short run's lease
    renewed, or the other replica takes it over while it is still executing (double
    execution). The long run, still going when the drain times out, is stopped and released,
    and the other replica continues it."""
    marker = f"agentcron-drain-{uuid.uuid4().hex}"
    log = tmp_path / "attempts.log"
    probe = probe_factory(pg_url)
    env_a = engine_env(
        pg_url, tmp_path / "data-a", "drain-a", LEASE_SECONDS="2", DRAIN_TIMEOUT_SECONDS="8"
    )
    env_b = engine_env(pg_url, tmp_path / "data-b", "drain-b", LEASE_SECONDS="2")
    try:
        key = await asyncio.to_thread(make_key, env_a)
        a = await asyncio.to_thread(fleet.start, env_a, "a")
        long = await start_one_shot(
            probe, a, key, "drain-a", command_runner(AGENT, marker, str(log), "60"), log
        )
        short = await start_one_shot(
            probe, a, key, "drain-a", command_runner(AGENT, marker, str(log), "5"), log
        )
        assert long.started_at is not None and long.due_at is not None
        assert long.started_at >= long.due_at
        # B starts while A drains: both runs are A's already, and past their lease B would
        # take over whatever A stops renewing.
        starting_b = asyncio.create_task(asyncio.to_thread(fleet.start, env_b, "b"))
        began = time.monotonic()
        code = await asyncio.to_thread(a.stop, 30)
        print(f"\ndrain: A exited {time.monotonic() - began:.1f} s after SIGTERM (drain 8 s)")
        b = await starting_b
        assert code in (0, -signal.SIGTERM)
        assert "drain_timeout" in a.log()
        assert [e["run_id"] for e in json_events(a.log(), "run_released")] == [str(long.id)]
        drained = await wait_for(lambda: finished(probe, short.id), "the short run's record")
        assert drained.status == "succeeded" and drained.attempt == 1, drained.status
        continued = await wait_for(lambda: finished(probe, long.id), "B to finish the long run")
        assert continued.status == "succeeded", (continued.status, continued.error)
        assert continued.attempt == 2 and continued.task_id == long.task_id
        assert b.stop() in (0, -signal.SIGTERM)
        lines = log_lines(log)
        assert ("drain-a", str(short.id), "1", "end") in lines
        assert [line for line in lines if line[:2] == ("drain-b", str(short.id))] == []
        assert ("drain-a", str(long.id), "1", "end") not in lines
        assert ("drain-b", str(long.id), "2", "end") in lines
    finally:
        fleet.close()  # no server may start the agent again
        kill_processes_with(marker)


@pytest.mark.slow
async def test_ctrl_c_says_what_it_waits_for_and_a_second_one_stops_at_once(
    fleet: Fleet, tmp_path: Path, probe_factory: Callable[[str], RunProbe]
) -> None:
    """Ctrl-C at a terminal: the first SIGINT says at once what the stop waits for and for how
    long; the second ends the process at once (status 130), its agent with it, releasing
    nothing: the run is left as after a crash (README, "How runs happen")."""
    marker = f"agentcron-ctrl-c-{uuid.uuid4().hex}"
    log = tmp_path / "attempts.log"
    env = sqlite_env(tmp_path, "ctrl-c-a", DRAIN_TIMEOUT_SECONDS="45")
    probe = probe_factory(env["AGENTCRON_DATABASE_URL"])
    try:
        await asyncio.to_thread(migrate, env)
        key = await asyncio.to_thread(make_key, env)
        a = await asyncio.to_thread(fleet.start, env, "a")
        run = await start_one_shot(
            probe, a, key, "ctrl-c-a", command_runner(AGENT, marker, str(log), "60"), log
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
        assert ("ctrl-c-a", str(run.id), "1", "end") not in log_lines(log)
        # Nothing was given back: the lease is the dead one's, which the next start continues
        # at its first claim (tests/integration/test_liveness.py, the SQLite restart).
        kept = await probe.run(run.id)
        assert kept.status == "running" and kept.lease_owner == "ctrl-c-a"
    finally:
        fleet.close()
        kill_processes_with(marker)
