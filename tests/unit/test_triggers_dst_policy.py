"""Per-schedule DST policies (``dst_gap``, ``dst_repeat``) and ``dst_rule``, as named tables.

Each case lists, for every policy value, the local fire times (with offsets) worked out by hand
from the tzdata transitions, and the rule ``dst_rule`` must name for each:

* America/New_York    2025-03-09 02:00 -05 -> 03:00 -04 (02:00-02:59 does not occur)
                      2025-11-02 02:00 -04 -> 01:00 -05 (01:00-01:59 occurs twice)
* Australia/Lord_Howe 2025-10-05 02:00 +10:30 -> 02:30 +11 (02:00-02:29 does not occur)
                      2025-04-06 02:00 +11 -> 01:30 +10:30 (01:30-01:59 occurs twice)

Each table runs for both values of the policy it does not exercise and for "not given", whose
meaning is the job kind's default (fixed-time: shift / first; wildcard: skip / both). A
brute-force oracle at the end re-derives the fire set of every policy minute by minute.
"""

from __future__ import annotations

from collections import Counter
from datetime import UTC, datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo

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
from agentcron.core.triggers.cron import parse_cron
from tests.unit.test_triggers_dst import cron_matches

NOW = datetime(2025, 1, 1, tzinfo=UTC)

# (id, cron, zone, after, {gap policy: ["<local fire> <rule>", ...]})
GAP_CASES: list[tuple[str, str, str, str, dict[str, list[str]]]] = [
    (
        "fixed_new_york",
        "30 2 * * *",
        "America/New_York",
        "2025-03-08T12:00:00-05:00",
        {
            "shift": ["2025-03-09T03:00:00-04:00 gap_shift", "2025-03-10T02:30:00-04:00 -"],
            "skip": ["2025-03-10T02:30:00-04:00 -", "2025-03-11T02:30:00-04:00 -"],
        },
    ),
    (
        # Two skipped times shift to one instant: one fire.
        "fixed_collapse_new_york",
        "0,30 2 * * *",
        "America/New_York",
        "2025-03-08T12:00:00-05:00",
        {
            "shift": ["2025-03-09T03:00:00-04:00 gap_shift", "2025-03-10T02:00:00-04:00 -"],
            "skip": ["2025-03-10T02:00:00-04:00 -", "2025-03-10T02:30:00-04:00 -"],
        },
    ),
    (
        "wildcard_new_york",
        "*/20 2 * * *",
        "America/New_York",
        "2025-03-08T12:00:00-05:00",
        {
            "shift": [
                "2025-03-09T03:00:00-04:00 gap_shift",
                "2025-03-10T02:00:00-04:00 -",
                "2025-03-10T02:20:00-04:00 -",
            ],
            "skip": [
                "2025-03-10T02:00:00-04:00 -",
                "2025-03-10T02:20:00-04:00 -",
                "2025-03-10T02:40:00-04:00 -",
            ],
        },
    ),
    (
        # 02:00 and 02:30 shift to 03:00, which matches on its own: one ordinary fire.
        "wildcard_onto_a_match_new_york",
        "*/30 * * * *",
        "America/New_York",
        "2025-03-09T01:15:00-05:00",
        {
            "shift": [
                "2025-03-09T01:30:00-05:00 -",
                "2025-03-09T03:00:00-04:00 -",
                "2025-03-09T03:30:00-04:00 -",
            ],
            "skip": [
                "2025-03-09T01:30:00-05:00 -",
                "2025-03-09T03:00:00-04:00 -",
                "2025-03-09T03:30:00-04:00 -",
            ],
        },
    ),
    (
        "fixed_lord_howe",
        "15 2 * * *",
        "Australia/Lord_Howe",
        "2025-10-04T12:00:00+10:30",
        {
            "shift": ["2025-10-05T02:30:00+11:00 gap_shift", "2025-10-06T02:15:00+11:00 -"],
            "skip": ["2025-10-06T02:15:00+11:00 -", "2025-10-07T02:15:00+11:00 -"],
        },
    ),
    (
        "wildcard_lord_howe",
        "*/20 2 * * *",
        "Australia/Lord_Howe",
        "2025-10-04T12:00:00+10:30",
        {
            "shift": [
                "2025-10-05T02:30:00+11:00 gap_shift",
                "2025-10-05T02:40:00+11:00 -",
                "2025-10-06T02:00:00+11:00 -",
            ],
            "skip": [
                "2025-10-05T02:40:00+11:00 -",
                "2025-10-06T02:00:00+11:00 -",
                "2025-10-06T02:20:00+11:00 -",
            ],
        },
    ),
]

