"""``schedule_warnings`` (issue 8, part 5): what a schedule is told at create and update.

Dates are derived from the tzdata transitions (America/New_York springs forward on the second
Sunday of March at 02:00 and falls back on the first Sunday of November at 02:00; Lord Howe
springs from 02:00 to 02:30 on the first Sunday of October), not from the implementation.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

import pytest

from agentcron.core.triggers import CronTrigger, IntervalTrigger, OneShotTrigger, Trigger
from agentcron.core.triggers.transitions import transitions
from agentcron.core.triggers.warnings import schedule_warnings

NOW = datetime(2025, 6, 1, tzinfo=UTC)
NY = "America/New_York"


def warn(
    trigger: Trigger, overlap: str = "allow", timeout: int = 60, now: datetime = NOW
) -> list[dict[str, str]]:
    return schedule_warnings(trigger, overlap=overlap, timeout_seconds=timeout, now=now)


@pytest.mark.parametrize(
    ("trigger", "message"),
    [
        (
            CronTrigger("30 2 * * *", NY),
            (
                "02:30 does not occur in America/New_York on 2026-03-08 and 2027-03-14 (clocks go "
                "forward from 02:00 to 03:00): it runs at 03:00 instead "
                "(dst_gap: shift, the default)"
            ),
        ),
        (
            CronTrigger("30 2 * * *", NY, dst_gap="skip"),
            (
                "02:30 does not occur in America/New_York on 2026-03-08 and 2027-03-14 (clocks go "
                "forward from 02:00 to 03:00): it does not run that day (dst_gap: skip)"
            ),
        ),
        (
            CronTrigger("*/20 2 * * *", NY),
            (
                "02:00, 02:20 and 02:40 do not occur in America/New_York on 2026-03-08 and "
                "2027-03-14 (clocks go forward from 02:00 to 03:00): they do not run that day "
                "(dst_gap: skip, the default)"
            ),
        ),
        (
            CronTrigger("*/5 2 * * *", NY, dst_gap="shift"),
            (
                "12 times from 02:00 to 02:55 do not occur in America/New_York on 2026-03-08 and "
                "2027-03-14 (clocks go forward from 02:00 to 03:00): they run once at 03:00 "
                "instead (dst_gap: shift)"
            ),
        ),
        (
            CronTrigger("15 2 * * *", "Australia/Lord_Howe"),
            (
                "02:15 does not occur in Australia/Lord_Howe on 2025-10-05 and 2026-10-04 (clocks "
                "go forward from 02:00 to 02:30): it runs at 02:30 instead (dst_gap: shift, the "
                "default)"
            ),
        ),
    ],
)
def test_gap_warning_names_the_dates_and_the_outcome(trigger: CronTrigger, message: str) -> None:
    assert warn(trigger) == [{"code": "dst_gap", "message": message, "field": "trigger.dst_gap"}]


@pytest.mark.parametrize(
    ("policy", "outcome"),
    [
        (None, "it runs once, in the first pass (dst_repeat: first, the default)"),
        ("first", "it runs once, in the first pass (dst_repeat: first)"),
        ("last", "it runs once, in the second pass (dst_repeat: last)"),
        ("both", "it runs twice, once in each pass (dst_repeat: both)"),
    ],
)
def test_repeat_warning_names_the_dates_and_the_outcome(policy: str | None, outcome: str) -> None:
    assert warn(CronTrigger("30 1 * * *", NY, dst_repeat=policy)) == [
        {
            "code": "dst_repeat",
            "message": "01:30 occurs twice in America/New_York on 2025-11-02 and 2026-11-01 "
            f"(clocks go back from 02:00 to 01:00): {outcome}",
            "field": "trigger.dst_repeat",
        }
    ]


def test_a_schedule_can_meet_both_and_only_dates_it_matches_count() -> None:
    both = warn(CronTrigger("0,30 1,2 * * 0", NY))
    assert [item["code"] for item in both] == ["dst_gap", "dst_repeat"]
    # Only on Mondays: the clocks change on Sundays, so nothing to say.
    assert warn(CronTrigger("30 1,2 * * 1", NY)) == []
    # Days 1, 8, 15, 22 and 29 of March and November that are Sundays (AND: the day of month
    # starts with *), which include 2026-03-08 and 2026-11-01: everything, in order.
    trigger = CronTrigger("*/30 1,2 */7 3,11 0", NY)
    assert [item["code"] for item in warn(trigger, overlap="skip", timeout=3600)] == [
        "dst_gap",
        "dst_repeat",
        "overlap_skips",
        "rare_day",
    ]


@pytest.mark.parametrize(
    ("trigger", "timeout"),
    [
        (CronTrigger("30 9 * * *", NY), 60),  # never near a change
        (CronTrigger("30 2 * * *"), 60),  # UTC has no DST
        (CronTrigger("30 2 * * *", "Asia/Shanghai"), 60),
        (CronTrigger("*/15 * * * *", NY), 60),  # every hour of the day: an hour less is expected
        (CronTrigger("@hourly", NY), 60),
        (CronTrigger("0 0 1 * *"), 60),
        (CronTrigger("@yearly"), 60),
        (CronTrigger("0 0 29-31 * *"), 60),  # skips February 3 years in 4, but fires 35 days a year
        (CronTrigger("0 0 13 * 5"), 60),  # OR: every Friday too
        # A timeout within the spacing of the due times, even under skip.
        (IntervalTrigger(60, NOW), 60),  # as long as the interval: not longer
        (CronTrigger("0 9,10 * * *"), 3600),
        (CronTrigger("0 9 * * 1-5", "Asia/Shanghai"), 3600),
        (OneShotTrigger(NOW + timedelta(days=1)), 86_400),
    ],
)
def test_nothing_to_say(trigger: Trigger, timeout: int) -> None:
    for overlap in ("allow", "skip"):
        assert warn(trigger, overlap=overlap, timeout=timeout) == []


@pytest.mark.parametrize(
    ("trigger", "timeout", "spacing"),
    [
        (IntervalTrigger(60, NOW), 61, "1 minute"),
        (IntervalTrigger(90, NOW), 3600, "90 seconds"),
        (CronTrigger("*/15 * * * *"), 3600, "15 minutes"),
        # Irregular: 1 hour between 09:00 and 10:00, 23 hours overnight; the shortest counts.
        (CronTrigger("0 9,10 * * *"), 3601, "1 hour"),
    ],
)
def test_timeout_longer_than_the_spacing_under_skip(
    trigger: Trigger, timeout: int, spacing: str
) -> None:
    (item,) = warn(trigger, overlap="skip", timeout=timeout)
    assert item["code"] == "overlap_skips" and item["field"] == "timeout_seconds"
    assert f"the {spacing} between due times" in item["message"]
    # Only under skip: the other overlap policies do not drop due times.
    for overlap in ("allow", "buffer_one", "cancel_other"):
        assert warn(trigger, overlap=overlap, timeout=timeout) == []


@pytest.mark.parametrize(
    ("cron", "message"),
    [
        (
            "0 0 31 * *",
            (
                "'0 0 31 * *' fires on 7 days a year: day 31 does not occur in February, April, "
                "June, September or November (next: 2025-07-31)"
            ),
        ),
        (
            "0 0 30 * *",
            (
                "'0 0 30 * *' fires on 11 days a year: day 30 does not occur in February "
                "(next: 2025-06-30)"
            ),
        ),
        (
            "0 0 29 2 *",
            (
                "'0 0 29 2 *' fires about once every 4 years: February 29 occurs only in leap "
                "years (next: 2028-02-29)"
            ),
        ),
        (
            # AND (the day of month starts with *): the 1st of a month that is a Monday.
            "0 0 */31 * 1",
            (
                "'0 0 */31 * 1' fires on about 2 days a year: it runs only when day 1 falls on "
                "Monday (next: 2025-09-01)"
            ),
        ),
    ],
)
def test_rare_days(cron: str, message: str) -> None:
    assert warn(CronTrigger(cron)) == [
        {"code": "rare_day", "message": message, "field": "trigger.cron"}
    ]


def test_transitions_are_found_to_the_second() -> None:
    found = transitions(ZoneInfo(NY), NOW, NOW + timedelta(days=366))
    assert [(t.at, t.wall_before.isoformat(), t.wall_after.isoformat()) for t in found] == [
        (datetime(2025, 11, 2, 6, tzinfo=UTC), "2025-11-02T02:00:00", "2025-11-02T01:00:00"),
        (datetime(2026, 3, 8, 7, tzinfo=UTC), "2026-03-08T02:00:00", "2026-03-08T03:00:00"),
    ]
    assert transitions(ZoneInfo("Asia/Kolkata"), NOW, NOW + timedelta(days=366)) == []


def test_warnings_are_cheap(fire_calls: list[datetime]) -> None:
    """A create pays for its warnings: the worst shapes search few due times (a count, not a
    wall-clock bound, which a shared machine would make flaky)."""
    for trigger in (
        CronTrigger("*/5 1,2 31 * *", "Africa/Casablanca"),
        CronTrigger("0 9 * * 1-5", NY),
        CronTrigger("0 0 */31 2 */3", NY),
    ):
        fire_calls.clear()
        warn(trigger, overlap="skip", timeout=86_400 * 7)
        assert len(fire_calls) <= 100, (trigger, len(fire_calls))
