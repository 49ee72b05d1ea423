"""The engine's logic on the in-memory run store: no database, no timetable.

Runs are queued straight into ``MemoryRunStore`` and are due at once, so each test waits only
on the behaviour it is about (a retry, a timeout, a cancel, a lost lease, a drain), never on a
schedule's next due time. The SQL ledger's side of every verb is tested in tests/integration
on SQLite and PostgreSQL.
"""

from __future__ import annotations

import asyncio
import threading
import time
import uuid
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest
import structlog.testing

from agentcron.core.errors import SchedulerUnavailable
from agentcron.core.ledger.memory import MemoryRunStore
from agentcron.core.ledger.store import Claim
from agentcron.core.runners import register_runner_type
from agentcron.core.runners.fake import FakeRunnerType, permanent, sleep, succeed, transient
from agentcron.core.storage.models import Run
from agentcron.web.engine.leases import LEASE_LOST
from agentcron.web.engine.loop import SchedulerLoop
from agentcron.web.engine.slots import QUEUE_AHEAD
from tests import agents_fixture

LEASE = 0.9  # the heartbeat renews every 0.3 s: a cancel or a takeover is seen within that


class Bench:
    """A loop over a memory store, and the fake runner type its schedules use."""

    def __init__(self, tmp_path: Path, fake: FakeRunnerType) -> None:
        self.fake = fake
        self.store = MemoryRunStore(owner="engine-a", lease_seconds=LEASE, data_dir=tmp_path)
        self.loops: list[SchedulerLoop] = []

    def loop(
        self, *, concurrency: int = 4, drain_timeout: float = 0.5, log_runs: str = "summary"
    ) -> SchedulerLoop:
        loop = SchedulerLoop(
            self.store,
            concurrency=concurrency,
            tick_seconds=0.05,
            drain_timeout=drain_timeout,
            retry_base=0.01,
            log_runs=log_runs,
        )
        self.store.on_change = loop.wake
        self.loops.append(loop)
        loop.start()
        return loop

    def scripted(
        self, name: str, steps: list[Any], per_attempt: bool = False, **schedule: Any
    ) -> tuple[Any, Any]:
        """A fake runner playing ``steps``, and a schedule of it (``schedule``: its options)."""
        runner = self.fake.script(name, steps, per_attempt=per_attempt)
        return runner, self.store.add_schedule(self.fake.config(name), **schedule)

    async def until(self, run_id: uuid.UUID, *statuses: str, within: float = 5.0) -> Run:
        return await until(lambda: self.store.run(run_id), lambda r: r.status in statuses, within)


async def until(read: Callable[[], Any], test: Callable[[Any], bool], within: float = 5.0) -> Any:
    deadline = time.monotonic() + within
    while True:
        value = read()
        if test(value):
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"not reached within {within} s: {value!r}")
        await asyncio.sleep(0.01)


@pytest.fixture
async def bench(tmp_path: Path) -> AsyncIterator[Bench]:
    fake = FakeRunnerType()
    register_runner_type(fake)
    made = Bench(tmp_path, fake)
    try:
        yield made
    finally:
        for loop in made.loops:
            if loop.running:
                await loop.stop()


# -- outcomes -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("steps", "max_attempts", "ended", "last"),
    [
        # Transient failures retry, in the same task, until one succeeds ...
        ([transient(), transient(), succeed("third")], 3, ("succeeded", 3, "third", None), 0),
        # ... or until max_attempts, which fails the run once with the last error.
        (
            [transient("rate limited")] * 2,
            2,
            ("failed", 2, None, "TransientRunError: rate limited"),
            1,
        ),
        # A permanent error fails at once.
        ([permanent("bad config"), succeed()], 5, ("failed", 1, None, "bad config"), 1),
    ],
    ids=["retried-then-succeeded", "retried-to-the-limit", "permanent"],
)
async def test_transient_failures_retry_and_a_permanent_error_fails_at_once(
    bench: Bench, steps: list[Any], max_attempts: int, ended: tuple[Any, ...], last: int
) -> None:
    runner, schedule = bench.scripted("agent", steps, per_attempt=True, max_attempts=max_attempts)
    bench.loop()
    run = await bench.until(bench.store.queue(schedule).id, "succeeded", "failed")
    assert (run.status, run.attempt, run.output, run.error) == ended
    assert runner.attempts(run.id) == list(range(1, run.attempt + 1))
    assert {call.task_id for call in runner.calls} == {run.task_id}
    assert (schedule.last_status, schedule.consecutive_failures) == (run.status, last)


