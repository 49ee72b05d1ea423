"""Cron meaning (docs/design.md, promise 1), validation, intervals, one-shots, describe."""

from __future__ import annotations

from datetime import UTC, date, datetime
from typing import Any

import pytest

from agentcron.core.errors import InvalidSchedule
from agentcron.core.triggers import (
    MAX_INTERVAL_SECONDS,
    CronTrigger,
    IntervalTrigger,
    OneShotTrigger,
    describe,
    next_fire,
    parse_trigger,
    preview,
    restated,
    trigger_from_dict,
    trigger_to_dict,
)
from agentcron.core.triggers.cron import parse_cron

NOW = datetime(2025, 1, 1, 12, 0, 30, 250_000, tzinfo=UTC)  # a Wednesday


def fires(cron: str, count: int, after: datetime = NOW, zone: str = "UTC") -> list[datetime]:
    return preview(CronTrigger(cron, zone), after, count)


def days(cron: str, count: int, after: datetime = NOW) -> list[date]:
    return [fire.date() for fire in fires(cron, count, after)]


# --------------------------------------------------------------------------------------------
# Cron meaning
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("cron", "january"),
    [
        ("0 0 13 * 5", [3, 10, 13, 17, 24, 31]),  # both day fields restricted: OR (Fridays, 13th)
        ("0 0 1-31 * 1", [2, 3, 4]),  # 1-31 does not start with "*": still OR, every day
        ("0 0 * * 0-7", [2, 3, 4, 5, 6, 7, 8]),
        ("0 0 * * 7", [5, 12, 19]),  # 7 and 0 are Sunday
        ("0 0 * * 0", [5, 12, 19]),
        ("0 0 * * SUN", [5, 12, 19]),
        ("0 0 * * sun", [5, 12, 19]),
        ("0 0 * * MON-FRI", [2, 3, 6, 7, 8]),
        ("0 0 * * mon,Wed", [6, 8, 13]),
        ("0 0 * * FRI-MON", [3, 4, 5, 6, 10]),  # a reversed range wraps: Fri, Sat, Sun, Mon
        ("0 0 * * 6-2", [4, 5, 6, 7, 11]),
        ("0 0 * * 1-7/2", [3, 5, 6, 8]),  # the step counts 7 as Sunday: Mon, Wed, Fri, Sun
    ],
)
def test_the_days_of_january_a_cron_fires_on(cron: str, january: list[int]) -> None:
    assert days(cron, len(january)) == [date(2025, 1, d) for d in january]


MIDNIGHT = datetime(2025, 1, 1, tzinfo=UTC)


@pytest.mark.parametrize(
    ("cron", "after", "part", "expected"),
    [
        ("0 5-5 * * *", NOW, "hour", [5, 5, 5]),  # croniter would read 5-5 as "every hour"
        ("5-5 * * * *", NOW, "minute", [5, 5]),
        ("0 22-2 * * *", NOW, "hour", [22, 23, 0, 1, 2, 22]),  # a reversed range wraps
        ("0 22-2/2 * * *", NOW, "hour", [22, 0, 2, 22]),  # the step walks 22, 23, 0, 1, 2
        ("50-10 * * * *", NOW.replace(minute=49), "minute", [*range(50, 60), 0, 1, 2]),
        ("*/20 * * * *", MIDNIGHT, "minute", [20, 40, 0]),
        ("10-40/15 * * * *", MIDNIGHT, "minute", [10, 25, 40]),
        ("1,2,59 * * * *", MIDNIGHT, "minute", [1, 2, 59]),
    ],
)
def test_the_hours_and_minutes_a_cron_fires_at(
    cron: str, after: datetime, part: str, expected: list[int]
) -> None:
    assert [getattr(fire, part) for fire in fires(cron, len(expected), after)] == expected


@pytest.mark.parametrize(
    ("macro", "cron"),
    [
        ("@yearly", "0 0 1 1 *"),
        ("@annually", "0 0 1 1 *"),
        ("@monthly", "0 0 1 * *"),
        ("@weekly", "0 0 * * 0"),
        ("@daily", "0 0 * * *"),
        ("@midnight", "0 0 * * *"),
        ("@HOURLY", "0 * * * *"),
    ],
)
def test_macros(macro: str, cron: str) -> None:
    assert fires(macro, 3) == fires(cron, 3)


