"""``plan_due_times``: which due times of a due schedule get a run at claim time (contract 4)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from agentcron.core import triggers
from agentcron.core.planning import MAX_DUE_PER_CLAIM, plan_due_times
from agentcron.core.storage.models import Schedule
from agentcron.core.timeline import COUNT_CAP, MAX_ROWS

T0 = datetime(2025, 1, 6, 0, 0, tzinfo=UTC)
S = timedelta(seconds=1)


def interval(every: int, start: datetime = T0) -> dict[str, Any]:
    return triggers.trigger_to_dict(triggers.IntervalTrigger(every_seconds=every, start_at=start))


def schedule(
    trigger: dict[str, Any],
    next_run: datetime | None,
    *,
    grace: int = 60,
    catchup: str = "skip",
    window: int = 3600,
) -> Schedule:
    return Schedule(
        trigger=trigger,
        next_run=next_run,
        misfire_grace_seconds=grace,
        catchup=catchup,
        catchup_window_seconds=window,
    )


H = 3600  # seconds
ONE_SHOT = triggers.trigger_to_dict(triggers.OneShotTrigger(at=T0 + H * S))
SHANGHAI_9AM = {"cron": "0 9 * * *", "timezone": "Asia/Shanghai"}  # 01:00 UTC: T0 + 1 h


# Every instant is in seconds after T0.
@pytest.mark.parametrize(
    ("trigger", "next_run", "now", "options", "run_at", "gap", "after"),
    [
        # Lateness is judged at claim time: a due time inside the misfire grace runs ...
        (interval(60), 60, 90, {}, [60], None, 120),
        # ... each one inside it gets its own run ...
        (interval(10), 10, 35, {}, [10, 20, 30], None, 40),
        # ... older ones are missed, never merged into a later run (catch-up ``skip``) ...
        (interval(60), 60, 181, {}, [180], "missed", 240),
        (interval(H), H, H + 120, {}, [], "missed", 2 * H),
        # ... and a grace of zero runs only an exactly due time.
        (interval(60), 60, 60, {"grace": 0}, [60], None, 120),
        (interval(60), 60, 60.000001, {"grace": 0}, [], "missed", 120),
        # Catch-up ``latest`` runs only the most recent missed due time, inside its window ...
        (interval(H), H, 3 * H + 120, {"catchup": "latest"}, [3 * H], "coalesced", 4 * H),
        (interval(H), H, 3 * H + 120, {"catchup": "latest", "window": 100}, [], "missed", 4 * H),
        # ... and nothing when a due time is on time.
        (interval(60), 60, 181, {"catchup": "latest"}, [180], "coalesced", 240),
        # A one-shot fires once, or is missed, and is never due again.
        (ONE_SHOT, H, H + 5, {}, [H], None, None),
        (ONE_SHOT, H, 3 * H, {}, [], "missed", None),
        # A cron in a zone advances in UTC.
        (SHANGHAI_9AM, H, H + 30, {}, [H], None, 25 * H),
    ],
    ids=[
        "inside-misfire-grace",
        "each-inside-grace",
        "older-missed-with-catchup-skip",
        "all-missed",
        "grace-zero-exactly-due",
        "grace-zero-late",
        "catchup-latest-runs-the-most-recent",
        "catchup-latest-outside-its-window",
        "catchup-latest-with-one-on-time",
        "one-shot-fires-once",
        "one-shot-missed",
        "cron-in-a-zone",
    ],
)
def test_a_claim_runs_the_due_times_its_lateness_allows(
    trigger: dict[str, Any],
    next_run: int,
    now: float,
    options: dict[str, Any],
    run_at: list[int],
    gap: str | None,
    after: int | None,
) -> None:
    s = schedule(trigger, T0 + next_run * S, **options)
    plan = plan_due_times(s, T0 + timedelta(seconds=now))
    expected_after = None if after is None else T0 + after * S
    assert (plan.run_at, plan.next_run) == ([T0 + t * S for t in run_at], expected_after)
    # The due times that did not run are a gap: missed (and counted), or coalesced.
    assert (plan.gap_reason if plan.gap else None) == gap
    assert bool(plan.missed) or gap != "missed"
    assert plan.next_run is None or plan.next_run.utcoffset() == timedelta(0)
    assert plan.dst_rules == {}  # ordinary due times: no DST rule decided any of them
    assert s.next_run == T0 + next_run * S  # a pure function: the schedule is untouched
    assert plan_due_times(s, T0 + timedelta(seconds=now)) == plan


def test_year_long_gap_with_catchup_skip_is_bounded(fire_calls: list[datetime]) -> None:
    now = T0 + timedelta(days=365)
    plan = plan_due_times(schedule(interval(1), T0 + S), now)
    # Only the due times inside the 60 s grace run; the year before them is jumped over.
    assert plan.run_at == [now - k * S for k in range(60, -1, -1)]
    assert plan.missed >= 1
    assert plan.next_run == now + S
    # The gap is accounted for in bounded rows: the first MAX_ROWS due times, then one summary
    # that stops counting at COUNT_CAP and ends at the last due time before the grace boundary.
    assert plan.gap_reason == "missed"
    assert plan.gap.times == [T0 + k * S for k in range(1, MAX_ROWS + 1)]
    assert plan.gap.rest_first == T0 + (MAX_ROWS + 1) * S
    assert plan.gap.rest_count is None
    assert plan.gap.rest_last == now - 61 * S
    assert len(fire_calls) <= 61 + 5 + MAX_ROWS + COUNT_CAP + 40


@pytest.mark.parametrize("window", [3600, 31_536_000])
def test_year_long_gap_with_catchup_latest_is_bounded(
    fire_calls: list[datetime], window: int
) -> None:
    # No on-time due time (grace 0, now between two grid points): only the latest missed one
    # runs, found without walking through the catch-up window one second at a time.
    now = T0 + timedelta(days=365, milliseconds=500)
    s = schedule(interval(1), T0 + S, grace=0, catchup="latest", window=window)
    plan = plan_due_times(s, now)
    assert plan.run_at == [T0 + timedelta(days=365)]
    assert plan.next_run == T0 + timedelta(days=365, seconds=1)
    assert plan.gap_reason == "coalesced"
    assert plan.gap.rest_last == T0 + timedelta(days=365) - S  # up to the run, not past it
    assert len(fire_calls) <= 100 + MAX_ROWS + COUNT_CAP + 40


def test_cap_per_claim_leaves_the_rest_due() -> None:
    now = T0 + timedelta(hours=1)
    s = schedule(interval(1), now - 250 * S, grace=300)
    seen: list[datetime] = []
    for _ in range(10):
        plan = plan_due_times(s, now)
        assert len(plan.run_at) <= MAX_DUE_PER_CLAIM
        seen.extend(plan.run_at)
        s.next_run = plan.next_run
        assert s.next_run is not None
        if s.next_run > now:
            break
        # Capped: the next claim at the same instant finds the rest still due.
        assert len(plan.run_at) == MAX_DUE_PER_CLAIM
    assert seen == [now - k * S for k in range(250, -1, -1)]
    assert s.next_run == now + S


@pytest.mark.parametrize(
    ("window_hours", "expected"),
    [(96, [datetime(2025, 1, 10, 9, 0, tzinfo=UTC)]), (24, [])],
)
def test_catchup_latest_over_a_weekend_on_a_weekday_cron(
    fire_calls: list[datetime], window_hours: int, expected: list[datetime]
) -> None:
    # Weekdays at 09:00 UTC; the engine was down from Thursday evening to Monday 08:00. The
    # latest missed due time is Friday 09:00 (71 h old): it runs if the window reaches it.
    cron = {"cron": "0 9 * * 1-5", "timezone": "UTC"}
    friday = datetime(2025, 1, 10, 9, 0, tzinfo=UTC)  # the next_run nobody claimed
    s = schedule(cron, friday, catchup="latest", window=window_hours * 3600)
    plan = plan_due_times(s, datetime(2025, 1, 13, 8, 0, tzinfo=UTC))
    assert plan.run_at == expected
    assert plan.next_run == datetime(2025, 1, 13, 9, 0, tzinfo=UTC)
    assert len(fire_calls) <= 40 + MAX_ROWS


def test_a_short_gap_is_one_row_per_due_time_and_a_counted_one_says_how_many() -> None:
    short = plan_due_times(schedule(interval(60), T0 + 60 * S), T0 + 300 * S)
    # Due at 60..300 s; grace 60 s: 240 and 300 run, 60..180 were missed.
    assert short.run_at == [T0 + 240 * S, T0 + 300 * S]
    assert short.gap.times == [T0 + 60 * S, T0 + 120 * S, T0 + 180 * S]
    assert short.gap.rest_first is None

    spaced = MAX_ROWS + 15  # missed due times, within the count cap
    plan = plan_due_times(schedule(interval(60), T0 + 60 * S), T0 + (spaced + 2) * 60 * S)
    assert len(plan.gap.times) == MAX_ROWS
    assert plan.gap.rest_count == 15
    assert plan.gap.rest_first == T0 + (MAX_ROWS + 1) * 60 * S
    assert plan.gap.rest_last == T0 + spaced * 60 * S


def cron(expression: str, zone: str, **policy: str) -> dict[str, Any]:
    return triggers.trigger_to_dict(triggers.CronTrigger(expression, zone, **policy))


def test_plan_names_the_dst_rule_of_each_due_time() -> None:
    # New York, 2025-03-09: 02:30 does not occur; the fixed-time job runs at 03:00 EDT (07:00Z),
    # and the day after at 02:30 EDT again.
    gap = schedule(cron("30 2 * * *", "America/New_York"), datetime(2025, 3, 9, 7, tzinfo=UTC))
    plan = plan_due_times(gap, datetime(2025, 3, 9, 7, 0, 5, tzinfo=UTC))
    assert plan.run_at == [datetime(2025, 3, 9, 7, tzinfo=UTC)]
    assert plan.dst_rules == {datetime(2025, 3, 9, 7, tzinfo=UTC): "gap_shift"}
    assert plan.next_run == datetime(2025, 3, 10, 6, 30, tzinfo=UTC)
    # 2025-11-02: 01:30 occurs at 05:30Z and 06:30Z; claimed late, both are on time together.
    both = cron("30 1 * * *", "America/New_York", dst_repeat="both")
    first, second = (
        datetime(2025, 11, 2, 5, 30, tzinfo=UTC),
        datetime(2025, 11, 2, 6, 30, tzinfo=UTC),
    )
    plan = plan_due_times(schedule(both, first, grace=7200), second + S)
    assert plan.run_at == [first, second]
    assert plan.dst_rules == {first: "repeat_both", second: "repeat_both"}
