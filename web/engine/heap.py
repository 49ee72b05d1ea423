"""The heap of a started service, settled once: collected, then frozen.

Python's full (generation 2) garbage collection walks every container object alive. A started
service holds about 200,000 of them (its modules, the app, SQLAlchemy's metadata and caches),
none of them garbage, and a busy engine makes a full collection every few seconds: in a
10,000-run burst, pauses of 100 to 140 ms each, during which the event loop runs nothing (no
run starts, no request is answered). Frozen (``gc.freeze``), they are left out of every later
collection, which then walks only what the service made since.

Then the youngest generation is collected after 25,000 new container objects rather than 700:
a run makes dozens of short-lived objects, nearly all freed by reference counting, and at the
default the engine spent about a tenth of a burst's CPU in young collections that found
little (a 10,000-run burst at concurrency 256: 2.45 and 2.49 s before, 2.26 and 2.25 s after,
engine CPU 2.14 to 1.94 s). A young collection then walks at most those 25,000 objects: a
few milliseconds.

The pauses were measured with ``gc.callbacks`` in the engine's process, the young threshold
by alternating bursts, both on PostgreSQL (docs/benchmarks.md: "a frozen heap", and "The
claim admits the queue ahead").
"""

from __future__ import annotations

import gc

from agentcron.core.logging import get_logger

log = get_logger(__name__)

YOUNG_THRESHOLD = 25_000  # new container objects between two young collections (default 700)


def settle_heap() -> None:
    """Collect what startup left behind, freeze the rest and collect the young generation
    less often: for a process that is the service (``agentcron serve``); a host embedding
    the engine may call it once its own app has started (docs/library.md). Objects frozen
    are never collected, so it is called once, after startup, not per request or per test."""
    gc.collect()
    gc.freeze()
    _, older, oldest = gc.get_threshold()
    gc.set_threshold(YOUNG_THRESHOLD, older, oldest)
    log.info("heap_settled", frozen=gc.get_freeze_count(), young_threshold=gc.get_threshold()[0])