def test_feb_29_is_valid_and_rare_matches_are_found() -> None:
    assert days("0 0 29 2 *", 2) == [date(2028, 2, 29), date(2032, 2, 29)]
    # Feb 29 that is a Sunday (*/7 = 0,7; AND since it starts with "*"): 2032, 2060, 2088,
    # then 40 years across the non-leap 2100.
    got = days("0 0 29 2 */7", 4)
    assert got == [date(2032, 2, 29), date(2060, 2, 29), date(2088, 2, 29), date(2128, 2, 29)]
    # Both restricted: OR, so every Monday of February counts too.
    assert days("0 0 29 2 1", 2) == [date(2025, 2, 3), date(2025, 2, 10)]


def test_no_match_before_the_horizon_is_none() -> None:
    assert parse_cron("0 0 29 2 *").next_wall(datetime(2025, 3, 1), datetime(2027, 1, 1)) is None


# --------------------------------------------------------------------------------------------
# Cron rejections
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("cron", "fragment"),
    [
        ("0 0 * * * *", "5 fields"),
        ("0 0 * * * * 2030", "seconds and years are not supported"),
        ("0 * * *", "5 fields"),
        ("5/15 * * * *", "5-59/15"),
        ("0 3/2 * * *", "3-23/2"),
        ("*/0 * * * *", "step 0"),
        ("0 0-23/0 * * *", "step 0"),
        ("60 * * * *", "minute 60 is out of range 0-59"),
        ("0 24 * * *", "hour 24 is out of range 0-23"),
        ("0 0 32 * *", "day of month 32 is out of range 1-31"),
        ("0 0 0 * *", "day of month 0 is out of range 1-31"),
        ("0 0 * 13 *", "month 13 is out of range 1-12"),
        ("0 0 * * 8", "day of week 8 is out of range 0-7"),
        ("0 0 L * *", "L W # ? H R"),
        ("0 0 15W * *", "L W # ? H R"),
        ("0 0 * * 5#2", "L W # ? H R"),
        ("0 0 ? * *", "L W # ? H R"),
        ("0 0 * * 5L", "L W # ? H R"),
        ("H * * * *", "L W # ? H R"),
        ("R R * * *", "L W # ? H R"),
        ("@reboot", "@reboot"),
        ("@fortnightly", "unknown cron macro"),
        ("garbage", "5 fields"),
        ("a b c d e", "not a number"),
        ("0 0 * foo *", "unknown"),
        ("1,,2 * * * *", "empty"),
        ("", "empty"),
        ("   ", "empty"),
        ("0 0 31 2 *", "never fires"),
        ("0 0 30 2 *", "never fires"),
        ("0 0 31 4,6,9,11 *", "never fires"),
        ("0 0 30,31 2 */2", "never fires"),
    ],
)
def test_cron_rejections(cron: str, fragment: str) -> None:
    with pytest.raises(InvalidSchedule) as caught:
        parse_trigger({"cron": cron}, NOW)
    assert caught.value.field == "trigger.cron"
    assert fragment in caught.value.message


# --------------------------------------------------------------------------------------------
# Zones and trigger shape
# --------------------------------------------------------------------------------------------


BAD_ZONES = [
    "",
    8,
    "Mars/Olympus_Mons",
    "../../etc/passwd",
    "Europe/Kyiv/../../../etc/passwd",
    "/usr/share/zoneinfo/UTC",
    "Europe/Zürich",
    "Asia/東京",
    "\uff21\uff53\uff49\uff41/\uff34\uff4f\uff4b\uff59\uff4f",  # full-width Asia/Tokyo
    "America/New_York\u200b",
    "Europe/London\n",
    " Europe/London",
    "UTC\u22121",
    "\u0663",  # Arabic-Indic digit three
    "\U0001f550",
    "A" * 5_000,
]


OFFSETS = ["+08:00", "UTC+8", "GMT-5", "-0500", "8"]  # offsets are not zones: the answer says so


@pytest.mark.parametrize("zone", BAD_ZONES + OFFSETS)
def test_bad_zones(zone: object) -> None:
    with pytest.raises(InvalidSchedule) as caught:
        parse_trigger({"cron": "0 8 * * *", "timezone": zone}, NOW)
    assert caught.value.field == "trigger.timezone"
    if zone in OFFSETS:
        assert "Asia/Shanghai" in caught.value.message and "offset" in caught.value.message


def test_timezone_defaults_to_utc() -> None:
    assert parse_trigger({"cron": "@daily"}, NOW) == CronTrigger("@daily", "UTC")
    assert parse_trigger({"cron": "@daily", "timezone": None}, NOW) == CronTrigger("@daily")


