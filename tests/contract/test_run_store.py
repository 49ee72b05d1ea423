"""The ``RunStore`` contract (core/ledger/store.py), held against every store: the memory
store, and the SQL store on SQLite and on PostgreSQL. What holds after each verb is asserted
here once; the engine's logic is tested on the memory store (tests/unit/test_engine_logic.py),
and what only a database can break (lock order, replicas) in tests/integration."""

from __future__ import annotations

import uuid
from datetime import timedelta
from typing import Any

from agentcron.core.ledger.store import Outcome, StartDecision
from agentcron.core.storage.models import Run
from agentcron.core.timeline import COUNT_CAP, MAX_ROWS, jitter_delay
from tests.contract.conftest import DUE, LEASE, NOW, OWNER, T0, World

UNTIL = NOW + timedelta(seconds=LEASE)
WEBHOOK = [{"type": "webhook", "url": "https://example.org/hook", "secret": "whsec_x"}]
MINUTE = timedelta(minutes=1)
MINUTELY = {"every_seconds": 60, "start_at": T0.isoformat()}


async def claimed(world: World, schedule_id: uuid.UUID, **claim: Any) -> Run:
    """The one run the next claim takes of ``schedule_id``."""
    runs = (await world.store.claim_due_jobs(NOW, **claim)).runs
    (run,) = [run for run in runs if run.schedule_id == schedule_id]
    return run


async def admitted(world: World, run: Run) -> StartDecision:
    (decision,) = await world.store.admit([run])
    return decision


async def running(world: World, **fields: Any) -> Run:
    """A run of a new schedule, claimed and admitted."""
    run = await claimed(world, await world.schedule(**fields))
    decision = await admitted(world, run)
    assert decision.action == "run"
    return run


async def beside(world: World, overlap: str, **fields: Any) -> tuple[Run, Run]:
    """A running run of a new ``overlap`` schedule, and a second run of it, claimed."""
    first = await running(world, overlap=overlap, **fields)
    second = await world.queued(first.schedule_id)
    await world.store.claim_due_jobs(NOW)
    return first, second


# -- claim --------------------------------------------------------------------------------------


async def test_a_claim_makes_one_run_per_due_time_and_moves_the_timetable(world: World) -> None:
    plain = await world.schedule()
    guarded = await world.schedule(overlap="skip")
    claim = await world.store.claim_due_jobs(NOW)
    by_schedule = {run.schedule_id: run for run in claim.runs}
    assert set(by_schedule) == {plain, guarded}
    assert all(run.due_at == DUE and run.status == "pending" for run in claim.runs)
    assert all(run.lease_owner == OWNER and run.lease_expires_at == UNTIL for run in claim.runs)
    assert [(await world.run(run.id)).claimed_at for run in claim.runs] == [NOW, NOW]
    assert (await world.schedule_row(plain)).next_run == T0 + timedelta(hours=1)
    # A run that needs no look at others gets its task with the claim; the others at admission.
    ready = by_schedule[plain]
    assert set(claim.prepared) == {ready.id} and not claim.started
    assert ready.task_id is not None and by_schedule[guarded].task_id is None
    task = await world.task(ready.task_id)
    assert task is not None and task["workdir"] == claim.prepared[ready.id]
    again = await world.store.claim_due_jobs(NOW)
    assert again.runs == [] and not again.full


async def test_a_claim_admits_up_to_start_runs_itself(world: World) -> None:
    for _ in range(3):
        await world.schedule()
    claim = await world.store.claim_due_jobs(NOW, start=2)
    assert len(claim.started) == 2 and len(claim.prepared) == 1
    for run in claim.runs:
        stored = await world.run(run.id)
        if run.id in claim.started:
            assert (stored.status, stored.attempt, stored.started_at) == ("running", 1, NOW)
            assert (run.status, run.attempt) == ("running", 1)
        else:
            assert (stored.status, stored.attempt) == ("pending", 0)


