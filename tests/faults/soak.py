"""Soak: several real replicas on one PostgreSQL database, one SIGKILLed and restarted at
random moments, and every due time checked afterwards (docs/design.md, promises 3, 4, 7).

    python -m tests.faults.soak --replicas 4 --schedules 1000 --seconds 120 --kill-every 20

(``make soak``). It makes a fresh database on ``AGENTCRON_TEST_PG_URL``'s server, starts the
replicas (``agentcron serve``, each its own process, instance id and data directory), creates
the schedules over HTTP (every ``--every`` seconds, spread evenly over the interval, or all due
at the same instant with ``--burst``), and every ``--kill-every`` seconds SIGKILLs one replica
at a random moment and starts a new process in its place (a new instance id, as a restarted
process gets). With ``--burst`` each kill lands a random fraction of a second after a burst
came due, while its claims are in flight.

Most agents are in-process and instant. With ``--long-fraction F --long-seconds S`` a fraction
F of the schedules, spread evenly, run a ``command`` agent (``sh``) that works S seconds instead:
set S above ``--lease-seconds`` and their leases must be renewed while they work, and runs keep
starting meanwhile. Then it waits until every run of the observed window has finished, stops
the fleet and checks, from the database and from the agents' own START/END log:

- no duplicate: one run per (schedule, due time);
- nothing missed: every due time of the window, for every schedule, has a run, and it
  succeeded (at least one replica lived throughout);
- no attempt executed twice; a run re-executes only as a new attempt, after the replica of its
  previous execution was SIGKILLed;
- no two executions of one run overlap in time, except where the earlier one belonged to a
  SIGKILLed replica: its agent is killed with it but logs no END, so the log cannot tell when
  it stopped. Those are counted as ``orphaned_overlaps``;
- nothing ran early, or later than the schedules' misfire grace.

It prints a JSON summary and exits 1 if any check failed. ``tests/faults/test_soak.py`` runs a
20-second version in ``make test``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import os
import random
import signal
import sys
import tempfile
import time
import uuid
from collections import Counter, defaultdict
from dataclasses import asdict, dataclass, field, fields
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx

from agentcron.core.storage.models import Run
from tests.conftest import bearer
from tests.e2e.conftest import (
    Execution,
    RunProbe,
    Server,
    doubled,
    engine_env,
    grid,
    iso,
    json_events,
    kill_processes_with,
    make_key,
    overlapping,
    read_executions,
    scratch_pg_database,
    start_server,
    timed_agent,
)
from tests.faults.agents import LOG_ENV

REPO = Path(__file__).resolve().parents[2]
MARGIN = timedelta(seconds=3)  # around the window: schedules being created, the fleet stopping


@dataclass
class SoakConfig:
    replicas: int = 4
    schedules: int = 1000
    seconds: float = 120.0
    kill_every: float = 20.0
    every: int = 10  # seconds between due times of one schedule
    burst: bool = False  # every schedule due at the same instant (claims in flight at a kill)
    lease_seconds: float = 3.0
    concurrency: int = 16
    grace: int = 60  # misfire_grace_seconds of every schedule (the default)
    seed: int | None = None
    long_fraction: float = 0.0  # of the schedules, spread evenly: a command agent working...
    long_seconds: float = 20.0  # ...this long (longer than the lease, to need renewals)


def is_long(config: SoakConfig, index: int) -> bool:
    """Whether schedule ``index`` runs the long agent: every 1/F-th one, spread evenly."""
    fraction = config.long_fraction
    return fraction > 0 and math.floor((index + 1) * fraction) > math.floor(index * fraction)


def offset(config: SoakConfig, index: int) -> timedelta:
    """How far schedule ``index``'s grid lies after the base: spread evenly over the interval,
    or none with ``burst``."""
    spread = 0.0 if config.burst else config.every * index / config.schedules
    return timedelta(seconds=round(spread, 3))


@dataclass
class SoakResult:
    summary: dict[str, Any]
    violations: list[str] = field(default_factory=list)


def percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[max(0, math.ceil(fraction * len(ordered)) - 1)] if ordered else 0.0


class Replicas:
    """The fleet: slot i runs one process at a time; a kill replaces it with a new one."""

    def __init__(self, database_url: str, workdir: Path, config: SoakConfig, fault_log: Path):
        self.database_url = database_url
        self.workdir = workdir
        self.config = config
        self.fault_log = fault_log
        self.live: list[Server] = []
        self.dead: list[Server] = []
        self.generation = [0] * config.replicas

    def env(self, slot: int) -> dict[str, str]:
        env = engine_env(
            self.database_url,
            self.workdir / f"data-{slot}",
            self.instance(slot),
            LEASE_SECONDS=f"{self.config.lease_seconds:g}",
            SCHEDULER_TICK_SECONDS="1",
            SCHEDULER_CONCURRENCY=str(self.config.concurrency),
            # Long runs still going after the window are stopped at the end, not waited for.
            DRAIN_TIMEOUT_SECONDS="5",
        )
        env[LOG_ENV] = str(self.fault_log)
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
        return env

    def start(self, slot: int) -> Server:
        return start_server(self.env(slot), self.workdir / f"{self.instance(slot)}.log")

    async def start_all(self) -> None:
        starting = (asyncio.to_thread(self.start, slot) for slot in range(self.config.replicas))
        self.live = list(await asyncio.gather(*starting))

    def instance(self, slot: int) -> str:
        """The instance id of slot's live process."""
        return f"soak-{slot}-g{self.generation[slot]}"

    async def kill_and_restart(self, slot: int) -> tuple[datetime, datetime]:
        """SIGKILL slot's process; start its successor. Returns (killed at, successor up at)."""
        victim = self.live[slot]
        killed_at = datetime.now(UTC)
        code = await asyncio.to_thread(victim.kill)
        assert code == -signal.SIGKILL, code
        self.dead.append(victim)
        self.generation[slot] += 1
        self.live[slot] = await asyncio.to_thread(self.start, slot)
        return killed_at, datetime.now(UTC)

    async def stop_all(self) -> list[int]:
        # A replica's shutdown may take its loop's stop (10 s), the drain (5 s) and the hard stop
        # of the agents still going (15 s), then a write per run handed back: many long agents
        # on a busy host take more than Server.stop's default 30 s.
        stopping = (asyncio.to_thread(s.stop, 60) for s in self.live)
        return list(await asyncio.gather(*stopping))

    def kill_all(self) -> None:
        for server in self.live:
            server.kill()

    def logs(self) -> list[str]:
        return [server.log() for server in [*self.dead, *self.live]]


