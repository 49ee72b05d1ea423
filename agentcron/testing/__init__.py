"""The contract suite a host runs against its scheduler (needs pytest).

Subclass ``ProviderContract`` in a test module as ``Test...``, and give it ``make_engine(store)``
and ``fire_due_times(engine, key, start, end)``; for an ``agentcron.Engine`` the second is
``fire_engine_due_times`` on an engine built with ``clock=SettableClock()``. docs/library.md,
"The contract suite", shows a complete binding. The code is ``agentcron.testing.contract`` (the
checks) and ``agentcron.testing.kit`` (the kit).
"""

from __future__ import annotations

import pytest

# Registered before the import, so a failed check says what it compared.
pytest.register_assert_rewrite("agentcron.testing.contract", "agentcron.testing.kit")

from agentcron.testing.contract import ProviderContract  # noqa: E402
from agentcron.testing.kit import (  # noqa: E402
    OWNER,
    Call,
    EngineVerbs,
    HostHandler,
    Record,
    RunView,
    SettableClock,
    Store,
    fire_engine_due_times,
    next_hour,
    settle_engine,
    until,
)

__all__ = [
    "OWNER",
    "Call",
    "EngineVerbs",
    "HostHandler",
    "ProviderContract",
    "Record",
    "RunView",
    "SettableClock",
    "Store",
    "fire_engine_due_times",
    "next_hour",
    "settle_engine",
    "until",
]