async def test_a_claim_takes_queued_runs_and_lapsed_leases_not_live_ones(world: World) -> None:
    schedule_id = await world.schedule(next_run=None)
    queued = await world.queued(schedule_id)
    later = await world.queued(schedule_id, available_at=NOW + timedelta(seconds=5))
    first_claim = NOW - timedelta(minutes=5)
    lapsed = await world.queued(
        schedule_id,
        status="running",
        lease_owner="replica-b",
        lease_expires_at=NOW - timedelta(1),
        claimed_at=first_claim,
    )
    live = await world.queued(
        schedule_id, status="running", lease_owner="replica-b", lease_expires_at=UNTIL
    )
    claim = await world.store.claim_due_jobs(NOW)
    assert {run.id for run in claim.runs} == {queued.id, lapsed.id}
    assert claim.recovered == 1
    assert (await world.run(lapsed.id)).lease_owner == OWNER
    # Claimed now, or kept from its first claim (a take-over is not a first claim).
    assert [(await world.run(run.id)).claimed_at for run in (queued, lapsed)] == [NOW, first_claim]
    for run_id, owner in ((later.id, None), (live.id, "replica-b")):
        assert (await world.run(run_id)).lease_owner == owner


async def test_a_claim_is_bounded_and_says_when_more_is_due(world: World) -> None:
    # Due schedules and queued runs share one limit.
    for _ in range(3):
        await world.schedule()
    queued = [await world.queued(await world.schedule(next_run=None)) for _ in range(2)]
    first = await world.store.claim_due_jobs(NOW, limit=3)
    assert len(first.runs) == 3 and first.full
    second = await world.store.claim_due_jobs(NOW, limit=3)
    assert len(second.runs) == 2 and not second.full
    claimed = {run.id for run in first.runs + second.runs}
    assert len(claimed) == 5 and {run.id for run in queued} <= claimed


async def test_a_gap_is_one_skipped_row_per_due_time_then_a_counted_summary(world: World) -> None:
    missed = MAX_ROWS + COUNT_CAP - 5  # due times missed, fewer than a summary counts
    schedule_id = await world.schedule(trigger=MINUTELY, next_run=T0 + MINUTE)
    claim = await world.store.claim_due_jobs(T0 + (missed + 2) * MINUTE)  # grace: 60 s
    assert [run.due_at for run in claim.runs] == [T0 + (missed + k) * MINUTE for k in (1, 2)]
    rows = sorted(await world.runs_of(schedule_id), key=lambda run: run.due_at or T0)
    skipped = [run for run in rows if run.id not in {run.id for run in claim.runs}]
    assert [(run.due_at, run.status, run.reason) for run in skipped] == [
        (T0 + k * MINUTE, "skipped", "missed") for k in range(1, MAX_ROWS + 2)
    ]
    assert all(run.lease_owner is None and run.finished_at is not None for run in skipped)
    assert (skipped[-1].covers, skipped[-1].covers_until) == (
        missed - MAX_ROWS,
        T0 + missed * MINUTE,
    )
    # Each row says what started it: the timetable, nobody.
    assert {(run.origin, run.started_by) for run in rows} == {("schedule", None)}
    assert (await world.schedule_row(schedule_id)).next_run == T0 + (missed + 3) * MINUTE


async def test_catchup_latest_runs_the_latest_missed_due_time_and_coalesces_the_rest(
    world: World,
) -> None:
    schedule_id = await world.schedule(
        trigger=MINUTELY, next_run=T0 + MINUTE, catchup="latest", misfire_grace_seconds=1
    )
    (run,) = (await world.store.claim_due_jobs(T0 + 4 * MINUTE + timedelta(seconds=30))).runs
    assert (run.due_at, run.origin) == (T0 + 4 * MINUTE, "catchup")
    rows = sorted(await world.runs_of(schedule_id), key=lambda run: run.due_at or T0)
    assert [(row.due_at, row.status, row.reason) for row in rows] == [
        *((T0 + k * MINUTE, "skipped", "coalesced") for k in (1, 2, 3)),
        (T0 + 4 * MINUTE, "pending", None),
    ]


async def test_a_jittered_run_is_claimed_on_time_and_starts_at_its_offset(world: World) -> None:
    schedule_id = await world.schedule(jitter_seconds=30)
    run = await claimed(world, schedule_id)
    assert run.due_at == DUE and run.available_at == DUE + jitter_delay(schedule_id, DUE, 30)


async def test_next_wakeup_is_the_earliest_work(world: World) -> None:
    schedule_id = await world.schedule(next_run=NOW + timedelta(seconds=9))
    assert (await world.store.next_wakeup()).work == NOW + timedelta(seconds=9)
    await world.queued(schedule_id, available_at=NOW + timedelta(seconds=4))
    assert (await world.store.next_wakeup()).work == NOW + timedelta(seconds=4)


# -- admit --------------------------------------------------------------------------------------


