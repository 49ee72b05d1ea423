"""The async engine, sessions, and what the database can do (decided once, at start)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sqlalchemy import event
from sqlalchemy.engine import Connection, make_url
from sqlalchemy.exc import (
    DBAPIError,
    IntegrityError,
    InterfaceError,
    OperationalError,
    SQLAlchemyError,
)
from sqlalchemy.exc import TimeoutError as PoolTimeout
from sqlalchemy.ext.asyncio import (
    AsyncConnection,
    AsyncEngine,
    AsyncSession,
    async_sessionmaker,
    create_async_engine,
)

from agentcron.core.config import Settings
from agentcron.core.errors import SchedulerUnavailable
from agentcron.core.logging import get_logger
from agentcron.core.storage.scope import connect_args

log = get_logger(__name__)

# Execution option that asks SQLite for BEGIN IMMEDIATE: a write transaction takes the write
# lock up front and waits (busy_timeout) instead of failing on lock upgrade mid-transaction.
_WRITE = "agentcron_write"
SQLITE_BUSY_TIMEOUT_MS = 10_000
# PostgreSQL: the longest a connect or one statement may take. A link that hangs instead of
# failing (a partition, a frozen server) then raises SchedulerUnavailable in bounded time, so
# /readyz and the API answer 503 and the loop keeps ticking, instead of waiting for TCP to
# give up (minutes). Every statement the service sends is a small, bounded batch.
DATABASE_TIMEOUT_SECONDS = 10.0


@dataclass(frozen=True)
class Capabilities:
    """Dialect differences, decided once so no code tests ``dialect.name`` elsewhere."""

    dialect: str
    skip_locked: bool  # SELECT ... FOR UPDATE SKIP LOCKED
    listen_notify: bool  # cross-process wake-ups
    multi_process: bool  # several replicas may share this database
    # Replicas on several hosts judge due times and leases by the database's clock
    # (core.clock.DatabaseClock), which is the only clock they all share.
    database_clock: bool

    @classmethod
    def for_dialect(cls, name: str) -> Capabilities:
        if name == "postgresql":
            return cls(
                dialect=name,
                skip_locked=True,
                listen_notify=True,
                multi_process=True,
                database_clock=True,
            )
        # SQLite: one machine, one clock; there is nothing to measure.
        return cls(
            dialect=name,
            skip_locked=False,
            listen_notify=False,
            multi_process=False,
            database_clock=False,
        )


def _install_sqlite_hooks(engine: AsyncEngine) -> None:
    @event.listens_for(engine.sync_engine, "connect")
    def _on_connect(dbapi_connection: Any, _record: Any) -> None:
        # Take transaction control away from the sqlite3 module so BEGIN is ours (see _on_begin).
        dbapi_connection.isolation_level = None
        cursor = dbapi_connection.cursor()
        cursor.execute("PRAGMA journal_mode=WAL")
        cursor.execute(f"PRAGMA busy_timeout={SQLITE_BUSY_TIMEOUT_MS}")
        cursor.execute("PRAGMA foreign_keys=ON")
        cursor.execute("PRAGMA synchronous=NORMAL")
        cursor.close()

    @event.listens_for(engine.sync_engine, "begin")
    def _on_begin(conn: Connection) -> None:
        write = conn.get_execution_options().get(_WRITE, False)
        conn.exec_driver_sql("BEGIN IMMEDIATE" if write else "BEGIN")


def sqlite_file(url: str) -> Path | None:
    """The file of a SQLite database on disk, absolute; None for another backend, an
    in-memory database or a ``file:`` URI (whose options SQLite interprets, not us)."""
    parsed = make_url(url)
    database = parsed.database
    if parsed.get_backend_name() != "sqlite" or not database or database == ":memory:":
        return None
    if database.startswith("file:"):
        return None
    return Path(database).expanduser().resolve()


def ensure_sqlite_dir(url: str) -> None:
    """Create the directory of a SQLite database file (SQLite creates the file, not its folder)."""
    path = sqlite_file(url)
    if path is not None:
        path.parent.mkdir(parents=True, exist_ok=True)


class Database:
    """One async engine and its sessions.

    ``session(write=True)`` is a unit of work that commits on success and rolls back on error;
    on SQLite it begins IMMEDIATE. Every failure of the database surfaces as
    ``SchedulerUnavailable`` with the driver exception as ``__cause__`` (``store_errors``).
    """

    def __init__(
        self,
        url: str,
        *,
        schema: str | None = None,
        pool_size: int = 10,
        timeout: float = DATABASE_TIMEOUT_SECONDS,
    ) -> None:
        """``schema`` (PostgreSQL, ``AGENTCRON_DATABASE_SCHEMA``): the schema every connection
        looks in (``core.storage.scope``); None leaves the connection's search_path alone."""
        backend = make_url(url).get_backend_name()
        kwargs: dict[str, Any] = {}
        bounded: dict[str, Any] = {}
        connect = connect_args(url, schema)
        if backend == "postgresql":
            kwargs.update(pool_size=pool_size, max_overflow=pool_size, pool_pre_ping=True)
            kwargs["isolation_level"] = "READ COMMITTED"
            connect.update(timeout=timeout, command_timeout=timeout)
            bounded = {"connect_args": connect}
            kwargs.update(bounded)
        elif backend == "sqlite":
            ensure_sqlite_dir(url)
        self.url = url
        self.schema = schema
        self.engine = create_async_engine(url, **kwargs)
        self.capabilities = Capabilities.for_dialect(backend)
        if backend == "sqlite":
            _install_sqlite_hooks(self.engine)
        self._write_engine = self.engine.execution_options(**{_WRITE: True})
        self._read = async_sessionmaker(self.engine, expire_on_commit=False)
        self._write = async_sessionmaker(self._write_engine, expire_on_commit=False)
        # The engine's batched statements get a small pool of their own without pre-ping:
        # pinging before each batch would double its round trips, and a batch that meets a
        # dead connection is simply tried again by its caller on a fresh one.
        self._hot = self._write_engine
        self.engines: tuple[AsyncEngine, ...] = (self.engine,)  # every pool, for dispose/events
        if backend == "postgresql":
            self._hot = create_async_engine(
                url, pool_size=4, max_overflow=4, isolation_level="READ COMMITTED", **bounded
            )
            self.engines = (self.engine, self._hot)

    @classmethod
    def from_settings(cls, settings: Settings) -> Database:
        """The database ``settings`` name: its URL, schema and statement timeout."""
        return cls(
            settings.database_url,
            schema=settings.database_schema,
            timeout=settings.database_timeout_seconds,
        )

    @asynccontextmanager
    async def session(
        self, *, write: bool = True, conflicts: bool = False
    ) -> AsyncIterator[AsyncSession]:
        """A transaction: commit on normal exit, roll back on exception. ``conflicts``: the
        caller handles a constraint violation itself (a unique name two writers race for), so
        ``IntegrityError`` reaches it as it is (see ``store_errors``)."""
        maker = self._write if write else self._read
        with store_errors(conflicts=conflicts):
            async with maker() as session, session.begin():
                yield session

    @asynccontextmanager
    async def connection(self, *, single: bool = False) -> AsyncIterator[AsyncConnection]:
        """A write transaction on a plain connection, no ORM session: for the engine's batched
        statements, run thousands of times a minute, where the session's bookkeeping would
        cost more than the statements. Same commit, rollback and outage rules as ``session``.

        ``single``: the caller runs exactly one statement, which PostgreSQL then runs as its
        own transaction (autocommit), saving the BEGIN and COMMIT round trips.
        """
        with store_errors():
            if single and self.capabilities.dialect == "postgresql":
                async with self._hot.connect() as connection:
                    yield await connection.execution_options(isolation_level="AUTOCOMMIT")
            else:
                async with self._hot.begin() as connection:
                    yield connection

    async def ping(self) -> None:
        """Raise ``SchedulerUnavailable`` unless a trivial query succeeds."""
        from sqlalchemy import text

        async with self.session(write=False) as session:
            await session.execute(text("SELECT 1"))

    async def dispose(self) -> None:
        for engine in self.engines:
            await engine.dispose()


