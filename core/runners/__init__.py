"""The agent seam: the registry of runner types. The ``Runner`` and ``RunnerType`` protocols,
what an attempt is handed and what it returns are in ``core.runners.base``.

A schedule's ``runner`` object names a registered type; its configuration is validated when the
schedule is created or updated, never first at run time. Built-in types are registered below;
third parties add theirs through the ``agentcron.runners`` entry-point group (a ``RunnerType``
object, or a class whose instances are one).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from agentcron.core.errors import InvalidSchedule
from agentcron.core.plugins import load_entry_points
from agentcron.core.runners.base import Runner, RunnerType
from agentcron.core.runners.command.config import CommandRunnerType
from agentcron.core.runners.handler import Handler, HandlerRunner, HandlerRunnerType
from agentcron.core.runners.openai.config import OpenAIRunnerType
from agentcron.core.runners.python import PythonRunnerType

ENTRY_POINT_GROUP = "agentcron.runners"
_REGISTRY: dict[str, RunnerType] = {}
_plugins_loaded = False


def _load_plugins() -> None:
    global _plugins_loaded
    if _plugins_loaded:
        return
    _plugins_loaded = True
    load_entry_points(ENTRY_POINT_GROUP, register_runner_type)


def register_runner_type(runner_type: RunnerType) -> None:
    """Make ``runner_type`` available to schedules under ``runner_type.name``."""
    _REGISTRY[runner_type.name] = runner_type


def runner_type(name: str) -> RunnerType:
    """The registered type called ``name``; ``InvalidSchedule`` if there is none."""
    _load_plugins()
    try:
        return _REGISTRY[name]
    except KeyError:
        known = ", ".join(sorted(_REGISTRY))
        raise InvalidSchedule(
            f"unknown runner type {name!r}; known types: {known}", field="runner.type"
        ) from None


def validate_runner(config: Mapping[str, Any]) -> dict[str, Any]:
    """Check a runner configuration and return its normalised form.

    Raises ``InvalidSchedule`` naming the field (``runner.type``, ``runner.argv.0``...).
    """
    kind = config.get("type")
    if not isinstance(kind, str):
        raise InvalidSchedule("runner.type is required (a string)", field="runner.type")
    return runner_type(kind).validate(config)


def build_runner(config: Mapping[str, Any], handler: Handler | None = None) -> Runner:
    """A runner instance for a stored (already validated) configuration; a ``handler`` run's
    calls ``handler``, the engine's own callable (a host's, not a registered type)."""
    if config.get("type") == HandlerRunnerType.name:
        return HandlerRunner(handler)
    return runner_type(str(config["type"])).build(config)


register_runner_type(CommandRunnerType())
register_runner_type(HandlerRunnerType())
register_runner_type(OpenAIRunnerType())
register_runner_type(PythonRunnerType())

__all__ = [
    "build_runner",
    "register_runner_type",
    "runner_type",
    "validate_runner",
]
