"""The heap of a started service, settled once: collected, then frozen.

Python's full (generation 2) garbage collection walks every container object alive. A started
service holds about 200,000 of them (its modules, the app, SQLAlchemy's metadata and caches),
none of them garbage, and a busy engine makes a full collection every few seconds: in a
10,000-run burst, pauses of 100 to 140 ms each, during which the event loop runs nothing (no
run starts, no request is answered). Frozen (``gc.freeze``), they are left out of every later
collection, which then walks only what the service made since.
"""

from __future__ import annotations

import gc

from agentcron.core.logging import get_logger

log = get_logger(__name__)


def settle_heap() -> None:
    """Collect what startup left behind, then freeze the rest: for a process that is the
    service (``agentcron serve``); a host embedding the engine may call it once its own app
    has started (docs/library.md). Objects frozen are never collected, so it is called once,
    after startup, not per request or per test."""
    gc.collect()
    gc.freeze()
    log.info("heap_settled", frozen=gc.get_freeze_count())
