"""The retry policy shared by run attempts and notify deliveries."""

from __future__ import annotations

import random
from dataclasses import dataclass


@dataclass(frozen=True)
class RetryPolicy:
    """Bounded exponential backoff with jitter.

    Attempt ``n`` (1-based) that failed transiently is followed, if ``n < max_attempts``, by
    attempt ``n + 1`` after ``delay(n)`` seconds: ``min(cap, base * 2 ** (n - 1))`` scaled by a
    random factor in ``[1 - jitter, 1]`` so that many failures at once do not retry in lockstep.
    """

    max_attempts: int = 3
    base: float = 1.0
    cap: float = 60.0
    jitter: float = 0.5

    def __post_init__(self) -> None:
        if self.max_attempts < 1 or self.base < 0 or self.cap < 0 or not 0 <= self.jitter <= 1:
            raise ValueError("invalid retry policy")

    def should_retry(self, attempt: int) -> bool:
        """Whether a transient failure of ``attempt`` gets another attempt."""
        return attempt < self.max_attempts

    def delay(self, attempt: int, rng: random.Random | None = None) -> float:
        """Seconds to wait after the transient failure of ``attempt``."""
        raw = min(self.cap, self.base * 2.0 ** max(0, attempt - 1))
        draw = rng.random() if rng is not None else random.random()
        factor = 1 - self.jitter * draw
        return raw * factor
