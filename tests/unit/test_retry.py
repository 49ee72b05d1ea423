"""``RetryPolicy``: bounded exponential backoff with jitter, shared by runs and deliveries."""

from __future__ import annotations

import random

import pytest

from agentcron.core.retry import RetryPolicy


class FixedDraw(random.Random):
    """A random source whose ``random()`` always returns ``value``."""

    def __init__(self, value: float) -> None:
        super().__init__(0)
        self.value = value

    def random(self) -> float:
        return self.value


def test_delay_doubles_per_attempt_up_to_the_cap() -> None:
    policy = RetryPolicy(max_attempts=100, base=0.5, cap=30, jitter=0)
    assert [policy.delay(n) for n in range(1, 8)] == [0.5, 1.0, 2.0, 4.0, 8.0, 16.0, 30]
    assert policy.delay(99) == 30  # no overflow, no growth past the cap


def test_jitter_stays_within_one_minus_jitter_and_one_of_the_raw_delay() -> None:
    policy = RetryPolicy(max_attempts=10, base=2, cap=60, jitter=0.25)
    for attempt in range(1, 10):
        raw = min(60.0, 2 * 2.0 ** (attempt - 1))
        assert policy.delay(attempt, FixedDraw(0.0)) == raw
        assert policy.delay(attempt, FixedDraw(0.999999)) == pytest.approx(raw * 0.75, rel=1e-5)
        rng = random.Random(attempt)
        for _ in range(200):
            assert raw * 0.75 <= policy.delay(attempt, rng) <= raw


def test_jitter_spreads_simultaneous_failures() -> None:
    policy = RetryPolicy(base=1, cap=60, jitter=0.5)
    # Drawn from the module's random source unless given one.
    delays = {round(policy.delay(3), 6) for _ in range(50)}
    assert len(delays) > 40  # not lockstep
    assert all(2.0 <= d <= 4.0 for d in delays)


def test_should_retry_until_max_attempts() -> None:
    policy = RetryPolicy(max_attempts=3)
    assert [policy.should_retry(n) for n in (1, 2, 3, 4)] == [True, True, False, False]
    assert RetryPolicy(max_attempts=1).should_retry(1) is False


@pytest.mark.parametrize(
    "kwargs",
    [
        {"max_attempts": 0},
        {"base": -1.0},
        {"cap": -0.5},
        {"jitter": -0.1},
        {"jitter": 1.5},
    ],
)
def test_invalid_policies_are_refused(kwargs: dict[str, float]) -> None:
    with pytest.raises(ValueError):
        RetryPolicy(**kwargs)  # type: ignore[arg-type]
