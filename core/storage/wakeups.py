"""Wake-ups across replicas: PostgreSQL NOTIFY when the timetable changes, and LISTEN for it.

Sent only for changes (a schedule created, edited, paused, a run queued), never per fire:
NOTIFY serialises the commits that send it. On SQLite there is one engine per file, which
hears its own changes directly (the services' ``on_change``), so both are no-ops there.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable

import asyncpg
from sqlalchemy.engine import make_url
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncSession

from agentcron.core.logging import get_logger
from agentcron.core.storage.database import Database
from agentcron.core.storage.scope import scoped
from agentcron.core.storage.sql.wakeups import notify

log = get_logger(__name__)

WAKE_CHANNEL = "agentcron_schedules"


def wake_channel(db: Database) -> str:
    """The channel of ``db``'s installation: ``agentcron_schedules``, or with a schema
    (``AGENTCRON_DATABASE_SCHEMA``) ``agentcron_schedules@<schema>``, so that an installation
    in another schema of the same database is never woken by this one's changes. At most 63
    bytes, PostgreSQL's limit (the schema name's length is bounded for it)."""
    return scoped(WAKE_CHANNEL, db.schema)


async def announce_change(db: Database, session: AsyncSession | AsyncConnection) -> None:
    """Tell other replicas, on commit of ``session``, that the timetable changed."""
    if db.capabilities.listen_notify:
        await session.execute(notify(wake_channel(db)))


async def listen(
    db: Database,
    on_wake: Callable[[], None],
    stopped: asyncio.Event,
    sleep: Callable[[float], Awaitable[None]],
) -> None:
    """Call ``on_wake`` for every change another replica announces, until ``stopped``; on a
    lost connection, reconnect with backoff (and wake once: changes made while not listening
    would otherwise wait for the tick). ``sleep(seconds)`` is an awaitable wait that ends
    early on stop."""
    dsn = make_url(db.url).set(drivername="postgresql").render_as_string(hide_password=False)
    backoff = 1.0
    while not stopped.is_set():
        conn: asyncpg.Connection | None = None
        try:
            conn = await asyncpg.connect(dsn, timeout=10)
            lost = asyncio.Event()
            conn.add_termination_listener(lambda _c, lost=lost: lost.set())
            await conn.add_listener(wake_channel(db), lambda *_args: on_wake())
            backoff = 1.0
            on_wake()
            stop = asyncio.ensure_future(stopped.wait())
            gone = asyncio.ensure_future(lost.wait())
            await asyncio.wait({stop, gone}, return_when=asyncio.FIRST_COMPLETED)
            stop.cancel()
            gone.cancel()
        except (OSError, asyncpg.PostgresError, TimeoutError) as exc:
            log.warning("listen_unavailable", error=type(exc).__name__)
            await sleep(backoff)
            backoff = min(backoff * 2, 30.0)
        finally:
            if conn is not None and not conn.is_closed():
                with contextlib.suppress(Exception):
                    await conn.close(timeout=2)
