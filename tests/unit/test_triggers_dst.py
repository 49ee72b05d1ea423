"""DST rules of cron triggers (docs/design.md, promise 2) as a named table.

Expectations are local wall-clock strings with offsets, because aware datetimes that are equal
in UTC can differ locally. Every expectation was derived from the rules and the tzdata
transitions (listed per zone below, as printed by zoneinfo), not from the implementation:

* America/New_York   2025-03-09 02:00 -05 -> 03:00 -04 (gap 02:00-03:00)
                     2025-11-02 02:00 -04 -> 01:00 -05 (01:00-02:00 twice)
* Europe/London      2025-03-30 01:00 +00 -> 02:00 +01; 2025-10-26 02:00 +01 -> 01:00 +00
* Australia/Sydney   2025-04-06 03:00 +11 -> 02:00 +10; 2025-10-05 02:00 +10 -> 03:00 +11
* Australia/Lord_Howe 2025-04-06 02:00 +11 -> 01:30 +10:30; 2025-10-05 02:00 +10:30 -> 02:30 +11
* Pacific/Chatham    2025-04-06 03:45 +13:45 -> 02:45 +12:45;
                     2025-09-28 02:45 +12:45 -> 03:45 +13:45
* America/Havana     2025-03-09 00:00 -05 -> 01:00 -04; 2025-11-02 01:00 -04 -> 00:00 -05
* America/Santiago   2025-04-06 00:00 -03 -> 2025-04-05 23:00 -04; 2025-09-07 00:00 -04 -> 01:00 -03
* Africa/Casablanca  2025-02-23 03:00 +01 -> 02:00 +00 (Ramadan); 2025-04-06 02:00 +00 -> 03:00 +01
* Antarctica/Troll   2025-03-30 01:00 +00 -> 03:00 +02; 2025-10-26 03:00 +02 -> 01:00 +00 (2 h)

A brute-force oracle at the end re-derives the fire set minute by minute around each of these
transitions and checks ``next_fire`` from many starting points against it.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

import pytest

from agentcron.core.triggers import CronTrigger, in_zone, next_fire, preview
from agentcron.core.triggers.cron import parse_cron

# (id, cron, zone, after, expected local fire times)
CASES: list[tuple[str, str, str, str, list[str]]] = [
    # ---- America/New_York ----
    (
        "fixed_gap_new_york",
        "30 2 * * *",
        "America/New_York",
        "2025-03-08T12:00:00-05:00",
        ["2025-03-09T03:00:00-04:00", "2025-03-10T02:30:00-04:00"],
    ),
    (
        "fixed_gap_collapse_new_york",
        "0,30 2 * * *",
        "America/New_York",
        "2025-03-08T12:00:00-05:00",
        ["2025-03-09T03:00:00-04:00", "2025-03-10T02:00:00-04:00", "2025-03-10T02:30:00-04:00"],
    ),
    (
        # 02:00 and 02:30 land on 03:00, which the expression also lists: one fire, not two.
        "fixed_gap_set_new_york",
        "0,30 2,3 * * *",
        "America/New_York",
        "2025-03-08T12:00:00-05:00",
        ["2025-03-09T03:00:00-04:00", "2025-03-09T03:30:00-04:00", "2025-03-10T02:00:00-04:00"],
    ),
    (
        "wildcard_gap_new_york",
        "*/30 * * * *",
        "America/New_York",
        "2025-03-09T01:00:00-05:00",
        ["2025-03-09T01:30:00-05:00", "2025-03-09T03:00:00-04:00", "2025-03-09T03:30:00-04:00"],
    ),
    (
        "wildcard_hour_step_gap_new_york",
        "0 */2 * * *",
        "America/New_York",
        "2025-03-09T00:30:00-05:00",
        ["2025-03-09T04:00:00-04:00", "2025-03-09T06:00:00-04:00"],
    ),
    (
        "fixed_hour_step_gap_new_york",
        "0 0-23/2 * * *",
        "America/New_York",
        "2025-03-09T00:30:00-05:00",
        ["2025-03-09T03:00:00-04:00", "2025-03-09T04:00:00-04:00", "2025-03-09T06:00:00-04:00"],
    ),
    (
        # croniter alone fires this twice.
        "fixed_fold_new_york",
        "30 1 * * *",
        "America/New_York",
        "2025-11-01T12:00:00-04:00",
        ["2025-11-02T01:30:00-04:00", "2025-11-03T01:30:00-05:00", "2025-11-04T01:30:00-05:00"],
    ),
    (
        "wildcard_fold_new_york",
        "*/30 * * * *",
        "America/New_York",
        "2025-11-02T00:40:00-04:00",
        [
            "2025-11-02T01:00:00-04:00",
            "2025-11-02T01:30:00-04:00",
            "2025-11-02T01:00:00-05:00",
            "2025-11-02T01:30:00-05:00",
            "2025-11-02T02:00:00-05:00",
        ],
    ),
    (
        "wildcard_minute_step_fold_new_york",
        "*/20 1 * * *",
        "America/New_York",
        "2025-11-02T00:00:00-04:00",
        [
            "2025-11-02T01:00:00-04:00",
            "2025-11-02T01:20:00-04:00",
            "2025-11-02T01:40:00-04:00",
            "2025-11-02T01:00:00-05:00",
            "2025-11-02T01:20:00-05:00",
            "2025-11-02T01:40:00-05:00",
            "2025-11-03T01:00:00-05:00",
        ],
    ),
    (
        "fixed_minute_step_fold_new_york",
        "0-59/20 1 * * *",
        "America/New_York",
        "2025-11-02T00:00:00-04:00",
        [
            "2025-11-02T01:00:00-04:00",
            "2025-11-02T01:20:00-04:00",
            "2025-11-02T01:40:00-04:00",
            "2025-11-03T01:00:00-05:00",
        ],
    ),
    (
        "second_pass_fixed_new_york",
        "30 1 * * *",
        "America/New_York",
        "2025-11-02T01:10:00-05:00",
        ["2025-11-03T01:30:00-05:00"],
    ),
    (
        "second_pass_wildcard_new_york",
        "*/30 * * * *",
        "America/New_York",
        "2025-11-02T01:10:00-05:00",
        ["2025-11-02T01:30:00-05:00", "2025-11-02T02:00:00-05:00"],
    ),
    # ---- Europe/London ----
    (
        "fixed_gap_london",
        "30 1 * * *",
        "Europe/London",
        "2025-03-29T12:00:00+00:00",
        ["2025-03-30T02:00:00+01:00", "2025-03-31T01:30:00+01:00"],
    ),
    (
        "wildcard_gap_london",
        "15 * * * *",
        "Europe/London",
        "2025-03-30T00:30:00+00:00",
        ["2025-03-30T02:15:00+01:00", "2025-03-30T03:15:00+01:00"],
    ),
    (
        "fixed_fold_london",
        "30 1 * * *",
        "Europe/London",
        "2025-10-25T12:00:00+01:00",
        ["2025-10-26T01:30:00+01:00", "2025-10-27T01:30:00+00:00"],
    ),
    (
        "wildcard_fold_london",
        "30 * * * *",
        "Europe/London",
        "2025-10-26T00:45:00+01:00",
        ["2025-10-26T01:30:00+01:00", "2025-10-26T01:30:00+00:00", "2025-10-26T02:30:00+00:00"],
    ),
    (
        "fixed_step_fold_london",
        "0-59/30 1 * * *",
        "Europe/London",
        "2025-10-26T00:45:00+01:00",
        ["2025-10-26T01:00:00+01:00", "2025-10-26T01:30:00+01:00", "2025-10-27T01:00:00+00:00"],
    ),
    # ---- Australia/Sydney (southern hemisphere: autumn in April) ----
    (
        "fixed_fold_sydney",
        "30 2 * * *",
        "Australia/Sydney",
        "2025-04-05T12:00:00+11:00",
        ["2025-04-06T02:30:00+11:00", "2025-04-07T02:30:00+10:00"],
    ),
    (
        "wildcard_fold_sydney",
        "*/30 2 * * *",
        "Australia/Sydney",
        "2025-04-06T01:45:00+11:00",
        [
            "2025-04-06T02:00:00+11:00",
            "2025-04-06T02:30:00+11:00",
            "2025-04-06T02:00:00+10:00",
            "2025-04-06T02:30:00+10:00",
            "2025-04-07T02:00:00+10:00",
        ],
    ),
    (
        "wildcard_hour_step_fold_sydney",
        "0 */2 * * *",
        "Australia/Sydney",
        "2025-04-06T00:30:00+11:00",
        ["2025-04-06T02:00:00+11:00", "2025-04-06T02:00:00+10:00", "2025-04-06T04:00:00+10:00"],
    ),
    (
        "fixed_hour_step_fold_sydney",
        "0 0-23/2 * * *",
        "Australia/Sydney",
        "2025-04-06T00:30:00+11:00",
        ["2025-04-06T02:00:00+11:00", "2025-04-06T04:00:00+10:00"],
    ),
    (
        "fixed_gap_sydney",
        "30 2 * * *",
        "Australia/Sydney",
        "2025-10-04T12:00:00+10:00",
        ["2025-10-05T03:00:00+11:00", "2025-10-06T02:30:00+11:00"],
    ),
    (
        "wildcard_gap_sydney",
        "0 * * * *",
        "Australia/Sydney",
        "2025-10-05T01:30:00+10:00",
        ["2025-10-05T03:00:00+11:00", "2025-10-05T04:00:00+11:00"],
    ),
    # ---- Australia/Lord_Howe (30-minute shift) ----
    (
        "fixed_gap_lord_howe",
        "15 2 * * *",
        "Australia/Lord_Howe",
        "2025-10-04T12:00:00+10:30",
        ["2025-10-05T02:30:00+11:00", "2025-10-06T02:15:00+11:00"],
    ),
    (
        # 02:00 and 02:15 are skipped and land on 02:30, which is also listed: one fire.
        "fixed_gap_collapse_lord_howe",
        "0,15,30 2 * * *",
        "Australia/Lord_Howe",
        "2025-10-04T12:00:00+10:30",
        ["2025-10-05T02:30:00+11:00", "2025-10-06T02:00:00+11:00", "2025-10-06T02:15:00+11:00"],
    ),
    (
        "wildcard_gap_lord_howe",
        "*/15 * * * *",
        "Australia/Lord_Howe",
        "2025-10-05T01:40:00+10:30",
        ["2025-10-05T01:45:00+10:30", "2025-10-05T02:30:00+11:00", "2025-10-05T02:45:00+11:00"],
    ),
    (
        "fixed_fold_lord_howe",
        "45 1 * * *",
        "Australia/Lord_Howe",
        "2025-04-05T12:00:00+11:00",
        ["2025-04-06T01:45:00+11:00", "2025-04-07T01:45:00+10:30"],
    ),
    (
        "wildcard_fold_lord_howe",
        "*/15 * * * *",
        "Australia/Lord_Howe",
        "2025-04-06T01:20:00+11:00",
        [
            "2025-04-06T01:30:00+11:00",
            "2025-04-06T01:45:00+11:00",
            "2025-04-06T01:30:00+10:30",
            "2025-04-06T01:45:00+10:30",
            "2025-04-06T02:00:00+10:30",
        ],
    ),
    # ---- Pacific/Chatham (+12:45 / +13:45, transitions at 02:45 / 03:45) ----
    (
        "fixed_gap_chatham",
        "0 3 * * *",
        "Pacific/Chatham",
        "2025-09-27T12:00:00+12:45",
        ["2025-09-28T03:45:00+13:45", "2025-09-29T03:00:00+13:45"],
    ),
    (
        "fixed_gap_collapse_chatham",
        "0,30 3 * * *",
        "Pacific/Chatham",
        "2025-09-27T12:00:00+12:45",
        ["2025-09-28T03:45:00+13:45", "2025-09-29T03:00:00+13:45", "2025-09-29T03:30:00+13:45"],
    ),
    (
        "wildcard_gap_chatham",
        "*/30 * * * *",
        "Pacific/Chatham",
        "2025-09-28T02:20:00+12:45",
        ["2025-09-28T02:30:00+12:45", "2025-09-28T04:00:00+13:45"],
    ),
    (
        "fixed_fold_chatham",
        "0 3 * * *",
        "Pacific/Chatham",
        "2025-04-05T12:00:00+13:45",
        ["2025-04-06T03:00:00+13:45", "2025-04-07T03:00:00+12:45"],
    ),
    (
        "wildcard_fold_chatham",
        "0 * * * *",
        "Pacific/Chatham",
        "2025-04-06T02:30:00+13:45",
        ["2025-04-06T03:00:00+13:45", "2025-04-06T03:00:00+12:45", "2025-04-06T04:00:00+12:45"],
    ),
    # ---- America/Havana (transitions at midnight) ----
    (
        "fixed_gap_havana",
        "30 0 * * *",
        "America/Havana",
        "2025-03-08T12:00:00-05:00",
        ["2025-03-09T01:00:00-04:00", "2025-03-10T00:30:00-04:00"],
    ),
    (
        "fixed_midnight_gap_havana",
        "@midnight",
        "America/Havana",
        "2025-03-08T12:00:00-05:00",
        ["2025-03-09T01:00:00-04:00", "2025-03-10T00:00:00-04:00"],
    ),
    (
        "wildcard_gap_havana",
        "*/30 * * * *",
        "America/Havana",
        "2025-03-08T23:10:00-05:00",
        ["2025-03-08T23:30:00-05:00", "2025-03-09T01:00:00-04:00", "2025-03-09T01:30:00-04:00"],
    ),
    (
        "fixed_fold_havana",
        "30 0 * * *",
        "America/Havana",
        "2025-11-01T12:00:00-04:00",
        ["2025-11-02T00:30:00-04:00", "2025-11-03T00:30:00-05:00"],
    ),
    (
        "wildcard_hour_step_fold_havana",
        "0 */2 * * *",
        "America/Havana",
        "2025-11-01T23:30:00-04:00",
        ["2025-11-02T00:00:00-04:00", "2025-11-02T00:00:00-05:00", "2025-11-02T02:00:00-05:00"],
    ),
    (
        "fixed_hour_step_fold_havana",
        "0 0-23/2 * * *",
        "America/Havana",
        "2025-11-01T23:30:00-04:00",
        ["2025-11-02T00:00:00-04:00", "2025-11-02T02:00:00-05:00"],
    ),
    # ---- America/Santiago (gap at midnight, fold at 23:00) ----
    (
        "fixed_gap_santiago",
        "30 0 * * *",
        "America/Santiago",
        "2025-09-06T12:00:00-04:00",
        ["2025-09-07T01:00:00-03:00", "2025-09-08T00:30:00-03:00"],
    ),
    (
        "wildcard_gap_santiago",
        "*/30 * * * *",
        "America/Santiago",
        "2025-09-06T23:10:00-04:00",
        ["2025-09-06T23:30:00-04:00", "2025-09-07T01:00:00-03:00"],
    ),
    (
        "fixed_fold_santiago",
        "30 23 * * *",
        "America/Santiago",
        "2025-04-05T12:00:00-03:00",
        ["2025-04-05T23:30:00-03:00", "2025-04-06T23:30:00-04:00"],
    ),
    (
        "wildcard_fold_santiago",
        "30 * * * *",
        "America/Santiago",
        "2025-04-05T22:45:00-03:00",
        ["2025-04-05T23:30:00-03:00", "2025-04-05T23:30:00-04:00", "2025-04-06T00:30:00-04:00"],
    ),
    # ---- Africa/Casablanca (negative DST: +00 during Ramadan, +01 otherwise) ----
    (
        "fixed_fold_casablanca",
        "30 2 * * *",
        "Africa/Casablanca",
        "2025-02-22T12:00:00+01:00",
        ["2025-02-23T02:30:00+01:00", "2025-02-24T02:30:00+00:00"],
    ),
    (
        "wildcard_fold_casablanca",
        "*/30 2 * * *",
        "Africa/Casablanca",
        "2025-02-23T01:45:00+01:00",
        [
            "2025-02-23T02:00:00+01:00",
            "2025-02-23T02:30:00+01:00",
            "2025-02-23T02:00:00+00:00",
            "2025-02-23T02:30:00+00:00",
            "2025-02-24T02:00:00+00:00",
        ],
    ),
    (
        "fixed_gap_casablanca",
        "30 2 * * *",
        "Africa/Casablanca",
        "2025-04-05T12:00:00+00:00",
        ["2025-04-06T03:00:00+01:00", "2025-04-07T02:30:00+01:00"],
    ),
    (
        "wildcard_gap_casablanca",
        "*/30 * * * *",
        "Africa/Casablanca",
        "2025-04-06T01:10:00+00:00",
        ["2025-04-06T01:30:00+00:00", "2025-04-06T03:00:00+01:00", "2025-04-06T03:30:00+01:00"],
    ),
    # ---- Antarctica/Troll (a 2-hour shift) ----
    (
        "fixed_gap_collapse_troll",
        "0 1,2 * * *",
        "Antarctica/Troll",
        "2025-03-29T12:00:00+00:00",
        ["2025-03-30T03:00:00+02:00", "2025-03-31T01:00:00+02:00"],
    ),
    (
        "fixed_fold_troll",
        "30 2 * * *",
        "Antarctica/Troll",
        "2025-10-25T12:00:00+02:00",
        ["2025-10-26T02:30:00+02:00", "2025-10-27T02:30:00+00:00"],
    ),
    (
        "wildcard_fold_troll",
        "0 * * * *",
        "Antarctica/Troll",
        "2025-10-26T00:30:00+02:00",
        [
            "2025-10-26T01:00:00+02:00",
            "2025-10-26T02:00:00+02:00",
            "2025-10-26T01:00:00+00:00",
            "2025-10-26T02:00:00+00:00",
            "2025-10-26T03:00:00+00:00",
        ],
    ),
    (
        # Asked from the first pass, past 02:00: the second pass at 01:00 lies ahead in time.
        "first_pass_wildcard_troll",
        "0 * * * *",
        "Antarctica/Troll",
        "2025-10-26T02:30:00+02:00",
        ["2025-10-26T01:00:00+00:00"],
    ),
]


@pytest.mark.parametrize(
    ("cron", "zone", "after", "expected"),
    [pytest.param(*case[1:], id=case[0]) for case in CASES],
)
def test_dst_table(cron: str, zone: str, after: str, expected: list[str]) -> None:
    trigger = CronTrigger(cron, zone)
    fires = preview(trigger, datetime.fromisoformat(after), len(expected))
    assert all(fire.tzinfo is UTC for fire in fires)  # instants answer in UTC
    assert [in_zone(trigger, fire).isoformat() for fire in fires] == expected


def test_second_pass_instant_has_fold_and_right_utc() -> None:
    trigger = CronTrigger("*/30 * * * *", "America/New_York")
    fire = next_fire(trigger, datetime.fromisoformat("2025-11-02T01:10:00-05:00"))
    assert fire == datetime(2025, 11, 2, 6, 30, tzinfo=UTC)
    assert in_zone(trigger, fire).fold == 1  # shown in its zone: the second 01:30


def test_next_fire_never_at_or_before_after() -> None:
    trigger = CronTrigger("30 1 * * *", "America/New_York")
    # Exactly at the first pass: the next fire is the next day, not the same instant.
    at_fire = datetime.fromisoformat("2025-11-02T01:30:00-04:00")
    assert next_fire(trigger, at_fire) == datetime.fromisoformat("2025-11-03T01:30:00-05:00")
    # The same wall time in the second pass is later in UTC, and still no fire today.
    second = datetime.fromisoformat("2025-11-02T01:30:00-05:00")
    assert next_fire(trigger, second) == datetime.fromisoformat("2025-11-03T01:30:00-05:00")


def test_after_in_any_zone() -> None:
    trigger = CronTrigger("30 2 * * *", "America/New_York")
    in_utc = datetime(2025, 3, 9, 6, 59, 59, 999_999, tzinfo=UTC)
    in_tokyo = in_utc.astimezone(ZoneInfo("Asia/Tokyo"))
    expected = "2025-03-09T03:00:00-04:00"
    for after in (in_utc, in_tokyo):
        fire = next_fire(trigger, after)
        assert fire is not None and in_zone(trigger, fire).isoformat() == expected


@pytest.mark.parametrize(
    ("cron", "zone", "day"),
    [
        pytest.param("*/30 * * * *", "America/New_York", "2025-11-02", id="wildcard_fold_ny"),
        pytest.param("30 1 * * *", "America/New_York", "2025-11-02", id="fixed_fold_ny"),
        pytest.param("0,30 2 * * *", "America/New_York", "2025-03-09", id="fixed_gap_ny"),
        pytest.param("*/15 * * * *", "Australia/Lord_Howe", "2025-04-06", id="wildcard_lh"),
    ],
)
def test_next_fire_is_pure(cron: str, zone: str, day: str) -> None:
    """next_fire(t) depends on t alone, not on where an iteration started."""
    trigger = CronTrigger(cron, zone)
    # UTC throughout: aware datetimes sharing one ZoneInfo compare by wall clock, not instant.
    start = datetime.fromisoformat(day).replace(tzinfo=ZoneInfo(zone)).astimezone(UTC)
    start -= timedelta(hours=6)
    walked = [fire.astimezone(UTC) for fire in preview(trigger, start, 80)]
    for origin in (start + timedelta(minutes=17 * k) for k in range(1, 40)):
        expected = next(fire for fire in walked if fire > origin)
        found = next_fire(trigger, origin)
        assert found is not None
        assert found.astimezone(UTC) == expected


# --------------------------------------------------------------------------------------------
# A brute-force oracle, written from the rules alone, around every transition above
# --------------------------------------------------------------------------------------------


def cron_matches(cron: str, wall: datetime) -> bool:
    """Whether the wall clock ``wall`` matches ``cron`` by Debian's field rules."""
    spec = parse_cron(cron)
    dom = wall.day in spec.days
    dow = (wall.weekday() + 1) % 7 in spec.weekdays
    day = (dom or dow) if not (spec.dom_star or spec.dow_star) else (dom and dow)
    return (
        wall.minute in spec.minutes
        and wall.hour in spec.hours
        and wall.month in spec.months
        and day
    )