async def create_schedules(
    urls: list[str], key: str, config: SoakConfig, base: datetime, long_agent: dict[str, Any]
) -> list[str]:
    """Create the schedules over HTTP, spread over the replicas, 20 requests at a time."""
    every = config.every
    short_agent = {"type": "python", "target": "tests.faults.agents:append_run"}
    async with httpx.AsyncClient(timeout=60, headers=bearer(key)) as http:

        async def create(index: int) -> str:
            body = {
                "name": f"soak {index}",
                "prompt": "append the run id",
                "trigger": {
                    "every_seconds": every,
                    "start_at": iso(base + offset(config, index)),
                },
                "misfire_grace_seconds": config.grace,
                "max_attempts": 3,
                "runner": long_agent if is_long(config, index) else short_agent,
            }
            response = await http.post(f"{urls[index % len(urls)]}/api/v1/schedules", json=body)
            if response.status_code != 201:
                raise AssertionError(f"{response.status_code} {response.text}")
            schedule_id: str = response.json()["id"]
            return schedule_id

        ids: list[str] = []
        for first in range(0, config.schedules, 20):
            batch = range(first, min(first + 20, config.schedules))
            ids.extend(await asyncio.gather(*(create(index) for index in batch)))
    return ids


async def soak(config: SoakConfig, database_url: str, workdir: Path) -> SoakResult:
    """Run one soak on a migrated, empty ``database_url``; ``workdir`` keeps logs and data."""
    rng = random.Random(config.seed)
    await asyncio.to_thread(workdir.mkdir, parents=True, exist_ok=True)
    fault_log = workdir / "agents.log"
    fleet = Replicas(database_url, workdir, config, fault_log)
    probe = RunProbe(database_url)
    every = timedelta(seconds=config.every)
    kills: list[dict[str, Any]] = []
    # In the long agents' command line ($0): what a SIGKILLed replica leaves running is found
    # by it, and stopped at the end.
    marker = f"agentcron-soak-{uuid.uuid4().hex}"
    long_agent = timed_agent(fault_log, config.long_seconds, marker)
    try:
        key = await asyncio.to_thread(make_key, fleet.env(0))
        await fleet.start_all()
        base = datetime.now(UTC).replace(microsecond=0) + timedelta(seconds=2)
        began = time.monotonic()
        urls = [s.url for s in fleet.live]
        ids = await create_schedules(urls, key, config, base, long_agent)
        created = datetime.now(UTC)
        create_seconds = time.monotonic() - began
        window_start = created + MARGIN
        window_end_goal = window_start + timedelta(seconds=config.seconds)

        # -- kills: one replica every kill_every seconds, at a random moment -------------------
        next_kill = window_start + timedelta(seconds=rng.uniform(0.2, 0.8) * config.kill_every)
        while next_kill < window_end_goal - timedelta(seconds=1):
            if config.burst:  # a random moment within the first half second of a burst
                due = grid(base, every, next_kill, next_kill + every)[0]
                next_kill = due + timedelta(seconds=rng.uniform(0.0, 0.5))
                if next_kill >= window_end_goal:
                    break
            await asyncio.sleep(max(0.0, (next_kill - datetime.now(UTC)).total_seconds()))
            slot = rng.randrange(config.replicas)
            instance = fleet.instance(slot)
            killed_at, up_at = await fleet.kill_and_restart(slot)
            kills.append(
                {"slot": slot, "instance": instance, "killed_at": killed_at, "restarted_at": up_at}
            )
            next_kill = killed_at + timedelta(seconds=config.kill_every * rng.uniform(0.75, 1.25))
        await asyncio.sleep(max(0.0, (window_end_goal - datetime.now(UTC)).total_seconds()))
        window_end = datetime.now(UTC) - MARGIN

        # -- let every run of the window finish (the fleet keeps running) ----------------------
        def in_window(run: Run) -> bool:
            return run.due_at is not None and window_start <= run.due_at <= window_end

        expected = {
            sid: grid(base + offset(config, i), every, window_start, window_end)
            for i, sid in enumerate(ids)
        }
        want = sum(len(times) for times in expected.values())
        # A long run taken over after a kill starts over: up to two of its lengths to finish.
        long_wait = 2 * config.long_seconds if config.long_fraction > 0 else 0.0
        deadline = time.monotonic() + 60 + config.lease_seconds * 4 + long_wait
        while True:
            # Counted in the database: loading every run twice a second, thousands of them
            # after a minute, loads the database the replicas need.
            progress = await probe.statuses(window_start, window_end)
            unfinished = progress["pending"] + progress["running"]
            if (progress.total() >= want and unfinished == 0) or time.monotonic() > deadline:
                break
            await asyncio.sleep(0.5)
        codes = await fleet.stop_all()
        runs = await probe.runs()
        logs = fleet.logs()
    finally:
        fleet.kill_all()
        await probe.close()
        orphans = await asyncio.to_thread(kill_processes_with, marker)

    # -- checks ----------------------------------------------------------------------------
    violations: list[str] = []
    if any(code not in (0, -signal.SIGTERM) for code in codes):
        violations.append(f"a replica did not stop cleanly on SIGTERM: {codes}")
    scheduled = [r for r in runs if r.trigger == "schedule"]
    duplicates = doubled((str(r.schedule_id), r.due_at) for r in scheduled)
    if duplicates:
        violations.append(f"{len(duplicates)} due times with more than one run: {duplicates[:5]}")
    window_runs = [r for r in scheduled if in_window(r)]
    have = {(str(r.schedule_id), r.due_at) for r in window_runs}
    missing = [
        (sid, due) for sid, times in expected.items() for due in times if (sid, due) not in have
    ]
    if missing:
        violations.append(f"{len(missing)} due times of the window have no run: {missing[:5]}")
    statuses = Counter(r.status for r in window_runs)
    if set(statuses) - {"succeeded"}:
        violations.append(f"window runs not all succeeded: {dict(statuses)}")
    log = read_executions(fault_log)
    twice = doubled((e.run_id, e.attempt) for e in log)
    if twice:
        violations.append(f"{len(twice)} attempts executed twice: {twice[:5]}")
    executions = Counter(e.run_id for e in log)
    attempt_of = {str(r.id): r.attempt for r in scheduled}
    over = [r for r, count in executions.items() if count > attempt_of.get(r, 0)]
    if over:
        violations.append(f"{len(over)} runs executed more often than their attempts: {over[:5]}")
    killed_ns: dict[str, float] = {
        str(kill["instance"]): kill["killed_at"].timestamp() * 1e9 for kill in kills
    }

    def killed_before(earlier: Execution, later: Execution) -> bool:
        """The replica of ``earlier`` was SIGKILLed before ``later`` began."""
        return killed_ns.get(earlier.instance, float("inf")) < later.started_ns

    by_run: dict[str, list[Execution]] = defaultdict(list)
    for execution in log:
        by_run[execution.run_id].append(execution)
    unexplained = [
        later.run_id
        for runs_of in by_run.values()
        for earlier, later in zip(runs_of, runs_of[1:], strict=False)
        if later.attempt <= earlier.attempt or not killed_before(earlier, later)
    ]
    if unexplained:
        violations.append(
            f"{len(unexplained)} re-executions not a new attempt after a kill: {unexplained[:5]}"
        )
    # Takeover time: from a kill to the next attempt's start of each execution it cut short.
    takeover_s = [
        (min(later.started_ns for later in after) - killed_ns[cut.instance]) / 1e9
        for cut in log
        if cut.ended_ns is None and cut.instance in killed_ns
        for after in [[e for e in by_run[cut.run_id] if e.attempt > cut.attempt]]
        if after
    ]
    pairs = overlapping(log)
    orphaned = [(a, b) for a, b in pairs if killed_before(a, b)]
    overlaps = [(a, b) for a, b in pairs if not killed_before(a, b)]
    if overlaps:
        shown = [(a.run_id, a.instance, b.instance) for a, b in overlaps[:5]]
        violations.append(f"{len(overlaps)} overlapping executions, no kill between: {shown}")
    never = [
        str(r.id) for r in window_runs if r.status == "succeeded" and str(r.id) not in executions
    ]
    if never:
        violations.append(f"{len(never)} succeeded runs never reached the agent: {never[:5]}")
    grace = timedelta(seconds=config.grace)
    early_or_late = [
        str(r.id)
        for r in window_runs
        if r.started_at is None
        or r.due_at is None
        or r.started_at < r.due_at
        or r.created_at - r.due_at > grace
    ]
    if early_or_late:
        violations.append(f"{len(early_or_late)} runs started early or claimed late")

    delays = [
        (r.started_at - r.due_at).total_seconds()
        for r in window_runs
        if r.started_at is not None and r.due_at is not None
    ]
    after_kill = [
        (r.started_at - r.due_at).total_seconds()
        for r in window_runs
        for kill in kills
        if r.started_at is not None
        and r.due_at is not None
        and kill["killed_at"] - timedelta(seconds=1) <= r.due_at <= kill["killed_at"] + 2 * every
    ]
    taken_over = [r for r in window_runs if r.attempt > 1]
    finish_after_takeover = [
        (r.finished_at - r.due_at).total_seconds()
        for r in taken_over
        if r.finished_at is not None and r.due_at is not None
    ]
    recovered = sum(
        int(e.get("runs", 0)) for log in logs for e in json_events(log, "leases_recovered")
    )
    summary = {  # beside the config, which ``main`` prints with it
        "window_seconds": round((window_end - window_start).total_seconds(), 1),
        "create_seconds": round(create_seconds, 1),
        "kills": len(kills),
        "runs": len(scheduled),
        "due_times_checked": want,
        "window_runs": len(window_runs),
        "duplicates": len(duplicates),
        "missed": len(missing),
        "attempts_executed_twice": len(twice),
        "runs_reexecuted_after_kill": sum(1 for count in executions.values() if count > 1),
        "long_schedules": sum(1 for index in range(config.schedules) if is_long(config, index)),
        "executions": len(log),
        "reexecutions_unexplained": len(unexplained),
        "overlaps": len(overlaps),
        "orphaned_overlaps": len(orphaned),
        "orphaned_agents_stopped": len(orphans),
        "takeovers": len(taken_over),
        "takeover_cut_executions": len(takeover_s),
        "takeover_p50_s": round(percentile(takeover_s, 0.5), 3),
        "takeover_p99_s": round(percentile(takeover_s, 0.99), 3),
        "takeover_max_s": round(max(takeover_s, default=0.0), 3),
        "leases_recovered": recovered,
        "start_delay_p50_s": round(percentile(delays, 0.5), 3),
        "start_delay_p99_s": round(percentile(delays, 0.99), 3),
        "start_delay_max_s": round(max(delays, default=0.0), 3),
        "max_start_delay_after_kill_s": round(max(after_kill, default=0.0), 3),
        "max_finish_delay_of_taken_over_run_s": round(max(finish_after_takeover, default=0.0), 3),
        "restart_seconds_max": round(
            max(((k["restarted_at"] - k["killed_at"]).total_seconds() for k in kills), default=0),
            2,
        ),
        "statuses": dict(statuses),
        "violations": len(violations),
    }
    return SoakResult(summary, violations)


async def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    # One option per field of SoakConfig, by its name: --kill-every, --lease-seconds...
    for option in fields(SoakConfig):
        flag = f"--{option.name.replace('_', '-')}"
        if isinstance(option.default, bool):
            parser.add_argument(flag, action="store_true")
        else:
            kind = float if option.type in ("float", "float | None") else int
            parser.add_argument(flag, type=kind, default=option.default)
    parser.add_argument("--keep", action="store_true", help="keep the database and the logs")
    args = vars(parser.parse_args(argv))
    keep = args.pop("keep")
    config = SoakConfig(**args)
    if not 0 <= config.long_fraction <= 1:
        parser.error("--long-fraction is a fraction, between 0 and 1")
    workdir = Path(tempfile.mkdtemp(prefix="agentcron-soak-"))
    async with scratch_pg_database("agentcron_soak", workdir, keep=keep) as database_url:
        result = await soak(config, database_url, workdir)
    print(json.dumps({"config": asdict(config), **result.summary}, indent=2, default=str))
    for violation in result.violations:
        print(f"VIOLATION: {violation}", file=sys.stderr)
    print(f"logs: {workdir}" + ("" if keep else " (database dropped)"), file=sys.stderr)
    return 1 if result.violations else 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
