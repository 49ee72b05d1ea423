"""Loading third-party plug-ins from entry-point groups (``agentcron.runners``,
``agentcron.notifiers``)."""

from __future__ import annotations

from collections.abc import Callable
from importlib.metadata import entry_points
from typing import Any

from agentcron.core.logging import get_logger

log = get_logger(__name__)


def load_entry_points(group: str, register: Callable[[Any], None]) -> None:
    """Register every object the installed distributions declare in ``group``.

    An entry point may name an object or a class (then an instance is registered). A plug-in
    that fails to load is logged and skipped: one broken package must not take the service
    down, and its schedules pause themselves when they next run.
    """
    for entry in entry_points(group=group):
        try:
            loaded = entry.load()
            register(loaded() if isinstance(loaded, type) else loaded)
        except Exception:
            log.exception("plugin_failed", group=group, entry_point=entry.name)