@contextmanager
def store_errors(*, conflicts: bool = False) -> Iterator[None]:
    """The one rule for failures of the database: every SQLAlchemy or driver error (or
    ``OSError``) raised in the block becomes ``SchedulerUnavailable`` in agentcron's words,
    with the driver's error as ``__cause__``, so no host, API response or MCP answer ever gets
    the driver's exception or text. ``conflicts``: an ``IntegrityError`` is the caller's to
    handle, and passes unchanged; unexpected, it is a failure like any other.

    A failure that is not the database going away (a statement it refused: a bug, or a
    constraint nobody expected) is logged with its traceback here, since the answer alone
    cannot say why."""
    try:
        yield
    except (SQLAlchemyError, OSError) as exc:
        if conflicts and isinstance(exc, IntegrityError):
            raise
        raise unavailable(exc) from exc


def unavailable(exc: SQLAlchemyError | OSError) -> SchedulerUnavailable:
    """``exc`` as the error a caller sees (raise it ``from exc``), per ``store_errors``."""
    if _is_outage(exc):
        return SchedulerUnavailable("the database is unavailable")
    log.error("database_error", error=type(exc).__name__, exc_info=exc)
    return SchedulerUnavailable("the database could not complete the request")


def _is_outage(exc: SQLAlchemyError | OSError) -> bool:
    """The database cannot be reached or will not serve now: "try again later", and nothing
    worth a traceback."""
    if isinstance(exc, OSError | PoolTimeout):
        return True
    if not isinstance(exc, DBAPIError):
        return False
    # No statement: the failure came while connecting (a server that refuses the database,
    # 55000 "not currently accepting connections", or one that is not there at all).
    if exc.statement is None or exc.connection_invalidated:
        return True
    if isinstance(exc, OperationalError | InterfaceError):
        return True
    # SQLSTATE classes: 08 connection exception, 53 insufficient resources (too many
    # connections), 57P operator intervention (shutdown, "not accepting connections").
    sqlstate = getattr(exc.orig, "sqlstate", None) or ""
    return sqlstate.startswith(("08", "53", "57P"))
