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
from datetime import datetime
from functools import cached_property
from typing import Any

from agentcron.core.ledger.store import Outcome
from agentcron.core.runners.base import RunOutcome
from agentcron.core.secrets.redaction import redact, redact_json
from agentcron.core.states import RunStatus
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

    def to_record(self, retry_at: datetime | None) -> Outcome | None:
        """What the store records of the attempt (``RunStore.record``); None when nothing is
        recorded: an attempt stopped without an outcome (shutdown, a lease lost or
        unconfirmed) is given back or was taken, and goes on as a new attempt. ``retry_at``:
        when a transient failure is tried again, None when no attempt is left."""
        run, cancelled = self.run, self.cancelled
        if cancelled == "timeout":
            # The half-finished output is not kept: channels that ask for timed_out runs get
            # the record without it (docs/design.md, promise 8).
            return Outcome(run, RunStatus.TIMED_OUT, error=f"timed out after {self.timeout:g} s")
        if cancelled == "cancel":
            # A cancelled run keeps what its agent had printed: nothing is delivered for it.
            return Outcome(run, RunStatus.CANCELLED, output=self.partial)
        if cancelled is not None:
            return None
        if self.outcome is not None and self.error is None:
            done = self.outcome
            result = None if done.result is None else dict(done.result)
            return Outcome(
                run, RunStatus.SUCCEEDED, output=done.output, result=result, turns=done.turns
            )
        if self.transient and retry_at is not None:
            return Outcome(run, RunStatus.PENDING, error=self.error, retry_at=retry_at)
        return Outcome(run, RunStatus.FAILED, error=self.error, pause_schedule=self.unavailable)


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