# (id, cron, zone, after, {repeat policy: ["<local fire> <rule>", ...]})
REPEAT_CASES: list[tuple[str, str, str, str, dict[str, list[str]]]] = [
    (
        "fixed_new_york",
        "30 1 * * *",
        "America/New_York",
        "2025-11-01T12:00:00-04:00",
        {
            "first": ["2025-11-02T01:30:00-04:00 repeat_first", "2025-11-03T01:30:00-05:00 -"],
            "last": ["2025-11-02T01:30:00-05:00 repeat_last", "2025-11-03T01:30:00-05:00 -"],
            "both": [
                "2025-11-02T01:30:00-04:00 repeat_both",
                "2025-11-02T01:30:00-05:00 repeat_both",
                "2025-11-03T01:30:00-05:00 -",
            ],
        },
    ),
    (
        "wildcard_new_york",
        "*/30 * * * *",
        "America/New_York",
        "2025-11-02T00:45:00-04:00",
        {
            "first": [
                "2025-11-02T01:00:00-04:00 repeat_first",
                "2025-11-02T01:30:00-04:00 repeat_first",
                "2025-11-02T02:00:00-05:00 -",
                "2025-11-02T02:30:00-05:00 -",
            ],
            "last": [
                "2025-11-02T01:00:00-05:00 repeat_last",
                "2025-11-02T01:30:00-05:00 repeat_last",
                "2025-11-02T02:00:00-05:00 -",
                "2025-11-02T02:30:00-05:00 -",
            ],
            "both": [
                "2025-11-02T01:00:00-04:00 repeat_both",
                "2025-11-02T01:30:00-04:00 repeat_both",
                "2025-11-02T01:00:00-05:00 repeat_both",
                "2025-11-02T01:30:00-05:00 repeat_both",
                "2025-11-02T02:00:00-05:00 -",
            ],
        },
    ),
    (
        "fixed_lord_howe",
        "45 1 * * *",
        "Australia/Lord_Howe",
        "2025-04-05T12:00:00+11:00",
        {
            "first": ["2025-04-06T01:45:00+11:00 repeat_first", "2025-04-07T01:45:00+10:30 -"],
            "last": ["2025-04-06T01:45:00+10:30 repeat_last", "2025-04-07T01:45:00+10:30 -"],
            "both": [
                "2025-04-06T01:45:00+11:00 repeat_both",
                "2025-04-06T01:45:00+10:30 repeat_both",
                "2025-04-07T01:45:00+10:30 -",
            ],
        },
    ),
    (
        # Only 01:30-01:59 repeats on Lord Howe: 01:00 and 01:15 are ordinary times.
        "wildcard_lord_howe",
        "*/15 1 * * *",
        "Australia/Lord_Howe",
        "2025-04-06T01:20:00+11:00",
        {
            "first": [
                "2025-04-06T01:30:00+11:00 repeat_first",
                "2025-04-06T01:45:00+11:00 repeat_first",
                "2025-04-07T01:00:00+10:30 -",
            ],
            "last": [
                "2025-04-06T01:30:00+10:30 repeat_last",
                "2025-04-06T01:45:00+10:30 repeat_last",
                "2025-04-07T01:00:00+10:30 -",
            ],
            "both": [
                "2025-04-06T01:30:00+11:00 repeat_both",
                "2025-04-06T01:45:00+11:00 repeat_both",
                "2025-04-06T01:30:00+10:30 repeat_both",
                "2025-04-06T01:45:00+10:30 repeat_both",
                "2025-04-07T01:00:00+10:30 -",
            ],
        },
    ),
]


def _check(trigger: CronTrigger, after: str, expected: list[str]) -> None:
    fires = preview(trigger, datetime.fromisoformat(after), len(expected))
    got = [
        f"{in_zone(trigger, fire).isoformat()} {dst_rule(trigger, fire) or '-'}" for fire in fires
    ]
    assert got == expected
    assert all(fire.tzinfo is UTC for fire in fires)


def _gap_params() -> list[Any]:
    params = []
    for name, cron, zone, after, table in GAP_CASES:
        default = "skip" if parse_cron(cron).wildcard else "shift"
        for gap in (None, "shift", "skip"):
            for repeat in (None, "first", "last", "both"):
                expected = table[gap or default]
                params.append(
                    pytest.param(
                        cron, zone, gap, repeat, after, expected, id=f"{name}-{gap}-{repeat}"
                    )
                )
    return params