def _oracle(cron: str, zone: ZoneInfo, start: datetime, end: datetime) -> list[datetime]:
    """Fire instants in ``(start, end]`` by scanning every UTC minute.

    Wildcard jobs fire at every instant whose wall clock matches; fixed-time jobs fire for each
    matched wall time L at the first instant whose wall clock reads L or later (all the zones
    here shift on whole minutes, so a minute scan is exact).
    """
    wildcard = parse_cron(cron).wildcard
    fires: list[datetime] = []
    instant = start - timedelta(hours=30)
    high_water = instant.astimezone(zone).replace(tzinfo=None)
    while instant <= end:
        instant += timedelta(minutes=1)
        wall = instant.astimezone(zone).replace(tzinfo=None)
        if wildcard:
            fired = cron_matches(cron, wall)
        else:
            fired = False
            probe = high_water + timedelta(minutes=1)
            while probe <= wall:  # every wall time reached for the first time at `instant`
                fired = fired or cron_matches(cron, probe)
                probe += timedelta(minutes=1)
            high_water = max(high_water, wall)
        if fired and start < instant <= end:
            fires.append(instant)
    return fires


TRANSITIONS = [
    ("America/New_York", "2025-03-09T07:00:00+00:00"),
    ("America/New_York", "2025-11-02T06:00:00+00:00"),
    ("Europe/London", "2025-03-30T01:00:00+00:00"),
    ("Europe/London", "2025-10-26T01:00:00+00:00"),
    ("Australia/Sydney", "2025-04-05T16:00:00+00:00"),
    ("Australia/Sydney", "2025-10-04T16:00:00+00:00"),
    ("Australia/Lord_Howe", "2025-04-05T15:00:00+00:00"),
    ("Australia/Lord_Howe", "2025-10-04T15:30:00+00:00"),
    ("Pacific/Chatham", "2025-04-05T14:00:00+00:00"),
    ("Pacific/Chatham", "2025-09-27T14:00:00+00:00"),
    ("America/Havana", "2025-03-09T05:00:00+00:00"),
    ("America/Havana", "2025-11-02T05:00:00+00:00"),
    ("America/Santiago", "2025-04-06T03:00:00+00:00"),
    ("America/Santiago", "2025-09-07T04:00:00+00:00"),
    ("Africa/Casablanca", "2025-02-23T02:00:00+00:00"),
    ("Africa/Casablanca", "2025-04-06T02:00:00+00:00"),
    ("Antarctica/Troll", "2025-03-30T01:00:00+00:00"),
    ("Antarctica/Troll", "2025-10-26T01:00:00+00:00"),
]
ORACLE_CRONS = [
    "*/15 * * * *",
    "0 * * * *",
    "0-59/15 0-23 * * *",
    "0 0-23/2 * * *",
    "0 */2 * * *",
    "45 23,0,1,2,3 * * *",
    "0,30 0-3 * * *",
]


