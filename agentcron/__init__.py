"""agentcron: a scheduler for AI-agent work.

The installed package: ``agentcron.core`` (the service layer, no HTTP) and ``agentcron.web``
(the FastAPI app, the engine's loop, the CLI), with the database migrations inside it. In the
repository they are the top-level ``core/``, ``web/`` and ``migrations/`` folders, which this
directory links to.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

# The public API, imported on first use: `agentcron` itself stays light, so the HTTP-only CLI
# (`agentcron.web.cli`) loads neither the database nor the server side.
_PUBLIC = {
    "Engine": "agentcron.web.host",
    "ConfigurationError": "agentcron.web.api.hosting",
    "Properties": "agentcron.web.host",
    "HandlerContext": "agentcron.core.runners.handler",
    "RunOutcome": "agentcron.core.runners.base",
    "RunPermanentError": "agentcron.core.errors",
    # The errors a host tells apart by class (their messages are safe to show).
    "AgentcronError": "agentcron.core.errors",
    "InvalidSchedule": "agentcron.core.errors",
    "NotFound": "agentcron.core.errors",
    "ScheduleCapacityExceeded": "agentcron.core.errors",
    "SchedulerUnavailable": "agentcron.core.errors",
    "Applied": "agentcron.core.schedules.keyed",
    "Reconciled": "agentcron.core.schedules.keyed",
    "TransientRunError": "agentcron.core.runners.base",
    "Principal": "agentcron.core.keys",
    "ScheduleCreate": "agentcron.core.specs",
    "ScheduleUpdate": "agentcron.core.specs",
}
__all__ = [
    "AgentcronError",
    "Applied",
    "ConfigurationError",
    "Engine",
    "HandlerContext",
    "InvalidSchedule",
    "NotFound",
    "Principal",
    "Properties",
    "Reconciled",
    "RunOutcome",
    "RunPermanentError",
    "ScheduleCapacityExceeded",
    "ScheduleCreate",
    "ScheduleUpdate",
    "SchedulerUnavailable",
    "TransientRunError",
]

if TYPE_CHECKING:
    from agentcron.core.errors import (
        AgentcronError,
        InvalidSchedule,
        NotFound,
        RunPermanentError,
        ScheduleCapacityExceeded,
        SchedulerUnavailable,
    )
    from agentcron.core.keys import Principal
    from agentcron.core.runners.base import RunOutcome, TransientRunError
    from agentcron.core.runners.handler import HandlerContext
    from agentcron.core.schedules.keyed import Applied, Reconciled
    from agentcron.core.specs import ScheduleCreate, ScheduleUpdate
    from agentcron.web.api.hosting import ConfigurationError
    from agentcron.web.host import Engine, Properties


def __getattr__(name: str) -> Any:
    if name not in _PUBLIC:
        raise AttributeError(f"module 'agentcron' has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(_PUBLIC[name]), name)
    globals()[name] = value
    return value