def _repeat_params() -> list[Any]:
    params = []
    for name, cron, zone, after, table in REPEAT_CASES:
        default = "both" if parse_cron(cron).wildcard else "first"
        for repeat in (None, "first", "last", "both"):
            for gap in (None, "shift", "skip"):
                expected = table[repeat or default]
                params.append(
                    pytest.param(
                        cron, zone, gap, repeat, after, expected, id=f"{name}-{repeat}-{gap}"
                    )
                )
    return params


@pytest.mark.parametrize(("cron", "zone", "gap", "repeat", "after", "expected"), _gap_params())
def test_gap_policy(
    cron: str, zone: str, gap: str | None, repeat: str | None, after: str, expected: list[str]
) -> None:
    _check(CronTrigger(cron, zone, gap, repeat), after, expected)


@pytest.mark.parametrize(("cron", "zone", "gap", "repeat", "after", "expected"), _repeat_params())
def test_repeat_policy(
    cron: str, zone: str, gap: str | None, repeat: str | None, after: str, expected: list[str]
) -> None:
    _check(CronTrigger(cron, zone, gap, repeat), after, expected)


@pytest.mark.parametrize("repeat", ["last", "both"])
def test_second_pass_is_found_from_inside_the_first(repeat: str) -> None:
    """Asked from between the passes, the second pass of a fixed time still lies ahead."""
    trigger = CronTrigger("30 1 * * *", "America/New_York", dst_repeat=repeat)
    fire = next_fire(trigger, datetime.fromisoformat("2025-11-02T01:45:00-04:00"))
    assert fire == datetime(2025, 11, 2, 6, 30, tzinfo=UTC)
    assert in_zone(trigger, fire).isoformat() == "2025-11-02T01:30:00-05:00"


def test_a_time_that_is_always_in_a_gap_never_fires() -> None:
    # 2011-12-30 did not exist in Samoa; under skip the schedule has nothing left to fire.
    trigger = CronTrigger("0 12 30 12 *", "Pacific/Apia", dst_gap="skip")
    fire = next_fire(trigger, datetime(2011, 12, 1, tzinfo=UTC))
    assert fire is not None and fire.year == 2012


# --------------------------------------------------------------------------------------------
# dst_rule beyond the tables
# --------------------------------------------------------------------------------------------


def test_dst_rule_is_none_for_ordinary_instants_and_other_kinds() -> None:
    cron = CronTrigger("30 2 * * *", "America/New_York")
    assert dst_rule(cron, datetime(2025, 6, 1, 6, 30, tzinfo=UTC)) is None
    assert dst_rule(CronTrigger("*/5 * * * *"), datetime(2025, 6, 1, tzinfo=UTC)) is None
    start = datetime(2025, 3, 9, 7, tzinfo=UTC)
    assert dst_rule(IntervalTrigger(60, start), start) is None
    assert dst_rule(OneShotTrigger(start), start) is None


def test_dst_rule_rejects_naive_due() -> None:
    with pytest.raises(ValueError, match="aware"):
        dst_rule(CronTrigger("@daily"), datetime(2025, 1, 1))


def test_dst_rule_at_a_transition_the_schedule_does_not_straddle() -> None:
    # 03:00 on the spring day is the end of the gap, but 03:00 is this job's own time.
    trigger = CronTrigger("0 3 * * *", "America/New_York")
    fire = next_fire(trigger, datetime.fromisoformat("2025-03-08T12:00:00-05:00"))
    assert fire is not None and in_zone(trigger, fire).isoformat() == "2025-03-09T03:00:00-04:00"
    assert dst_rule(trigger, fire) is None


# --------------------------------------------------------------------------------------------
# Validation, stored form, description
# --------------------------------------------------------------------------------------------


def test_policies_are_parsed_and_stored_only_when_given() -> None:
    data = {"cron": "30 2 * * *", "timezone": "America/New_York", "dst_gap": "skip"}
    trigger = parse_trigger(data, NOW)
    assert trigger == CronTrigger("30 2 * * *", "America/New_York", dst_gap="skip")
    assert trigger_to_dict(trigger) == data
    assert trigger_from_dict(trigger_to_dict(trigger)) == trigger
    plain = parse_trigger({"cron": "30 2 * * *", "dst_gap": None, "dst_repeat": None}, NOW)
    assert trigger_to_dict(plain) == {"cron": "30 2 * * *", "timezone": "UTC"}
    both = CronTrigger("*/5 * * * *", "Europe/London", "shift", "first")
    assert trigger_from_dict(trigger_to_dict(both)) == both


