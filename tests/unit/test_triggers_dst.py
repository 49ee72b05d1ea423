"""DST rules of cron triggers (docs/design.md, promise 2) as one named table, each rule once.

Each row gives an expression, its zone, its DST policy (none: the job kind's default), an
instant to ask from, and the next fire times as local wall-clock strings with offsets (aware
datetimes that are equal in UTC can differ locally) followed by the rule ``dst_rule`` names for
each (``-`` for none). Every expectation was derived by hand from the rules and the tzdata
transitions below (as printed by zoneinfo), not from the implementation:

* America/New_York    2025-03-09 02:00 -05 -> 03:00 -04 (02:00-02:59 does not occur)
                      2025-11-02 02:00 -04 -> 01:00 -05 (01:00-01:59 occurs twice)

New York holds every rule once. The shapes of change it does not have (a 30-minute gap, a
change off the hour or at midnight, a repeat of the day before, negative DST, a 2-hour shift)
are swept, with the ``dst_rule`` of every due time under every policy, against the
brute-force oracle of tests/unit/test_triggers_property.py, which checks any zone and year too.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from agentcron.core.errors import InvalidSchedule
from agentcron.core.triggers import (
    CronTrigger,
    IntervalTrigger,
    OneShotTrigger,
    describe,
    dst_rule,
    in_zone,
    next_fire,
    parse_trigger,
    preview,
    trigger_from_dict,
    trigger_to_dict,
)

NY = "America/New_York"
NOW = datetime(2025, 1, 1, tzinfo=UTC)

# (id, cron, zone, policy, after, ["<local fire time> <dst_rule or ->", ...])
CASES: list[tuple[str, str, str, dict[str, str], str, list[str]]] = [
    # ---- America/New_York: the spring gap ----
    (
        "fixed_gap_new_york",
        "30 2 * * *",
        NY,
        {},
        "2025-03-08T12:00:00-05:00",
        ["2025-03-09T03:00:00-04:00 gap_shift", "2025-03-10T02:30:00-04:00 -"],
    ),
    (
        "fixed_gap_skip_new_york",
        "30 2 * * *",
        NY,
        {"dst_gap": "skip"},
        "2025-03-08T12:00:00-05:00",
        ["2025-03-10T02:30:00-04:00 -", "2025-03-11T02:30:00-04:00 -"],
    ),
    (
        # Two skipped times shift to one instant: one fire.
        "fixed_gap_collapse_new_york",
        "0,30 2 * * *",
        NY,
        {},
        "2025-03-08T12:00:00-05:00",
        [
            "2025-03-09T03:00:00-04:00 gap_shift",
            "2025-03-10T02:00:00-04:00 -",
            "2025-03-10T02:30:00-04:00 -",
        ],
    ),
    (
        # 02:00 and 02:30 land on 03:00, which the expression also lists: one ordinary fire.
        "fixed_gap_onto_a_match_new_york",
        "0,30 2,3 * * *",
        NY,
        {},
        "2025-03-08T12:00:00-05:00",
        [
            "2025-03-09T03:00:00-04:00 -",
            "2025-03-09T03:30:00-04:00 -",
            "2025-03-10T02:00:00-04:00 -",
        ],
    ),
    (
        # 03:00 ends the gap, but nothing this job lists was skipped.
        "fixed_at_the_end_of_the_gap_new_york",
        "0 3 * * *",
        NY,
        {},
        "2025-03-08T12:00:00-05:00",
        ["2025-03-09T03:00:00-04:00 -", "2025-03-10T03:00:00-04:00 -"],
    ),
    (
        "wildcard_gap_new_york",
        "*/30 * * * *",
        NY,
        {},
        "2025-03-09T01:00:00-05:00",
        [
            "2025-03-09T01:30:00-05:00 -",
            "2025-03-09T03:00:00-04:00 -",
            "2025-03-09T03:30:00-04:00 -",
        ],
    ),
    (
        "wildcard_gap_shift_new_york",
        "*/20 2 * * *",
        NY,
        {"dst_gap": "shift"},
        "2025-03-08T12:00:00-05:00",
        [
            "2025-03-09T03:00:00-04:00 gap_shift",
            "2025-03-10T02:00:00-04:00 -",
            "2025-03-10T02:20:00-04:00 -",
        ],
    ),
    (
        # The hour field starts with '*': a wildcard job, whatever the values.
        "wildcard_hour_step_gap_new_york",
        "0 */2 * * *",
        NY,
        {},
        "2025-03-09T00:30:00-05:00",
        ["2025-03-09T04:00:00-04:00 -", "2025-03-09T06:00:00-04:00 -"],
    ),
    # ---- America/New_York: the repeated hour ----
    (
        "fixed_fold_new_york",
        "30 1 * * *",
        NY,
        {},
        "2025-11-01T12:00:00-04:00",
        ["2025-11-02T01:30:00-04:00 repeat_first", "2025-11-03T01:30:00-05:00 -"],
    ),
    (
        "fixed_fold_last_new_york",
        "30 1 * * *",
        NY,
        {"dst_repeat": "last"},
        "2025-11-01T12:00:00-04:00",
        ["2025-11-02T01:30:00-05:00 repeat_last", "2025-11-03T01:30:00-05:00 -"],
    ),
    (
        "fixed_fold_both_new_york",
        "30 1 * * *",
        NY,
        {"dst_repeat": "both"},
        "2025-11-01T12:00:00-04:00",
        [
            "2025-11-02T01:30:00-04:00 repeat_both",
            "2025-11-02T01:30:00-05:00 repeat_both",
            "2025-11-03T01:30:00-05:00 -",
        ],
    ),
    (
        "wildcard_fold_new_york",
        "*/30 * * * *",
        NY,
        {},
        "2025-11-02T00:40:00-04:00",
        [
            "2025-11-02T01:00:00-04:00 repeat_both",
            "2025-11-02T01:30:00-04:00 repeat_both",
            "2025-11-02T01:00:00-05:00 repeat_both",
            "2025-11-02T01:30:00-05:00 repeat_both",
            "2025-11-02T02:00:00-05:00 -",
        ],
    ),
    (
        "wildcard_fold_first_new_york",
        "*/30 * * * *",
        NY,
        {"dst_repeat": "first"},
        "2025-11-02T00:45:00-04:00",
        [
            "2025-11-02T01:00:00-04:00 repeat_first",
            "2025-11-02T01:30:00-04:00 repeat_first",
            "2025-11-02T02:00:00-05:00 -",
        ],
    ),
]


@pytest.mark.parametrize(
    ("cron", "zone", "policy", "after", "expected"),
    [pytest.param(*case[1:], id=case[0]) for case in CASES],
)
def test_dst_change(
    cron: str, zone: str, policy: dict[str, str], after: str, expected: list[str]
) -> None:
    trigger = CronTrigger(cron, zone, policy.get("dst_gap"), policy.get("dst_repeat"))
    fires = preview(trigger, datetime.fromisoformat(after), len(expected))
    assert all(fire.tzinfo is UTC for fire in fires)  # instants answer in UTC
    got = [f"{in_zone(trigger, f).isoformat()} {dst_rule(trigger, f) or '-'}" for f in fires]
    assert got == expected


def test_a_time_that_is_always_in_a_gap_never_fires() -> None:
    # 2011-12-30 did not exist in Samoa; under skip the schedule has nothing left to fire.
    trigger = CronTrigger("0 12 30 12 *", "Pacific/Apia", dst_gap="skip")
    fire = next_fire(trigger, datetime(2011, 12, 1, tzinfo=UTC))
    assert fire is not None and fire.year == 2012


def test_dst_rule_is_none_for_other_kinds_and_rejects_a_naive_due() -> None:
    start = datetime(2025, 3, 9, 7, tzinfo=UTC)  # the end of New York's gap
    assert dst_rule(IntervalTrigger(60, start), start) is None
    assert dst_rule(OneShotTrigger(start), start) is None
    with pytest.raises(ValueError, match="aware"):
        dst_rule(CronTrigger("@daily"), datetime(2025, 1, 1))


# --------------------------------------------------------------------------------------------
# Policies as input: validation, stored form, description
# --------------------------------------------------------------------------------------------


def test_policies_are_parsed_and_stored_only_when_given() -> None:
    data = {"cron": "30 2 * * *", "timezone": NY, "dst_gap": "skip"}
    trigger = parse_trigger(data, NOW)
    assert trigger == CronTrigger("30 2 * * *", NY, dst_gap="skip")
    assert trigger_to_dict(trigger) == data
    assert trigger_from_dict(trigger_to_dict(trigger)) == trigger
    plain = parse_trigger({"cron": "30 2 * * *", "dst_gap": None, "dst_repeat": None}, NOW)
    assert trigger_to_dict(plain) == {"cron": "30 2 * * *", "timezone": "UTC"}
    both = CronTrigger("*/5 * * * *", "Europe/London", "shift", "first")
    assert trigger_from_dict(trigger_to_dict(both)) == both


@pytest.mark.parametrize(
    ("data", "field"),
    [
        ({"cron": "@daily", "dst_gap": "later"}, "trigger.dst_gap"),
        ({"cron": "@daily", "dst_gap": "SKIP"}, "trigger.dst_gap"),
        ({"cron": "@daily", "dst_gap": 1}, "trigger.dst_gap"),
        ({"cron": "@daily", "dst_gap": ["skip"]}, "trigger.dst_gap"),
        ({"cron": "@daily", "dst_repeat": "twice"}, "trigger.dst_repeat"),
        ({"cron": "@daily", "dst_repeat": "shift"}, "trigger.dst_repeat"),
        ({"cron": "@daily", "dst_repeat": {"x": 1}}, "trigger.dst_repeat"),
        ({"every_seconds": 60, "dst_gap": "skip"}, "trigger.dst_gap"),
        ({"every_seconds": 60, "dst_repeat": "both"}, "trigger.dst_repeat"),
        ({"at": "2030-01-01T00:00:00Z", "dst_repeat": "first"}, "trigger.dst_repeat"),
    ],
)
def test_bad_policies_name_the_field(data: dict[str, Any], field: str) -> None:
    with pytest.raises(InvalidSchedule) as caught:
        parse_trigger(data, NOW)
    assert caught.value.field == field


def test_bad_policy_message_lists_the_choices_and_does_not_echo_much() -> None:
    with pytest.raises(InvalidSchedule) as caught:
        parse_trigger({"cron": "@daily", "dst_gap": "x" * 5000}, NOW)
    assert "'shift' or 'skip'" in str(caught.value)
    assert len(str(caught.value)) < 200


@pytest.mark.parametrize(
    ("trigger", "text"),
    [
        (CronTrigger("30 2 * * *", NY), "At 02:30, America/New_York"),
        # The default, given explicitly, reads as the default.
        (CronTrigger("30 2 * * *", NY, "shift", "first"), "At 02:30, America/New_York"),
        (
            CronTrigger("30 2 * * *", NY, "skip", "both"),
            (
                "At 02:30, America/New_York; times in a DST gap are skipped; "
                "a repeated hour runs twice"
            ),
        ),
        (
            CronTrigger("*/15 * * * *", "Europe/London", dst_gap="shift"),
            "Every 15 minutes, Europe/London; times in a DST gap run when it ends",
        ),
        (
            CronTrigger("*/15 * * * *", "Europe/London", dst_repeat="last"),
            "Every 15 minutes, Europe/London; a repeated hour runs once, second pass",
        ),
    ],
)
def test_describe_mentions_a_policy_that_is_not_the_default(
    trigger: CronTrigger, text: str
) -> None:
    assert describe(trigger) == text