@pytest.mark.parametrize(
    ("zone", "transition"),
    [pytest.param(z, t, id=f"{z.split('/')[-1].lower()}_{t[:10]}") for z, t in TRANSITIONS],
)
@pytest.mark.parametrize("cron", ORACLE_CRONS)
def test_against_brute_force_oracle(zone: str, transition: str, cron: str) -> None:
    # The tzdata transition itself must be where the table above says it is.
    instant = datetime.fromisoformat(transition)
    tz = ZoneInfo(zone)
    assert (
        instant.astimezone(tz).utcoffset()
        != (instant - timedelta(seconds=1)).astimezone(tz).utcoffset()
    )

    start, end = instant - timedelta(hours=5), instant + timedelta(hours=5)
    expected = _oracle(cron, tz, start, end)
    trigger = CronTrigger(cron, zone)
    got = [f for f in preview(trigger, start, len(expected) + 1) if f <= end]
    assert [f.astimezone(UTC) for f in got] == expected
    # And from arbitrary points, not only from fire times.
    for k in range(0, 600, 13):
        origin = start + timedelta(minutes=k, seconds=29)
        following = [f for f in expected if f > origin]
        found = next_fire(trigger, origin)
        if following:
            # Compared in UTC: PEP 495 makes == False across zones for an ambiguous time.
            assert found is not None
            assert found.astimezone(UTC) == following[0]