@pytest.mark.parametrize(
    ("data", "field"),
    [
        ({}, "trigger"),
        ({"cron": "@daily", "at": "2030-01-01T00:00:00Z"}, "trigger"),
        ({"cron": "@daily", "every_seconds": 60}, "trigger"),
        ({"cron": "@daily", "colour": "red"}, "trigger.colour"),
        # start_at/end_at bound cron and interval triggers; a one-shot fires once, at "at".
        ({"at": "2030-01-01T00:00:00Z", "start_at": "2029-01-01T00:00:00Z"}, "trigger.start_at"),
        ({"every_seconds": 60, "timezone": "UTC"}, "trigger.timezone"),
        ({"timezone": "UTC"}, "trigger"),
        ({"cron": 5}, "trigger.cron"),
        ({"every_seconds": "60"}, "trigger.every_seconds"),
        ({"every_seconds": 60.0}, "trigger.every_seconds"),
        ({"every_seconds": True}, "trigger.every_seconds"),
        ({"every_seconds": 0}, "trigger.every_seconds"),
        ({"every_seconds": MAX_INTERVAL_SECONDS + 1}, "trigger.every_seconds"),
        ({"every_seconds": 60, "start_at": "2025-01-01T00:00:00"}, "trigger.start_at"),
        ({"every_seconds": 60, "start_at": "yesterday"}, "trigger.start_at"),
        ({"every_seconds": 60, "start_at": 5}, "trigger.start_at"),
        ({"at": "2030-01-01T00:00:00"}, "trigger.at"),
        ({"at": datetime(2030, 1, 1)}, "trigger.at"),
        ({"at": "not a date"}, "trigger.at"),
        (["cron"], "trigger"),  # not a mapping
    ],
)
def test_shape_rejections(data: Any, field: str) -> None:
    with pytest.raises(InvalidSchedule) as caught:
        parse_trigger(data, NOW)
    assert caught.value.field == field


def test_interval_default_start_is_now_truncated() -> None:
    trigger = parse_trigger({"every_seconds": 90}, NOW)
    assert trigger == IntervalTrigger(90, datetime(2025, 1, 1, 12, 0, 30, tzinfo=UTC))
    # The first due time is one interval after creation.
    assert next_fire(trigger, NOW) == datetime(2025, 1, 1, 12, 2, 0, tzinfo=UTC)


def test_interval_accepts_z_and_datetime() -> None:
    a = parse_trigger({"every_seconds": 5, "start_at": "2025-01-01T00:00:00Z"}, NOW)
    b = parse_trigger({"every_seconds": 5, "start_at": datetime(2025, 1, 1, tzinfo=UTC)}, NOW)
    assert a == b


@pytest.mark.parametrize("at", ["2024-12-31T00:00:00Z", NOW.isoformat()])
def test_one_shot_in_the_past(at: str) -> None:
    with pytest.raises(InvalidSchedule) as caught:
        parse_trigger({"at": at}, NOW)
    assert caught.value.field == "trigger.at"
    assert "past" in caught.value.message


def test_a_naive_instant_is_a_caller_bug() -> None:
    with pytest.raises(ValueError, match="aware"):
        next_fire(CronTrigger("* * * * *"), datetime(2025, 1, 1))
    with pytest.raises(ValueError, match="aware"):
        parse_trigger({"cron": "@daily"}, datetime(2025, 1, 1))


def test_stored_form_is_json_safe_utc() -> None:
    assert trigger_to_dict(OneShotTrigger(datetime(2026, 12, 1, 9, tzinfo=UTC))) == {
        "at": "2026-12-01T09:00:00+00:00"
    }
    assert trigger_to_dict(IntervalTrigger(60, datetime(2025, 1, 1, tzinfo=UTC))) == {
        "every_seconds": 60,
        "start_at": "2025-01-01T00:00:00+00:00",
    }
    assert trigger_to_dict(CronTrigger("@daily")) == {"cron": "@daily", "timezone": "UTC"}


# --------------------------------------------------------------------------------------------
# A trigger given again
# --------------------------------------------------------------------------------------------

STORED_INTERVAL = {"every_seconds": 3600, "start_at": "2025-01-01T12:00:30+00:00"}