async def test_an_admission_starts_an_attempt_and_hands_back_the_run_as_written(
    world: World,
) -> None:
    run = await claimed(world, await world.schedule())
    decision = await admitted(world, run)
    assert decision.action == "run" and decision.run is run and decision.task is not None
    stored = await world.run(run.id)
    assert (stored.status, stored.attempt, stored.started_at) == ("running", 1, NOW)
    assert (run.status, run.attempt, run.started_at) == ("running", 1, NOW)
    assert run.lease_expires_at == stored.lease_expires_at == UNTIL
    assert decision.task.id == stored.task_id


async def test_a_manual_run_gets_a_fresh_task_at_its_admission(world: World) -> None:
    schedule_id = await world.schedule(next_run=None)
    tasks = []
    for _ in range(2):  # isolated: a fresh task each time, in the schedule's one directory
        queued = await world.queued(schedule_id)
        (run,) = (await world.store.claim_due_jobs(NOW)).runs
        assert run.id == queued.id and run.task_id is None
        decision = await admitted(world, run)
        assert decision.task is not None and (await world.run(run.id)).task_id == decision.task.id
        assert await world.task(decision.task.id) is not None
        tasks.append(decision.task)
        await world.store.record([Outcome(run, "succeeded")])
    assert tasks[0].id != tasks[1].id and tasks[0].workdir == tasks[1].workdir


async def test_an_admission_ends_what_cannot_start_and_leaves_what_is_not_ours(
    world: World,
) -> None:
    names = ("paused", "deleted", "cancelled", "lost")
    runs = {name: await claimed(world, await world.schedule(name=name)) for name in names}
    await world.set_schedule(runs["paused"].schedule_id, enabled=False)
    await world.set_schedule(runs["deleted"].schedule_id, deleted_at=NOW)
    await world.set_run(runs["cancelled"].id, cancel_requested=True)
    await world.set_run(runs["lost"].id, lease_owner="replica-b")
    decisions = await world.store.admit([runs[name] for name in names])
    seen = {
        name: (d.action, *((d.run.status, d.run.reason, d.run.error) if d.run else ()))
        for name, d in zip(names, decisions, strict=True)
    }
    assert seen == {
        "paused": ("done", "skipped", "paused", None),
        "deleted": ("done", "cancelled", "schedule_deleted", "its schedule was deleted"),
        "cancelled": ("done", "cancelled", "cancel_requested", "cancelled on request"),
        "lost": ("lost",),
    }
    assert (await world.run(runs["deleted"].id)).status == "cancelled"
    assert (await world.run(runs["lost"].id)).status == "pending"


async def test_overlap_skip_ends_a_run_while_another_is_going(world: World) -> None:
    first, second = await beside(world, "skip")
    decision = await admitted(world, second)
    assert decision.action == "done" and decision.run is not None
    assert (decision.run.status, decision.run.reason) == ("skipped", "overlap")
    assert decision.run.error == f"run {first.id} of this schedule was still going"


async def test_overlap_buffer_one_keeps_one_waiting_and_skips_the_next(world: World) -> None:
    first = await running(world, overlap="buffer_one")
    second = await world.queued(first.schedule_id)
    third = await world.queued(first.schedule_id)
    await world.store.claim_due_jobs(NOW)
    waiting, skipped = await world.store.admit([second, third])
    assert waiting.action == "wait" and (await world.run(second.id)).reason == "buffered"
    assert skipped.action == "done" and skipped.run is not None
    assert skipped.run.error == "one run of this schedule was already waiting"
    await world.store.record([Outcome(first, "succeeded")])
    # The one waiting goes next: a newer run that comes before it looks again is skipped.
    newer = await world.queued(first.schedule_id)
    await world.store.claim_due_jobs(NOW)
    assert (await admitted(world, newer)).action == "done"
    assert (await admitted(world, second)).action == "run"


async def test_overlap_allow_starts_a_run_beside_a_running_one(world: World) -> None:
    first, second = await beside(world, "allow")
    assert (await admitted(world, second)).action == "run"
    assert {run.status for run in await world.runs_of(first.schedule_id)} == {"running"}


async def test_overlap_cancel_other_asks_the_running_run_to_stop(world: World) -> None:
    first, second = await beside(world, "cancel_other")
    assert (await admitted(world, second)).action == "wait"
    assert (await world.run(second.id)).reason == "cancelling_other"
    assert (await world.store.renew_leases(NOW))[first.id] is True  # asked to stop
    await world.store.record([Outcome(first, "cancelled")])
    ended = await world.run(first.id)
    assert (ended.status, ended.reason) == ("cancelled", "cancel_requested")
    assert (await admitted(world, second)).action == "run"


