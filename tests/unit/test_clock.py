"""DatabaseClock arithmetic: the skew is the database's reading minus the round trip's midpoint,
and the clock tells local time plus that skew."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from agentcron.core.clock import DatabaseClock

T = datetime(2025, 6, 1, 12, 0, tzinfo=UTC)


class FakeLocal:
    """A local clock the test sets."""

    def __init__(self, now: datetime) -> None:
        self.now = now

    def __call__(self) -> datetime:
        return self.now


def test_before_any_measurement_it_is_the_local_clock() -> None:
    local = FakeLocal(T)
    clock = DatabaseClock(local)
    assert clock() == T and clock.skew_seconds == 0 and not clock.skewed
    assert clock.measured_at is None


@pytest.mark.parametrize(
    ("before", "reading", "after", "skew"),
    [
        # The local clock is 30 s slow: it read T-30.2 before and T-29.8 after the database's T.
        (T - timedelta(seconds=30.2), T, T - timedelta(seconds=29.8), 30.0),
        # A fast local clock gives a negative skew.
        (T + timedelta(seconds=60), T, T + timedelta(seconds=60, milliseconds=2), -60.001),
    ],
)
def test_skew_is_the_database_reading_minus_the_midpoint_of_the_round_trip(
    before: datetime, reading: datetime, after: datetime, skew: float
) -> None:
    local = FakeLocal(before)
    clock = DatabaseClock(local)
    assert clock.observe(before, reading, after) == skew
    assert clock.round_trip == after - before
    local.now = before + (after - before) / 2  # local time moves on; the skew goes with it
    assert clock() == reading
    local.now += timedelta(seconds=5)
    assert clock() == reading + timedelta(seconds=5)


def test_skewed_past_the_threshold_either_way() -> None:
    clock = DatabaseClock(FakeLocal(T), warn_seconds=2.0)
    for seconds, skewed in ((2.0, False), (2.001, True), (-2.0, False), (-3.0, True), (0, False)):
        clock.observe(T, T + timedelta(seconds=seconds), T)
        # The latest measurement wins: the one before it said otherwise.
        assert (clock.skew_seconds, clock.skewed) == (seconds, skewed)
