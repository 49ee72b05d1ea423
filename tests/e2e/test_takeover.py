"""Takeover in two seconds (docs/reliability.md, "A dead replica's runs go on in about 2 s").

Three real ``agentcron serve`` replicas on one PostgreSQL database, with a 30-s lease: a lease
alone would leave a killed replica's runs waiting half a minute. Command agents of 8-12 s log
a START line, a BEAT every 0.2 s and an END line, with their run id and attempt, so the log
shows when each execution was last alive. A replica is SIGKILLed at random moments (and
restarted, under a new instance id as a restarted process gets); each time, the runs it was
executing must go on elsewhere in about 2 s of the kill (its session, and so its liveness
lock, died with it; see TAKEOVER_WITHIN), its agents must be dead with it (the reaper), no two
executions of one run may overlap in time, and every due time has exactly one run, which
succeeds.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import random
import signal
import statistics
import time
import uuid
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from tests.e2e.conftest import (
    Fleet,
    RunProbe,
    Server,
    command_runner,
    create_schedule,
    engine_env,
    finished,
    iso,
    kill_processes_with,
    make_key,
    one_shot,
    read_executions,
    wait_for,
)

# $1: the log; $2: how many 0.2-s beats the agent works. $0: the test's marker. One echo per
# line (an O_APPEND write of its own), so lines of agents writing at once never interleave.
AGENT = """
line() { echo "$1 $AGENTCRON_RUN_ID $AGENTCRON_ATTEMPT $AGENTCRON_INSTANCE_ID $(date +%s%N)"; }
line START >> "$1"
i=0
while [ "$i" -lt "$2" ]; do sleep 0.2; line BEAT >> "$1"; i=$((i + 1)); done
line END >> "$1"
"""
REPLICAS = 3
SCHEDULES = 12
KILLS = 10
# Seconds from the kill to the next attempt's START: the median within the promise (the claim
# within ``recovery_seconds``, 2.25 s), every one within a second more. The START line also
# waits for the agent's process to be spawned, on two cores where the killed replica's
# replacement is starting up at that very moment: on this machine the slowest of a run's 60 to
# 95 takeovers took 1.44 to 2.81 s over eight runs, the medians 0.87 to 1.44 s.
TAKEOVER_MEDIAN_WITHIN = 2.0
TAKEOVER_WITHIN = 3.0
DIED_WITHIN = 1.0  # seconds from the kill to the killed replica's agents' last line
# How long an agent works. A takeover starts the runs it continues over from scratch, all at
# once (the survivor claims them together), so a run ends only after the last kill, or in a
# gap between two kills longer than itself: a kill waiting for a slow restart, 9 s apart on
# a loaded machine. Then the test waits for the longest to end. At 8-12 s none ends in a gap
# shorter than 8 s (at 5-20 s those under the gap did, and the wait after the kills was up
# to 20 s), so the kills cut as many running agents (printed: interrupted executions).
AGENT_SECONDS = (8.0, 12.0)


async def create_schedules(server: Server, key: str, marker: str, log: Path) -> list[str]:
    """One-shot schedules (one due time each), due one a second from 3 s from now."""
    first = datetime.now(UTC) + timedelta(seconds=3)
    ids = []
    for index in range(SCHEDULES):
        beats = round(random.uniform(*AGENT_SECONDS) / 0.2)
        body = {
            "name": f"takeover-{index}",
            "prompt": "work",
            "trigger": {"at": iso(first + timedelta(seconds=index))},
            "runner": command_runner(AGENT, marker, str(log), str(beats)),
        }
        ids.append(str((await create_schedule(server, key, body))["id"]))
    return ids


@pytest.mark.pg
@pytest.mark.slow
@pytest.mark.solo
@pytest.mark.solo_pair
@pytest.mark.timeout(300)  # 44 to 75 s alone; past the default 120 s on a loaded machine
async def test_sigkilled_replicas_runs_go_on_within_two_seconds(
    pg_url: str, fleet: Fleet, tmp_path: Path, probe_factory: Callable[[str], RunProbe]
) -> None:
    marker = f"agentcron-takeover-{uuid.uuid4().hex}"
    log = tmp_path / "agents.log"
    probe = probe_factory(pg_url)
    starts = itertools.count(1)

    async def start(slot: int) -> tuple[str, Server]:
        instance = f"replica{slot}-{next(starts)}"
        env = engine_env(
            pg_url,
            tmp_path / f"data-{slot}",
            instance,
            LEASE_SECONDS="30",
            SCHEDULER_CONCURRENCY="16",
        )
        return instance, await asyncio.to_thread(fleet.start, env, instance)

    try:
        key = await asyncio.to_thread(make_key, engine_env(pg_url, tmp_path / "data", "keys"))
        live = dict(enumerate(await asyncio.gather(*(start(s) for s in range(REPLICAS)))))
        schedule_ids = await create_schedules(live[0][1], key, marker, log)
        await asyncio.sleep(5)  # the first runs are under way
        kills: list[tuple[str, int]] = []  # (instance, ns of the kill)
        restarts: list[asyncio.Task[tuple[str, Server]]] = []
        for _ in range(KILLS):
            if len(live) < REPLICAS - 1:  # a slow restart: never kill the last replica
                await asyncio.gather(*restarts)
            running = {run.lease_owner for run in await probe.runs() if run.status == "running"}
            slots = [slot for slot, (instance, _) in live.items() if instance in running]
            slot = random.choice(slots or list(live))
            await asyncio.sleep(random.uniform(0, 1))  # a random moment of its runs' lives
            instance, server = live.pop(slot)
            kills.append((instance, time.time_ns()))
            await asyncio.to_thread(server.kill)
            restart = asyncio.create_task(start(slot))
            restart.add_done_callback(lambda task, slot=slot: live.update({slot: task.result()}))
            restarts.append(restart)
            await asyncio.sleep(random.uniform(1, 2))
        await asyncio.gather(*restarts)

        async def all_done() -> bool:
            runs = await probe.runs()
            return len(runs) >= SCHEDULES and all(run.status == "succeeded" for run in runs)

        await wait_for(all_done, "every run to succeed", within=45, interval=0.5)
    finally:
        fleet.close()
        kill_processes_with(marker)

    runs = await probe.runs()
    by_schedule = {
        schedule_id: [r for r in runs if str(r.schedule_id) == schedule_id]
        for schedule_id in schedule_ids
    }
    assert all(len(found) == 1 for found in by_schedule.values()), by_schedule  # 0 duplicates
    assert all(run.status == "succeeded" for run in runs)  # 0 lost

    seen = read_executions(log)
    takeovers: list[float] = []
    for instance, killed_at in kills:
        for cut in [e for e in seen if e.instance == instance and e.ended_ns is None]:
            assert (cut.last_ns - killed_at) / 1e9 < DIED_WITHIN, (cut, "outlived its service")
            after = [e for e in seen if e.run_id == cut.run_id and e.attempt > cut.attempt]
            assert after, f"run {cut.run_id} was not continued"
            takeovers.append((min(e.started_ns for e in after) - killed_at) / 1e9)
    for run_id in {e.run_id for e in seen}:
        mine = [e for e in seen if e.run_id == run_id]
        for earlier, later in zip(mine, mine[1:], strict=False):
            assert later.started_ns > earlier.last_ns, ("overlap", earlier, later)
    assert len(takeovers) >= KILLS // 2, (kills, seen)  # most kills cut running agents
    ordered = sorted(takeovers)
    p99 = ordered[min(len(ordered) - 1, round(0.99 * (len(ordered) - 1)))]
    print(
        f"\ntakeover after SIGKILL: {len(ordered)} interrupted executions over {KILLS} kills;"
        f" p50 {statistics.median(ordered):.2f} s, p99 {p99:.2f} s, max {ordered[-1]:.2f} s"
    )
    assert statistics.median(ordered) <= TAKEOVER_MEDIAN_WITHIN, ordered
    assert ordered[-1] <= TAKEOVER_WITHIN, ordered


# Paired: it mostly waits (for the lease, then for the agent; two servers, a quarter of a
# core), so it runs beside the database cut of tests/faults/test_outage.py, which waits too.
@pytest.mark.pg
@pytest.mark.slow
@pytest.mark.solo
@pytest.mark.solo_pair
async def test_a_frozen_replica_keeps_its_session_so_only_its_lease_frees_its_run(
    pg_url: str, fleet: Fleet, tmp_path: Path, probe_factory: Callable[[str], RunProbe]
) -> None:
    """SIGSTOP freezes the service, not its agent (a session of its own), and the frozen
    service's database session lives on: its liveness lock is held, so the run waits for its
    lease (6 s) and only then goes on elsewhere. Resumed (SIGCONT), the service stops its
    attempt at once instead of finishing it. The two executions overlap from the takeover to
    the resume: measured here, bounded by how long the service stays frozen past its lease."""
    marker = f"agentcron-frozen-{uuid.uuid4().hex}"
    log = tmp_path / "agents.log"
    probe = probe_factory(pg_url)
    lease = 6.0
    env_a = engine_env(pg_url, tmp_path / "data-a", "frozen-a", LEASE_SECONDS=f"{lease:g}")
    env_b = engine_env(pg_url, tmp_path / "data-b", "frozen-b", LEASE_SECONDS=f"{lease:g}")
    try:
        key = await asyncio.to_thread(make_key, env_a)
        a = await asyncio.to_thread(fleet.start, env_a, "a")
        agent = command_runner(AGENT, marker, str(log), str(round(12 / 0.2)))
        await create_schedule(a, key, one_shot(agent, delay=1))
        await asyncio.to_thread(fleet.start, env_b, "b")

        async def started_on(instance: str) -> bool:
            return any(e.instance == instance for e in read_executions(log))

        await wait_for(lambda: started_on("frozen-a"), "the run to start on A", within=15)
        a.process.send_signal(signal.SIGSTOP)
        frozen_at = time.time_ns()
        await wait_for(lambda: started_on("frozen-b"), "B to take the run over", within=3 * lease)
        await asyncio.sleep(1)  # frozen a second past the takeover
        a.process.send_signal(signal.SIGCONT)
        resumed_at = time.time_ns()
        await asyncio.sleep(2)  # its agent's beats, if it were still going, would show
        [run] = await probe.runs()  # one due time, one run
        done = await wait_for(lambda: finished(probe, run.id), "B to finish", 40, interval=0.5)
    finally:
        with contextlib.suppress(ProcessLookupError):
            a.process.send_signal(signal.SIGCONT)
        fleet.close()
        kill_processes_with(marker)

    seen = read_executions(log)
    first = next(e for e in seen if e.instance == "frozen-a")
    second = next(e for e in seen if e.instance == "frozen-b")
    waited = (second.started_ns - frozen_at) / 1e9
    overlap = (first.last_ns - second.started_ns) / 1e9
    stopped = (first.last_ns - resumed_at) / 1e9
    print(
        f"\nSIGSTOP: taken over {waited:.2f} s after the freeze (lease {lease:g} s); the frozen"
        f" replica's agent stopped {stopped:.2f} s after SIGCONT; overlap {overlap:.2f} s"
    )
    assert first.ended_ns is None and second.attempt == first.attempt + 1
    assert waited >= lease - 2  # its session lived on: the lease, not liveness, freed the run
    assert stopped < 1.0  # stopped at once on resume, not left to finish
    assert overlap < (resumed_at - second.started_ns) / 1e9 + 1.0
    assert done.status == "succeeded" and done.attempt == 2