async def test_runs_of_a_persistent_schedule_share_one_task_one_at_a_time(world: World) -> None:
    first, second = await beside(world, "allow", mode="persistent")
    assert (await admitted(world, second)).action == "wait"  # the task's run lock is held
    turns = [{"role": "user", "content": "q"}, {"role": "assistant", "content": "a"}]
    await world.store.record([Outcome(first, "succeeded", output="a", turns=turns)])
    decision = await admitted(world, second)
    assert decision.action == "run" and decision.task is not None
    assert decision.task.id == first.task_id
    assert [turn["content"] for turn in decision.task.conversation] == ["q", "a"]
    assert (await world.schedule_row(first.schedule_id)).task_id == first.task_id
    task = await world.task(decision.task.id)
    assert task is not None and task["lock_run_id"] == second.id


# -- record -------------------------------------------------------------------------------------


async def test_a_record_ends_runs_and_follows_the_streak_in_order(world: World) -> None:
    streak = await world.schedule(consecutive_failures=5, next_run=None)
    reset = await world.schedule(consecutive_failures=5, next_run=None)
    of = {id: [await world.queued(id) for _ in range(3)] for id in (streak, reset)}
    claim = await world.store.claim_due_jobs(NOW)
    await world.store.admit(claim.runs)
    runs = {run.id: run for run in claim.runs}
    s, r = [runs[run.id] for run in of[streak]], [runs[run.id] for run in of[reset]]
    outcomes = [
        Outcome(s[0], "failed", error="e1"),
        Outcome(s[1], "timed_out", error="e2"),
        Outcome(r[0], "failed", error="x1"),
        Outcome(r[1], "succeeded", output="fine"),
        Outcome(r[2], "failed", error="x3"),
    ]
    recorded = await world.store.record(outcomes)
    assert recorded == [outcome.run for outcome in outcomes]
    assert [(run.status, run.finished_at, run.lease_owner) for run in recorded if run] == [
        (outcome.status, NOW, None) for outcome in outcomes
    ]
    first = await world.schedule_row(streak)
    assert (first.consecutive_failures, first.last_status, first.last_error) == (
        7,
        "timed_out",
        "e2",
    )
    assert (first.last_run_id, first.last_run_at) == (s[1].id, NOW)
    assert first.enabled  # no breaker: failures never pause
    second = await world.schedule_row(reset)
    assert (second.consecutive_failures, second.last_run_id) == (1, r[2].id)
    assert (await world.run(r[1].id)).output == "fine"
    assert (await world.run(s[2].id)).status == "running"  # left out: still running


async def test_a_record_skips_runs_not_ours_and_follows_only_what_it_wrote(world: World) -> None:
    run = await running(world)
    await world.set_run(run.id, lease_owner="replica-b")
    assert await world.store.record([Outcome(run, "succeeded", output="late")]) == [None]
    stored = await world.run(run.id)
    assert (stored.status, stored.output) == ("running", None)
    assert (await world.schedule_row(run.schedule_id)).last_status is None


async def test_a_record_keeps_the_tail_of_a_long_output(world: World) -> None:
    run = await running(world)
    await world.store.record([Outcome(run, "succeeded", output="x" * 100_000 + "END")])
    stored = await world.run(run.id)
    assert (stored.output or "").endswith("END") and len(stored.output or "") == 64 * 1024
    assert run.output == stored.output


async def test_a_retry_goes_back_to_pending_for_anyone_and_leaves_the_schedule(
    world: World,
) -> None:
    run = await running(world)
    later = NOW + timedelta(seconds=5)
    await world.store.record([Outcome(run, "pending", error="blip", retry_at=later)])
    stored = await world.run(run.id)
    assert (stored.status, stored.reason, stored.available_at) == ("pending", "retry", later)
    assert (stored.lease_owner, stored.finished_at, stored.error) == (None, None, "blip")
    assert (await world.schedule_row(run.schedule_id)).last_status is None


async def test_a_cancelled_attempt_says_why_it_stopped(world: World) -> None:
    asked = await running(world)
    deleted = await running(world)
    await world.set_run(asked.id, cancel_requested=True)
    await world.set_schedule(deleted.schedule_id, deleted_at=NOW)
    await world.store.record([Outcome(asked, "cancelled"), Outcome(deleted, "cancelled")])
    assert (asked.reason, asked.error) == ("cancel_requested", "cancelled on request")
    assert (deleted.reason, deleted.error) == ("schedule_deleted", "its schedule was deleted")


