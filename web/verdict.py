"""``Verdict``: what one attempt of a run came to, between its execution and its record.

It owns the shape ``web.engine`` hands from running an attempt to recording it (the outcome or
the error, and what kind of error: transient, a runner gone for good, or a cancel and its
reason), and the redaction that takes every resolved secret value out of it before anything is
recorded or logged.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from agentcron.core.runners import RunOutcome
from agentcron.core.secrets import redact
from agentcron.core.storage import Run


@dataclass
class Verdict:
    """What one attempt came to, waiting to be recorded."""

    run: Run
    workdir: str
    timeout: float
    bound: Any  # the run's bound logger
    batch: bool  # a prepared run: plain outcomes are recorded in a batch
    outcome: RunOutcome | None = None
    error: str | None = None
    transient: bool = False
    unavailable: bool = False  # the runner can no longer work at all: pause the schedule
    cancelled: str | None = None  # the cancel token's reason, if it was cancelled


def redact_verdict(verdict: Verdict, secrets: Mapping[str, str]) -> None:
    """Replace every resolved secret value in what the attempt will record (its output, its
    turns, its error) before it is recorded or logged: an agent that prints its key must not
    leak it through the API, a delivery or a log line."""
    verdict.error = redact(verdict.error, secrets)
    outcome = verdict.outcome
    if outcome is not None:
        verdict.outcome = RunOutcome(
            output=redact(outcome.output, secrets),
            turns=[
                {**turn, "content": redact(turn["content"], secrets)}
                if isinstance(turn.get("content"), str)
                else turn
                for turn in outcome.turns
            ],
        )