def test_effective_policies_default_by_job_kind() -> None:
    fixed, wildcard = CronTrigger("30 2 * * *"), CronTrigger("*/30 2 * * *")
    assert (fixed.gap_policy, fixed.repeat_policy) == ("shift", "first")
    assert (wildcard.gap_policy, wildcard.repeat_policy) == ("skip", "both")
    chosen = CronTrigger("30 2 * * *", dst_gap="skip", dst_repeat="last")
    assert (chosen.gap_policy, chosen.repeat_policy) == ("skip", "last")


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
        (CronTrigger("30 2 * * *", "America/New_York"), "At 02:30, America/New_York"),
        # The default, given explicitly, reads as the default.
        (
            CronTrigger("30 2 * * *", "America/New_York", "shift", "first"),
            "At 02:30, America/New_York",
        ),
        (
            CronTrigger("30 2 * * *", "America/New_York", "skip", "both"),
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


# --------------------------------------------------------------------------------------------
# A brute-force oracle of every policy, written from the rules alone
# --------------------------------------------------------------------------------------------


def _oracle(
    cron: str, zone: ZoneInfo, gap: str, repeat: str, start: datetime, end: datetime
) -> list[datetime]:
    """Fire instants in ``(start, end]`` by scanning every UTC minute of a wider window.

    A wall time read at two instants of the window is repeated: its first reading is the first
    pass, its second the second. Wall times the clock jumps over between two readings are
    skipped: under ``shift`` they fire at the instant after the jump (once, however many).
    """
    instants = []
    instant = start - timedelta(hours=30)
    while instant <= end + timedelta(hours=30):
        instants.append(instant)
        instant += timedelta(minutes=1)
    walls = [i.astimezone(zone).replace(tzinfo=None) for i in instants]
    readings = Counter(walls)
    seen: set[datetime] = set()
    fires = []
    for index, (instant, wall) in enumerate(zip(instants, walls, strict=True)):
        fired = False
        if cron_matches(cron, wall):
            if readings[wall] == 1:
                fired = True
            elif wall in seen:
                fired = repeat in ("last", "both")
            else:
                fired = repeat in ("first", "both")
        if index and wall - walls[index - 1] > timedelta(minutes=1) and gap == "shift":
            probe = walls[index - 1] + timedelta(minutes=1)
            while probe < wall:
                fired = fired or cron_matches(cron, probe)
                probe += timedelta(minutes=1)
        seen.add(wall)
        if fired and start < instant <= end:
            fires.append(instant)
    return fires


TRANSITIONS = [
    ("America/New_York", "2025-03-09T07:00:00+00:00"),
    ("America/New_York", "2025-11-02T06:00:00+00:00"),
    ("Australia/Lord_Howe", "2025-04-05T15:00:00+00:00"),
    ("Australia/Lord_Howe", "2025-10-04T15:30:00+00:00"),
    ("Africa/Casablanca", "2025-02-23T02:00:00+00:00"),
    ("Antarctica/Troll", "2025-03-30T01:00:00+00:00"),
    ("Antarctica/Troll", "2025-10-26T01:00:00+00:00"),
]
ORACLE_CRONS = ["*/15 * * * *", "0,30 1,2 * * *", "*/20 2 * * *", "45 23,0,1,2,3 * * *"]
POLICIES = [(g, r) for g in ("shift", "skip") for r in ("first", "last", "both")]


@pytest.mark.parametrize(
    ("zone", "transition"),
    [pytest.param(z, t, id=f"{z.split('/')[-1].lower()}_{t[:10]}") for z, t in TRANSITIONS],
)
@pytest.mark.parametrize("cron", ORACLE_CRONS)
@pytest.mark.parametrize(("gap", "repeat"), POLICIES)
def test_policies_against_brute_force_oracle(
    zone: str, transition: str, cron: str, gap: str, repeat: str
) -> None:
    tz = ZoneInfo(zone)
    instant = datetime.fromisoformat(transition)
    start, end = instant - timedelta(hours=5), instant + timedelta(hours=5)
    expected = _oracle(cron, tz, gap, repeat, start, end)
    trigger = CronTrigger(cron, zone, gap, repeat)
    got = [f for f in preview(trigger, start, len(expected) + 1) if f <= end]
    assert [f.astimezone(UTC) for f in got] == expected
    for k in range(0, 600, 29):
        origin = start + timedelta(minutes=k, seconds=29)
        following = [f for f in expected if f > origin]
        found = next_fire(trigger, origin)
        if following:
            assert found is not None
            assert found.astimezone(UTC) == following[0]