async def test_a_timeout_stops_the_attempt_and_records_timed_out(bench: Bench) -> None:
    runner, schedule = bench.scripted("slow", [sleep(30)], timeout_seconds=0.3)
    bench.loop()
    run = await bench.until(bench.store.queue(schedule).id, "timed_out")
    assert run.error == "timed out after 0.3 s" and run.output is None
    assert [reason for _, reason in runner.cancelled] == ["timeout"]


class DeafRunnerType:
    """A runner that ignores its cancel token: it waits for an event nobody sets."""

    name = "deaf"

    def __init__(self) -> None:
        self.stopped = 0

    def validate(self, config: Any) -> dict[str, Any]:
        return {"type": self.name}

    def build(self, config: Any) -> Any:
        return self

    async def run(self, request: Any, cancel: Any) -> Any:
        try:
            await asyncio.Event().wait()
        finally:
            self.stopped += 1


async def test_a_runner_that_ignores_its_cancel_token_is_stopped_the_hard_way(
    bench: Bench, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The hard stop, a grace after the timeout, stops the attempt and its slot goes on."""
    monkeypatch.setattr("agentcron.web.engine.attempt.HARD_STOP_GRACE", 0.2)
    deaf = DeafRunnerType()
    register_runner_type(deaf)
    schedule = bench.store.add_schedule({"type": "deaf"}, timeout_seconds=0.3)
    loop = bench.loop(concurrency=1)
    run = await bench.until(bench.store.queue(schedule).id, "timed_out")
    assert run.error == "timed out after 0.3 s" and deaf.stopped == 1
    after = bench.store.queue(bench.store.add_schedule(bench.fake.config()))
    assert (await bench.until(after.id, "succeeded")).attempt == 1
    assert not loop.engine.tokens


async def test_a_runner_type_that_is_gone_fails_the_run_and_pauses_the_schedule(
    bench: Bench,
) -> None:
    schedule = bench.store.add_schedule({"type": "uninstalled-plugin"}, max_attempts=3)
    bench.loop()
    run = await bench.until(bench.store.queue(schedule).id, "failed")
    assert run.attempt == 1  # not retried: no attempt could work
    assert not schedule.enabled
    assert schedule.paused_note is not None and schedule.paused_note.startswith(
        "paused by agentcron"
    )


# -- admission and concurrency --------------------------------------------------------------


async def test_concurrency_bounds_the_attempts_and_the_claim_admits_only_free_slots(
    bench: Bench,
) -> None:
    runner, schedule = bench.scripted("work", [sleep(0.15)])
    queued = [bench.store.queue(schedule) for _ in range(12)]
    bench.loop(concurrency=3)
    for run in queued:
        await bench.until(run.id, "succeeded")
    assert runner.max_running == 3
    assert all(bench.store.run(run.id).attempt == 1 for run in queued)


async def test_every_slot_can_block_in_a_sync_python_agent_at_once(bench: Bench) -> None:
    # 40 sync targets that return only once all 40 are in their threads, at concurrency 40:
    # on the event loop's default executor (min(32, cores + 4) threads, on any machine) they
    # never all meet and each fails at the barrier's timeout.
    agents_fixture.MEETING = threading.Barrier(40, timeout=10)
    schedule = bench.store.add_schedule({"type": "python", "target": "tests.agents_fixture:meet"})
    queued = [bench.store.queue(schedule) for _ in range(40)]
    loop = bench.loop(concurrency=40)
    for run in queued:
        done = await bench.until(run.id, "succeeded", "failed", within=15)
        assert (done.status, done.output) == ("succeeded", "met"), done.error
    # Stopped, the engine lets its idle threads go rather than keep them until collected.
    threads = list(loop.engine.threads.threads)
    assert len(threads) == 40
    await loop.stop()
    await until(lambda: [t for t in threads if t.is_alive()], lambda alive: not alive, 5)


async def test_a_busy_engine_leaves_due_runs_it_has_no_room_for_unleased(bench: Bench) -> None:
    # Concurrency 2: the engine takes in hand the two runs it can start and a short queue
    # (``QUEUE_AHEAD``), never the whole backlog, so another replica could start the rest.
    runner, schedule = bench.scripted("work", [sleep(0.4)])
    queued = [bench.store.queue(schedule) for _ in range(QUEUE_AHEAD + 20)]
    loop = bench.loop(concurrency=2)
    await asyncio.wait_for(runner.wait_calls(2), 5)
    await asyncio.sleep(0.1)  # the claims that could follow have had their chance
    leased = [run for run in queued if bench.store.run(run.id).lease_owner is not None]
    # The first claim takes 32; the room left after it (2) waits for the queue to run down.
    assert QUEUE_AHEAD <= len(leased) <= 2 + QUEUE_AHEAD
    assert len(loop.engine.held) == len(leased)
    # Once the queue ahead has run down to half, the loop takes more in hand without waiting
    # for its tick; not at every slot freed, which made claims of a run or two each.
    loop.tick = 60.0
    nxt = queued[len(leased)].id
    await until(lambda: bench.store.run(nxt), lambda run: run.lease_owner is not None, 10)
    done = [run for run in queued if bench.store.run(run.id).status == "succeeded"]
    assert len(done) >= QUEUE_AHEAD // 2 - 2  # a couple may still be being recorded
    assert bench.store.calls["claim_due_jobs"] <= 4


async def test_a_stop_while_outcomes_are_being_recorded_keeps_them(bench: Bench) -> None:
    # The agents have returned and their outcomes are on their way to the store when the
    # engine is told to stop: the drain must let those records land, not give the runs back
    # as never started (they would be executed a second time, by whichever engine is next).
    _, schedule = bench.scripted("quick", [succeed()])
    queued = [bench.store.queue(schedule) for _ in range(3)]
    recording = asyncio.Event()
    record = bench.store.record

    async def record_slowly(outcomes: Any) -> Any:
        recording.set()
        await asyncio.sleep(0.3)
        return await record(outcomes)

    bench.store.record = record_slowly  # type: ignore[method-assign]
    loop = bench.loop(concurrency=4, drain_timeout=3)
    await asyncio.wait_for(recording.wait(), 5)
    await loop.stop()
    assert [bench.store.run(run.id).status for run in queued] == ["succeeded"] * 3


# -- stopping an attempt --------------------------------------------------------------------


@pytest.mark.parametrize("local", [True, False], ids=["this-replica", "another-replica"])
async def test_a_cancel_stops_a_running_attempt(bench: Bench, local: bool) -> None:
    runner, schedule = bench.scripted("long", [sleep(30)])
    loop = bench.loop()
    queued = bench.store.queue(schedule)
    await asyncio.wait_for(runner.wait_calls(1), 5)
    bench.store.request_cancel(queued.id)  # what the API's cancel writes, on any replica
    if local:
        loop.cancel_local(queued.id)  # and the API of this replica stops it at once
    # Elsewhere, the heartbeat's renewal hears of it (every third of the lease).
    run = await bench.until(queued.id, "cancelled", within=0.5 if local else 3)
    assert (run.reason, run.error, run.attempt) == ("cancel_requested", "cancelled on request", 1)
    assert [reason for _, reason in runner.cancelled] == ["cancel"]


async def test_a_lease_taken_over_stops_the_attempt_and_records_nothing(bench: Bench) -> None:
    runner, schedule = bench.scripted("long", [sleep(30)])
    loop = bench.loop()
    queued = bench.store.queue(schedule)
    await asyncio.wait_for(runner.wait_calls(1), 5)
    bench.store.take_over(queued.id)
    await until(lambda: runner.cancelled, bool, within=3)
    assert [reason for _, reason in runner.cancelled] == [LEASE_LOST]
    await until(lambda: queued.id in loop.engine.held, lambda held: not held)
    run = bench.store.run(queued.id)
    # The other replica's attempt is untouched: still running, under its lease.
    assert (run.status, run.lease_owner, run.finished_at) == ("running", "another-replica", None)
    assert loop.metrics.leases_lost._value.get() == 1


async def test_an_agent_that_returned_when_its_fence_fired_is_recorded_not_run_again(
    bench: Bench, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A stalled process sees a sync agent's return and its fence (the lease not confirmed in
    time) in one turn of the loop. The agent's work is done: the run is recorded as it ended,
    once, not stopped and given back to run a second time."""
    schedule = bench.store.add_schedule(
        {"type": "python", "target": "tests.agents_fixture:returns_then"}
    )
    loop = bench.loop(concurrency=1)
    fenced: list[uuid.UUID] = []

    def fence(run_id: uuid.UUID) -> None:
        if not fenced:  # the first attempt only
            fenced.append(run_id)
            loop.engine.leases._lease_running_out(run_id)

    hook = agents_fixture.then_after_return(loop.engine.threads, fence)
    monkeypatch.setattr(agents_fixture, "BEFORE_RETURN", hook)
    agents_fixture.CALLS.clear()
    queued = bench.store.queue(schedule)
    run = await bench.until(queued.id, "succeeded", "failed")
    assert (run.status, run.attempt, run.output) == ("succeeded", 1, "returned")
    assert fenced == [queued.id] and len(agents_fixture.CALLS) == 1
    assert loop.metrics.leases_lost._value.get() == 0


async def test_stop_lets_a_short_attempt_finish(bench: Bench) -> None:
    runner, schedule = bench.scripted("short", [sleep(0.2, "done")])
    loop = bench.loop(drain_timeout=5)
    queued = bench.store.queue(schedule)
    await asyncio.wait_for(runner.wait_calls(1), 5)
    await loop.stop()
    run = bench.store.run(queued.id)
    assert (run.status, run.output) == ("succeeded", "done")


async def test_stop_releases_a_long_attempt_and_the_queue_for_another_replica(
    bench: Bench,
) -> None:
    runner, schedule = bench.scripted("long", [sleep(30)])
    loop = bench.loop(concurrency=1, drain_timeout=0.2)
    running = bench.store.queue(schedule)
    await asyncio.wait_for(runner.wait_calls(1), 5)
    queued = bench.store.queue(schedule)
    await until(lambda: queued.id in loop.engine.held, bool)
    await loop.stop()
    for run_id in (running.id, queued.id):
        run = bench.store.run(run_id)
        assert (run.status, run.lease_owner) == ("pending", None), run_id
    assert bench.store.run(running.id).reason == "released"
    assert [reason for _, reason in runner.cancelled] == ["shutdown"]


# -- the loop survives ----------------------------------------------------------------------


@pytest.mark.parametrize(
    "verb", ["next_wakeup", "claim_due_jobs", "admit", "record", "renew_leases"]
)
async def test_the_loop_survives_a_verb_that_fails_and_the_run_still_happens(
    bench: Bench, verb: str
) -> None:
    _, schedule = bench.scripted("quick", [succeed("fine")])
    bench.store.fail_next(verb, SchedulerUnavailable("database unreachable"))
    loop = bench.loop(concurrency=1)
    first = bench.store.queue(schedule)
    second = bench.store.queue(schedule)
    for queued in (first, second):
        run = await bench.until(queued.id, "succeeded", within=5)
        assert run.output == "fine"
    assert loop.healthy


# -- admission ahead of the slot -------------------------------------------------------------


async def test_quick_runs_queued_in_hand_are_admitted_before_their_slot_frees(
    bench: Bench,
) -> None:
    # A burst of quick attempts: once most recent ones were quick, the runs waiting for a
    # slot are admitted together while the slots are busy, so a slot that frees goes on to
    # its next run with no admission of its own.
    bench.fake.script("quick", [succeed()])
    # A lease of seconds, not the bench's 0.9 s: a loaded machine stalling this process for
    # half a second would have the fences stop attempts (rightly) and attempts be counted
    # twice, which is not what this test is about (``..._starts_under_its_renewed_lease`` is).
    bench.store.lease_seconds = 6.0
    now = bench.store.clock()
    hourly = {"every_seconds": 3600, "start_at": now.isoformat()}
    for _ in range(600):  # due at once: the claim plans them, and gives each its task
        bench.store.add_schedule(bench.fake.config("quick"), trigger=hourly, next_run=now)
    admitted_by_claim: list[int] = []
    claim = bench.store.claim_due_jobs

    async def claim_counted(*args: Any, **kwargs: Any) -> Claim:
        found = await claim(*args, **kwargs)
        admitted_by_claim.append(len(found.started))
        return found

    bench.store.claim_due_jobs = claim_counted  # type: ignore[method-assign]
    loop = bench.loop(concurrency=4)
    most = 0  # runs in hand: the queue ahead grows once attempts are seen to be quick
    runs = bench.store.runs.values()
    while sum(run.status == "succeeded" for run in runs) < 600:
        most = max(most, len(loop.engine.held))
        await asyncio.sleep(0.002)
    assert most > 4 + QUEUE_AHEAD, most
    admissions = bench.store.calls.get("admit", 0)
    claims = bench.store.calls["claim_due_jobs"]
    print(f"\n600 quick runs: {admissions} admissions, {claims} claims, {most} in hand at most")
    assert admissions <= 600 // 8  # 148 when each waits for its slot to be admitted
    # Once attempts are quick, the claim itself admits the queue ahead, not only free slots.
    assert max(admitted_by_claim) > 4, admitted_by_claim
    assert len(runs) == 600 and all(run.attempt == 1 for run in runs)


async def test_runs_waiting_behind_slow_attempts_stay_pending(bench: Bench) -> None:
    # Attempts of 60 ms, over the quick bound: a run waiting for a slot is not admitted
    # ahead. Shown ``running`` before its runner was called: only a run the claim admitted
    # into a free slot, for the instant before it starts.
    runner, schedule = bench.scripted("slow", [sleep(0.06)])
    queued = [bench.store.queue(schedule) for _ in range(40)]
    loop = bench.loop(concurrency=2)
    most, held = 0, 0
    while not all(bench.store.run(run.id).status == "succeeded" for run in queued):
        held = max(held, len(loop.engine.held))
        called = {call.run_id for call in runner.calls}
        early = [
            r for r in queued if bench.store.run(r.id).status == "running" and r.id not in called
        ]
        most = max(most, len(early))
        await asyncio.sleep(0.005)
    assert most <= 2
    assert held <= 2 + QUEUE_AHEAD  # behind slow attempts the queue ahead stays short


async def test_a_run_admitted_ahead_starts_under_its_renewed_lease(bench: Bench) -> None:
    # Quick attempts first, so the runs queued later are admitted ahead; then one attempt of
    # 1.5 s holds the only slot, longer than the 0.9 s lease. The runs behind it wait for the
    # slot past their admission's lease: they must start under the lease the heartbeat renewed
    # meanwhile, not be stopped at once as "not confirmed" and run again as attempt 2.
    _, quick = bench.scripted("quick", [succeed()])
    _, slow = bench.scripted("slow", [sleep(1.5)])
    first = [bench.store.queue(quick) for _ in range(20)]
    held_up = bench.store.queue(slow, delay=0.2)
    behind = [bench.store.queue(quick, delay=0.4) for _ in range(5)]
    loop = bench.loop(concurrency=1)
    for run in [*first, held_up, *behind]:
        await bench.until(run.id, "succeeded", within=10)
    assert loop.engine.quick()  # the runs behind were admitted ahead of their slot
    assert [bench.store.run(run.id).attempt for run in behind] == [1] * 5


@pytest.mark.parametrize("turns", [0, 1, 2])
async def test_a_heartbeat_stopped_as_it_is_prompted_stops(bench: Bench, turns: int) -> None:
    # The liveness lock taken while the engine stops prompts the heartbeat; Python 3.11's
    # wait_for swallowed the stop's cancel when it came within a few loop turns of that, and
    # the stop waited for the heartbeat forever.
    loop = bench.loop()
    await asyncio.sleep(0.1)  # the heartbeat waits for its interval
    loop.engine.leases.vouch()
    for _ in range(turns):
        await asyncio.sleep(0)
    await asyncio.wait_for(loop.supervisor.stop("heartbeat"), 5)


async def test_runs_that_went_well_are_summarised_and_the_others_logged_each(bench: Bench) -> None:
    _, well = bench.scripted("well", [succeed("done")] * 3)
    _, badly = bench.scripted("badly", [permanent("no")])
    with structlog.testing.capture_logs() as lines:
        loop = bench.loop()
        ran = [bench.store.queue(well) for _ in range(3)]
        failed = bench.store.queue(badly)
        for run in ran:
            await bench.until(run.id, "succeeded")
        await bench.until(failed.id, "failed")
        await loop.stop()  # the summary of what was counted is written at stop
    of_runs = [line for line in lines if line["event"] in ("run_started", "run_finished")]
    assert [(line["event"], line["run_id"], line["status"]) for line in of_runs] == [
        ("run_finished", str(failed.id), "failed")
    ]
    (summary,) = [line for line in lines if line["event"] == "runs_summary"]
    assert summary["started"] == 4 and summary["succeeded"] == 3 and summary["failed"] == 1
    assert summary["instance_id"] == bench.store.owner