@pytest.mark.parametrize(
    ("given", "stored"),
    [
        # An interval without start_at: the one filled in at creation.
        ({"every_seconds": 3600}, STORED_INTERVAL),
        ({"every_seconds": 3600, "start_at": None}, STORED_INTERVAL),
        ({"every_seconds": 3600, "start_at": "2025-01-01T20:00:30+08:00"}, STORED_INTERVAL),
        # The defaults and spellings the stored form settles.
        ({"cron": " 0 8 * * 1-5 "}, {"cron": "0 8 * * 1-5", "timezone": "UTC"}),
        # Past times: a one-shot that fired, a bound that has passed.
        ({"at": "2001-01-01T00:00:00Z"}, {"at": "2001-01-01T00:00:00+00:00"}),
        (
            {"every_seconds": 60, "end_at": "2001-01-01T00:00:00+00:00"},
            {
                "every_seconds": 60,
                "start_at": "2000-01-01T00:00:00+00:00",
                "end_at": "2001-01-01T00:00:00+00:00",
            },
        ),
    ],
)
def test_a_trigger_given_again_is_the_stored_one(
    given: dict[str, Any], stored: dict[str, Any]
) -> None:
    assert restated(given, stored) == trigger_from_dict(stored)


@pytest.mark.parametrize(
    "given",
    [
        {"every_seconds": 1800},  # another interval starts now, as a new trigger does
        {"every_seconds": 3600, "start_at": "2025-01-01T12:00:31+00:00"},
        {"every_seconds": 3600, "end_at": "2030-01-01T00:00:00+00:00"},
        {"cron": "0 * * * *"},
        {"at": "2025-01-01T12:00:30+00:00"},
        {"every_seconds": "3600"},  # invalid: parse_trigger says why
        ["every_seconds", 3600],
    ],
)
def test_another_trigger_is_not_the_stored_one(given: Any) -> None:
    assert restated(given, STORED_INTERVAL) is None


def test_an_explicit_dst_policy_is_another_stored_trigger() -> None:
    # Absent, a policy follows the job kind's default, which may change; given, it is fixed.
    stored = {"cron": "30 2 * * *", "timezone": "Europe/Berlin"}
    assert restated({**stored, "dst_gap": "shift"}, stored) is None


@pytest.mark.parametrize(
    ("cron", "zone", "text"),
    [
        ("0 8 * * 1-5", "Asia/Shanghai", "At 08:00, Monday through Friday, Asia/Shanghai"),
        ("*/15 * * * *", "UTC", "Every 15 minutes, UTC"),
        ("0 0 1 * *", "UTC", "At 00:00, on day 1 of the month, UTC"),
        ("@monthly", "UTC", "At 00:00, on day 1 of the month, UTC"),
        ("@yearly", "UTC", "At 00:00, on January 1, UTC"),
        ("@daily", "Europe/Paris", "At 00:00, Europe/Paris"),
        ("@weekly", "UTC", "At 00:00, on Sunday, UTC"),
        ("@hourly", "UTC", "Every hour, UTC"),
        ("* * * * *", "UTC", "Every minute, UTC"),
        ("30 * * * *", "UTC", "Every hour at minute 30, UTC"),
        ("0 */2 * * *", "UTC", "Every 2 hours from 00:00 to 22:00, UTC"),
        ("30 9,17 * * *", "UTC", "At 09:30 and 17:30, UTC"),
        ("0 9 * * mon,wed,fri", "UTC", "At 09:00, on Monday, Wednesday and Friday, UTC"),
        ("0 10 * * 6,0", "UTC", "At 10:00, on Saturday and Sunday, UTC"),
        ("0 10 * * FRI-MON", "UTC", "At 10:00, Friday through Monday, UTC"),
        ("0 0 1,15 * *", "UTC", "At 00:00, on days 1 and 15 of the month, UTC"),
        ("0 0 13 * 5", "UTC", "At 00:00, on day 13 of the month or on Friday, UTC"),
        ("0 6 * JAN-MAR *", "UTC", "At 06:00, January through March, UTC"),
        (
            "*/5 9-17 * * 1-5",
            "UTC",
            "Every 5 minutes, between 09:00 and 17:59, Monday through Friday, UTC",
        ),
        ("1-7/3 5-20/4 */3 * *", "Europe/Paris", "Cron '1-7/3 5-20/4 */3 * *' (Europe/Paris)"),
    ],
)
def test_describe_cron(cron: str, zone: str, text: str) -> None:
    assert describe(CronTrigger(cron, zone)) == text


@pytest.mark.parametrize(
    ("seconds", "text"),
    [
        (90, "Every 90 seconds"),
        (1, "Every second"),
        (60, "Every minute"),
        (900, "Every 15 minutes"),
        (3600, "Every hour"),
        (7200, "Every 2 hours"),
        (86_400, "Every day"),
    ],
)
def test_describe_interval(seconds: int, text: str) -> None:
    assert describe(IntervalTrigger(seconds, NOW)) == text


def test_describe_one_shot() -> None:
    at = datetime.fromisoformat("2026-12-01T10:00:00+01:00")
    assert describe(OneShotTrigger(at)) == "Once at 2026-12-01 09:00:00 UTC"
