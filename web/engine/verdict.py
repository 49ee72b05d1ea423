"""``Verdict``: what one attempt of a run came to, between its execution and its record.

It owns the shape ``web.engine.run`` hands from running an attempt to recording it (the outcome or
the error, and what kind of error: transient, a runner gone for good, or a cancel and its
reason), and the redaction that takes every resolved secret value out of it before anything is
recorded or logged.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from functools import cached_property
from typing import Any

from agentcron.core.runners.base import RunOutcome
from agentcron.core.secrets.redaction import redact, redact_json
from agentcron.core.storage.models import Run
from agentcron.web.engine.delivery import run_log


@dataclass
class Verdict:
    """What one attempt came to, waiting to be recorded."""

    run: Run
    workdir: str
    timeout: float
    owner: str  # this engine's instance id, named in every line about the run
    task_id: uuid.UUID
    batch: bool  # a prepared run: plain outcomes are recorded in a batch
    outcome: RunOutcome | None = None
    error: str | None = None
    transient: bool = False
    unavailable: bool = False  # the runner can no longer work at all: pause the schedule
    cancelled: str | None = None  # the cancel token's reason, if it was cancelled
    partial: str | None = None  # what a stopped attempt's agent had written (``AttemptStopped``)

    @cached_property
    def bound(self) -> Any:
        """The logger of every line about this attempt, bound at the first line: with the
        engine's info lines off (``AGENTCRON_LOG_LEVEL=WARNING``) a run that goes well binds
        none (binding it and building its two info lines were about a sixth of the engine's
        own work per run)."""
        return run_log(self.run, self.owner, attempt=self.run.attempt, task_id=str(self.task_id))


def redact_verdict(verdict: Verdict, secrets: Mapping[str, str]) -> None:
    """Replace every resolved secret value in what the attempt will record (its output, its
    turns, its result, its error) before it is recorded or logged: an agent that prints its
    key must not leak it through the API, a delivery or a log line."""
    verdict.error = redact(verdict.error, secrets)
    verdict.partial = redact(verdict.partial, secrets)
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
            result=redact_json(outcome.result, secrets),
        )
