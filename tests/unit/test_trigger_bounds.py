"""start_at and end_at bounds on cron and interval triggers (issue 8, part 8)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from agentcron.core.errors import InvalidSchedule
from agentcron.core.triggers import (
    describe,
    in_zone,
    next_fire,
    parse_trigger,
    preview,
    trigger_from_dict,
    trigger_to_dict,
)

NOW = datetime(2026, 1, 5, 0, 0, tzinfo=UTC)  # a Monday
DAY = timedelta(days=1)


def test_a_cron_trigger_fires_only_between_its_bounds() -> None:
    trigger = parse_trigger(
        {
            "cron": "0 9 * * *",
            "timezone": "Asia/Shanghai",
            "start_at": "2026-01-10T00:00:00+08:00",
            "end_at": "2026-01-12T09:00:00+08:00",
        },
        NOW,
    )
    fires = [in_zone(trigger, f).isoformat() for f in preview(trigger, NOW, 10)]
    assert str(in_zone(trigger, NOW).tzinfo) == "Asia/Shanghai"
    # 09:00 on the 10th, 11th and 12th; end_at itself is inclusive.
    assert fires == [
        "2026-01-10T09:00:00+08:00",
        "2026-01-11T09:00:00+08:00",
        "2026-01-12T09:00:00+08:00",
    ]
    assert next_fire(trigger, datetime(2026, 1, 12, 1, 0, 1, tzinfo=UTC)) is None
    # The bounds read on the trigger's own clock, as every time of the schedule is shown.
    assert describe(trigger) == (
        "At 09:00, Asia/Shanghai, from 2026-01-10 00:00:00 +08:00, until 2026-01-12 09:00:00 +08:00"
    )


def test_start_at_itself_fires_when_it_is_a_due_time() -> None:
    trigger = parse_trigger({"cron": "*/15 * * * *", "start_at": "2026-01-06T10:15:00Z"}, NOW)
    assert next_fire(trigger, NOW) == datetime(2026, 1, 6, 10, 15, tzinfo=UTC)


def test_an_interval_trigger_ends_at_end_at() -> None:
    trigger = parse_trigger(
        {
            "every_seconds": 3600,
            "start_at": NOW.isoformat(),
            "end_at": (NOW + 3 * 3600 * timedelta(seconds=1)).isoformat(),
        },
        NOW - DAY,
    )
    assert [f.hour for f in preview(trigger, NOW - timedelta(seconds=1), 10)] == [0, 1, 2, 3]
    assert describe(trigger) == "Every hour, until 2026-01-05 03:00:00 UTC"


def test_bounds_survive_the_stored_form() -> None:
    data = {
        "cron": "0 9 * * 1-5",
        "start_at": "2026-02-01T00:00:00Z",
        "end_at": "2026-03-01T00:00:00Z",
    }
    trigger = parse_trigger(data, NOW)
    assert trigger_from_dict(trigger_to_dict(trigger)) == trigger
    assert trigger_to_dict(trigger)["end_at"] == "2026-03-01T00:00:00+00:00"
    plain = parse_trigger({"cron": "0 9 * * *"}, NOW)
    assert "start_at" not in trigger_to_dict(plain) and "end_at" not in trigger_to_dict(plain)


@pytest.mark.parametrize(
    ("data", "field", "says"),
    [
        ({"cron": "0 9 * * *", "end_at": "2025-01-01T00:00:00Z"}, "trigger.end_at", "has passed"),
        (
            {
                "cron": "0 9 * * *",
                "start_at": "2026-03-01T00:00:00Z",
                "end_at": "2026-02-01T00:00:00Z",
            },
            "trigger.end_at",
            "not after start_at",
        ),
        ({"cron": "0 9 * * *", "end_at": "2026-03-01T00:00:00"}, "trigger.end_at", "no UTC offset"),
        (
            {"at": "2026-03-01T00:00:00Z", "end_at": "2026-04-01T00:00:00Z"},
            "trigger.end_at",
            "fires once",
        ),
        ({"every_seconds": 60, "end_at": 5}, "trigger.end_at", "ISO-8601"),
    ],
)
def test_bad_bounds_are_refused_naming_the_field(
    data: dict[str, object], field: str, says: str
) -> None:
    with pytest.raises(InvalidSchedule) as caught:
        parse_trigger(data, NOW)
    assert caught.value.field == field and says in caught.value.message, caught.value.message
