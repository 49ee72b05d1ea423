"""What an admitted attempt is handed: its runner, and the request that runner reads."""

from __future__ import annotations

from concurrent.futures import Executor
from pathlib import Path
from typing import Any

from agentcron.core.errors import InvalidSchedule, TargetUnavailable
from agentcron.core.ledger.store import TaskRef
from agentcron.core.runners import build_runner
from agentcron.core.runners.base import Runner, RunRequest
from agentcron.core.runners.containment import Containment
from agentcron.core.runners.handler import Handler, HandlerRunner, HandlerRunnerType
from agentcron.core.storage.models import Run


def runner_for(config: dict[str, Any], handler: Handler | None) -> Runner:
    """The runner of a run's saved ``runner`` config: the engine's own handler for a
    ``handler`` run (a callable, not a registered type), else its registered type.
    ``TargetUnavailable`` for a type that was valid when the run was made: its plug-in is gone."""
    if config.get("type") == HandlerRunnerType.name:
        return HandlerRunner(handler)
    try:
        return build_runner(config)
    except InvalidSchedule as exc:
        raise TargetUnavailable(exc.message) from exc


def request_for(
    run: Run,
    task: TaskRef,
    *,
    timeout: float,
    secrets: dict[str, str],
    instance_id: str,
    containment: Containment,
    threads: Executor | None = None,
) -> RunRequest:
    """The attempt as its runner sees it, from what the run saved (``run.payload``). Its
    task directory exists once this returns, the data directory above it included: every
    runner is handed it to keep files in between runs (an ``OSError`` making it is the
    attempt's transient failure)."""
    payload = run.payload
    workdir = Path(task.workdir)
    # Here, not in each runner: a handler or python target is handed the path (no process is
    # started in it), so only a directory made for it is one it can write to at once.
    workdir.mkdir(parents=True, exist_ok=True)
    return RunRequest(
        run_id=run.id,
        schedule_id=run.schedule_id,
        task_id=task.id,
        attempt=run.attempt,
        trigger=run.trigger,
        due_at=run.due_at,
        prompt=str(payload["prompt"]),
        workdir=workdir,
        timeout_seconds=timeout,
        history=list(task.conversation) if payload.get("mode") == "persistent" else [],
        secrets=secrets,
        instance_id=instance_id,
        containment=containment,
        payload=payload,
        replay_of=run.replay_of,
        threads=threads,
    )
