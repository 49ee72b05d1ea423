"""A scripted runner for tests: ``FakeRunner`` (with a call log) and the ``fake`` runner type.

The fake stands beside the ``Runner`` seam the way an in-memory connector stands beside a
database: it plays a script of steps instead of running an agent, and records every call so a
test can assert what the engine asked for (run id, attempt, task id, prompt).

It is **not** registered in production. A test registers it::

    fake_type = FakeRunnerType()
    register_runner_type(fake_type)
    runner = fake_type.script("flaky", [transient(), transient(), succeed("done")],
                              per_attempt=True)
    spec = ScheduleCreate(..., runner=fake_type.config("flaky"))

A schedule's runner configuration is ``{"type": "fake", "script": "<key>"}`` (``script``
defaults to ``"default"``, a runner that always succeeds with ``"ok"``). ``build`` returns the
scripted instance itself, so every attempt of every run shares one call log.

Step semantics (one step per call of ``run``):

- ``succeed(output)``: return ``RunOutcome(output)``;
- ``transient(message)``: raise ``TransientRunError`` (the engine retries while attempts
  remain);
- ``permanent(message)``: raise ``RunPermanentError`` (the engine fails the run at once);
- ``sleep(seconds, output)``: wait ``seconds`` while watching the cancel token; if the token is
  set first, raise ``RunPermanentError("cancelled (<reason>)")`` at once (as the command
  runner does), otherwise return ``RunOutcome(output)``.

A token already set when a step starts cancels that step the same way.
"""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from agentcron.core.errors import InvalidSchedule, RunPermanentError
from agentcron.core.runners.base import (
    CancelToken,
    Runner,
    RunOutcome,
    RunRequest,
    TransientRunError,
)

DEFAULT_SCRIPT = "default"

Action = Literal["succeed", "transient", "permanent", "sleep"]


@dataclass(frozen=True)
class Step:
    """One scripted call of ``FakeRunner.run``; build it with the helpers below."""

    action: Action
    output: str = "ok"
    message: str = ""
    seconds: float = 0.0


def succeed(output: str = "ok") -> Step:
    """A step that returns ``RunOutcome(output)``."""
    return Step("succeed", output=output)


def transient(message: str = "temporary failure") -> Step:
    """A step that raises ``TransientRunError(message)``."""
    return Step("transient", message=message)


def permanent(message: str = "permanent failure") -> Step:
    """A step that raises ``RunPermanentError(message)``."""
    return Step("permanent", message=message)


def sleep(seconds: float, output: str = "slept") -> Step:
    """A step that waits ``seconds`` (honouring the cancel token), then succeeds."""
    if seconds < 0:
        raise ValueError("seconds must be >= 0")
    return Step("sleep", output=output, seconds=seconds)