async def test_the_breaker_trips_from_the_schedule_row(world: World) -> None:
    run = await running(world, consecutive_failures=2, pause_after_failures=3, notify=WEBHOOK)
    await world.store.record([Outcome(run, "failed", error="boom")])
    schedule = await world.schedule_row(run.schedule_id)
    assert (schedule.enabled, schedule.next_run, schedule.paused_at) == (False, None, NOW)
    assert "after 3 failed runs in a row (pause_after_failures=3)" in (schedule.paused_note or "")
    assert run.reason == (await world.run(run.id)).reason == "circuit_breaker"
    assert run.deliver_until is not None  # the pause reaches every channel


async def test_a_runner_gone_pauses_its_schedule(world: World) -> None:
    run = await running(world)
    await world.store.record([Outcome(run, "failed", error="gone", pause_schedule=True)])
    schedule = await world.schedule_row(run.schedule_id)
    assert (schedule.enabled, schedule.next_run) == (False, None)
    assert schedule.paused_note == "paused by agentcron: gone"


async def test_a_delivery_lease_is_set_only_when_a_channel_applies(world: World) -> None:
    ok = await running(world, notify=WEBHOOK)
    bad = await running(world, notify=WEBHOOK)
    await world.store.record([Outcome(ok, "succeeded"), Outcome(bad, "failed", error="no")])
    assert (ok.deliver_until, ok.deliverer) == (UNTIL, OWNER)
    assert (bad.deliver_until, bad.deliverer) == (None, None)  # notify_on: succeeded only
    await world.store.deliveries.end([ok.id])
    assert (await world.run(ok.id)).deliver_until is None


async def test_deliveries_nobody_makes_are_taken_over(world: World) -> None:
    run = await running(world, notify=WEBHOOK)
    await world.store.record([Outcome(run, "succeeded")])
    await world.set_run(run.id, deliverer="replica-b", deliver_until=NOW - timedelta(seconds=1))
    taken = await world.store.deliveries.take_over(NOW, 10)
    assert [taken_run.id for taken_run, _ in taken] == [run.id]
    assert (await world.run(run.id)).deliverer == OWNER
    assert await world.store.deliveries.take_over(NOW, 10) == []


# -- release and renew -------------------------------------------------------------------------


async def test_a_release_gives_back_what_did_not_start_unless_told(world: World) -> None:
    run = await running(world)
    queued = await claimed(world, await world.schedule(overlap="skip"))
    await world.store.release([run.id, queued.id])
    assert (await world.run(run.id)).status == "running"  # started: kept
    back = await world.run(queued.id)
    assert (back.status, back.reason, back.lease_owner) == ("pending", "released", None)
    await world.store.release([run.id], started=True)
    stopped = await world.run(run.id)
    assert (stopped.status, stopped.lease_owner, stopped.available_at) == ("pending", None, NOW)


async def test_a_renewal_extends_our_leases_and_says_which_must_stop(world: World) -> None:
    run = await running(world)
    other = await running(world)
    await world.set_run(other.id, lease_owner="replica-b")
    assert await world.store.renew_leases(NOW + timedelta(seconds=5)) == {run.id: False}
    assert (await world.run(run.id)).lease_expires_at == UNTIL + timedelta(seconds=5)
    await world.set_schedule(run.schedule_id, deleted_at=NOW)
    assert await world.store.renew_leases(NOW, [run.id]) == {run.id: True}


# -- queued runs --------------------------------------------------------------------------------


async def test_a_queue_runs_one_at_a_time_oldest_first(world: World) -> None:
    schedule_id = await world.schedule(next_run=None)
    never = NOW + timedelta(days=365 * 900)
    head = await world.queued(schedule_id, origin="backfill", trigger="schedule", due_at=T0)
    waiting = await world.queued(
        schedule_id,
        origin="backfill",
        trigger="schedule",
        due_at=T0 + timedelta(hours=1),
        reason="queued",
        available_at=never,
    )
    (run,) = (await world.store.claim_due_jobs(NOW)).runs
    assert run.id == head.id
    await admitted(world, run)
    await world.store.record([Outcome(run, "succeeded")])
    promoted = await world.run(waiting.id)
    assert (promoted.reason, promoted.available_at) == (None, NOW)
