"""Liveness on PostgreSQL: each engine holds a session-level advisory lock for its whole life.

A lease is a timestamp its holder must keep renewing, so a dead holder is noticed only once
the lease runs out. A database session is a signal the database itself keeps: when the
process behind it vanishes (SIGKILL, a crash, the host gone), the kernel closes its socket,
the server ends the session and releases every lock it held. So each engine takes
``pg_advisory_lock(hashtextextended('agentcron:' || owner, 0))`` (``'agentcron@<schema>:'``
with ``AGENTCRON_DATABASE_SCHEMA``) on one dedicated connection (outside the pool: a pooled
connection is handed back and forth, the lock must stay put), and the loop's one idle
statement (``sql.wakeups.next_wakeup``) also reports the owners of active runs whose lock nobody
holds. ``Suspects`` turns two such sightings at least ``CONFIRM_SECONDS`` apart into "dead";
the next claim takes that owner's runs over, checking again in the claim statement that its
lock is still free.

The cost per replica: one more connection, one lock, and nothing per run. A replica that
loses its own session (a database restart, a terminated backend) cannot vouch for its runs
any more: ``on_change`` tells the engine, which freezes or stops its attempts and claims
nothing until the lock is taken again.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from sqlalchemy.exc import DBAPIError
from sqlalchemy.ext.asyncio import AsyncConnection, create_async_engine
from sqlalchemy.pool import NullPool

from agentcron.core.config import Settings
from agentcron.core.logging import get_logger
from agentcron.core.storage.database import Database
from agentcron.core.storage.sql import liveness as q

log = get_logger(__name__)

# An owner seen lockless twice, this far apart, is dead: a session that is being replaced
# (a reconnect) is given that long, and a pg_locks read racing a lock being taken is not
# enough to take anyone's runs.
CONFIRM_SECONDS = 0.25
# While other owners hold active runs, the loop looks at least this often: the detection
# bound is about twice this, plus the time the server takes to end a dead session.
WATCH_SECONDS = 1.0
RETRY_SECONDS = (0.1, 2.0)  # reconnect backoff, first and longest


def promised_recovery(multi_process: bool, settings: Settings) -> float:
    """The longest a dead engine's run waits before it is continued (``Properties``).

    PostgreSQL with liveness: a look (``WATCH_SECONDS`` apart at most while others hold
    runs), the confirming look and the claim, with a second of margin for the server to end
    the dead session: about 2 s. (A replica that took runs and died before anyone looked is
    seen at the others' next look: they look at every due time and every NOTIFY, at the
    latest after a tick.) Without: the lease runs out, then the next claim (at most a tick
    later). SQLite: the restarted engine's first claim takes its predecessor's runs.
    """
    if not multi_process:
        return 0.0
    if settings.liveness:
        return 2 * WATCH_SECONDS + CONFIRM_SECONDS
    return settings.lease_seconds + settings.scheduler_tick_seconds


def noticed_by(multi_process: bool, liveness: bool) -> str:
    """How a dead engine is noticed, as ``engine_started`` says it."""
    if not multi_process:
        return "file lock: a restarted engine continues its predecessor's runs at once"
    return "session lock" if liveness else "lease"


@dataclass
class Suspects:
    """Owners seen without a liveness lock, and since when (the loop's ``time.monotonic``)."""

    since: dict[str, float] = field(default_factory=dict)

    def observe(self, lockless: Iterable[str], at: float) -> frozenset[str]:
        """Record one look; return the owners now known dead (lockless since at least
        ``CONFIRM_SECONDS`` ago, without a look in between that found them locked)."""
        seen = set(lockless)
        self.since = {owner: self.since.get(owner, at) for owner in seen}
        return frozenset(o for o, first in self.since.items() if at - first >= CONFIRM_SECONDS)

    @property
    def pending(self) -> bool:
        """Some owner was seen lockless once: look again after ``CONFIRM_SECONDS``."""
        return bool(self.since)


class Liveness:
    """This engine's liveness lock, on a connection of its own, re-taken whenever it is lost.

    ``held`` is True only while the lock is known held; ``on_change(held)`` is called at every
    change (from the event loop), and ``changed`` is set then too, for a loop waiting on it.
    """

    def __init__(
        self, db: Database, owner: str, on_change: Callable[[bool], None] | None = None
    ) -> None:
        self.owner = owner
        self.schema = db.schema  # the installation whose lock this is (liveness_key)
        self.on_change = on_change
        self.held = False
        self.changed = asyncio.Event()
        # NullPool: the connection is the engine's for its life, never a pool's to recycle.
        self._engine = create_async_engine(
            db.url,
            poolclass=NullPool,
            connect_args={"timeout": 10, "command_timeout": 10},
        )

    def _set(self, held: bool) -> None:
        if held == self.held:
            return
        self.held = held
        self.changed.set()
        log.info("liveness_held" if held else "liveness_lost", instance_id=self.owner)
        if self.on_change is not None:
            self.on_change(held)

    async def keep(self) -> None:
        """Hold the lock until cancelled; on loss, report it and take the lock again."""
        backoff = RETRY_SECONDS[0]
        try:
            while True:
                try:
                    async with self._engine.connect() as connection:
                        await self._hold(connection)
                        backoff = RETRY_SECONDS[0]  # it was held: the next loss starts fresh
                except (OSError, DBAPIError, TimeoutError) as exc:
                    log.warning("liveness_unavailable", error=type(exc).__name__)
                finally:
                    self._set(False)
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, RETRY_SECONDS[1])
        finally:
            with contextlib.suppress(Exception):
                await self._engine.dispose()

    async def _hold(self, connection: AsyncConnection) -> None:
        connection = await connection.execution_options(isolation_level="AUTOCOMMIT")
        raw = await connection.get_raw_connection()
        lost = asyncio.Event()
        # asyncpg reads the socket all the time, so a session the server ended (terminated
        # backend, restart) is known here at once, without a statement to find out.
        raw.driver_connection.add_termination_listener(lambda _conn: lost.set())  # type: ignore[union-attr]
        while not (await connection.execute(q.take_liveness(self.owner, self.schema))).scalar():
            # Another session holds this owner's lock: two processes with one instance id,
            # or a predecessor's session the server has not ended yet.
            log.warning("liveness_lock_busy", instance_id=self.owner)
            await asyncio.sleep(RETRY_SECONDS[1])
        self._set(True)
        await lost.wait()