class FakeRunner:
    """Plays a script of ``Step``; records every call.

    By default steps are consumed in call order, across every run that uses this runner; once
    the script is exhausted its last step repeats (an empty script always succeeds with
    ``"ok"``). With ``per_attempt=True`` the step is chosen by ``request.attempt`` instead
    (attempt ``n`` plays ``steps[n - 1]``, the last step repeating), so runs executing side by
    side each follow the script on their own.

    Observable state, for assertions:

    - ``calls``: every ``RunRequest`` received, in order;
    - ``cancelled``: ``(run_id, reason)`` of each call stopped by its cancel token;
    - ``running``: run ids of the calls executing now; ``max_running``: the most at once.
    """

    def __init__(self, steps: Sequence[Step] = (), *, per_attempt: bool = False) -> None:
        self.steps = list(steps)
        self.per_attempt = per_attempt
        self.calls: list[RunRequest] = []
        self.cancelled: list[tuple[uuid.UUID, str | None]] = []
        self.running: set[uuid.UUID] = set()
        self.max_running = 0
        self._changed = asyncio.Condition()

    def _step(self, request: RunRequest) -> Step:
        if not self.steps:
            return succeed()
        index = request.attempt - 1 if self.per_attempt else len(self.calls) - 1
        return self.steps[max(0, min(index, len(self.steps) - 1))]

    def attempts(self, run_id: uuid.UUID) -> list[int]:
        """The ``attempt`` numbers this runner saw for ``run_id``, in call order."""
        return [call.attempt for call in self.calls if call.run_id == run_id]

    async def wait_calls(self, count: int) -> None:
        """Return once at least ``count`` calls were made (bound it with ``asyncio.timeout``)."""
        async with self._changed:
            await self._changed.wait_for(lambda: len(self.calls) >= count)

    async def _notify(self) -> None:
        async with self._changed:
            self._changed.notify_all()

    async def run(self, request: RunRequest, cancel: CancelToken) -> RunOutcome:
        """Record the call, then play the step for it (see the module docstring)."""
        self.calls.append(request)
        step = self._step(request)
        self.running.add(request.run_id)
        self.max_running = max(self.max_running, len(self.running))
        await self._notify()
        try:
            if cancel.cancelled:
                self._stopped(request, cancel)
            if step.action == "sleep":
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(step.seconds):
                        await cancel.wait()
                if cancel.cancelled:
                    self._stopped(request, cancel)
                return RunOutcome(output=step.output)
            if step.action == "transient":
                raise TransientRunError(step.message)
            if step.action == "permanent":
                raise RunPermanentError(step.message)
            return RunOutcome(output=step.output)
        finally:
            self.running.discard(request.run_id)

    def _stopped(self, request: RunRequest, cancel: CancelToken) -> None:
        self.cancelled.append((request.run_id, cancel.reason))
        raise RunPermanentError(f"cancelled ({cancel.reason})")


class FakeRunnerType:
    """The ``fake`` runner type: ``{"type": "fake", "script": "<key>"?}``.

    Holds the scripted runners by key; ``validate`` refuses a key that was never scripted
    (``InvalidSchedule`` on ``runner.script``), so a typo fails at create time, not at run time.
    """

    def __init__(self, name: str = "fake") -> None:
        self.name = name
        self.runners: dict[str, FakeRunner] = {DEFAULT_SCRIPT: FakeRunner()}

    @property
    def default(self) -> FakeRunner:
        """The runner of configurations that name no script (always succeeds)."""
        return self.runners[DEFAULT_SCRIPT]

    def script(
        self, key: str, steps: Sequence[Step] = (), *, per_attempt: bool = False
    ) -> FakeRunner:
        """Create (or replace) the runner for ``key`` and return it."""
        runner = FakeRunner(steps, per_attempt=per_attempt)
        self.runners[key] = runner
        return runner

    def config(self, key: str = DEFAULT_SCRIPT) -> dict[str, Any]:
        """The schedule ``runner`` configuration that plays the script ``key``."""
        return {"type": self.name, "script": key}

    def validate(self, config: Mapping[str, Any]) -> dict[str, Any]:
        """Normalise ``config``; ``InvalidSchedule`` for unknown fields or scripts."""
        unknown = set(config) - {"type", "script"}
        if unknown:
            field = sorted(unknown)[0]
            raise InvalidSchedule(f"unknown field {field!r}", field=f"runner.{field}")
        key = config.get("script", DEFAULT_SCRIPT)
        if not isinstance(key, str) or key not in self.runners:
            raise InvalidSchedule(f"no fake script {key!r}", field="runner.script")
        return {"type": self.name, "script": key}

    def build(self, config: Mapping[str, Any]) -> Runner:
        """The scripted runner itself (shared by every attempt, so one call log)."""
        key = str(config.get("script", DEFAULT_SCRIPT))
        try:
            return self.runners[key]
        except KeyError:
            raise InvalidSchedule(f"no fake script {key!r}", field="runner.script") from None


__all__ = [
    "FakeRunner",
    "FakeRunnerType",
    "Step",
    "permanent",
    "sleep",
    "succeed",
    "transient",
]
