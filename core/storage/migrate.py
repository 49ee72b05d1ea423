"""Apply Alembic migrations from code (``agentcron migrate``, ``make run``, tests), and say
plainly when the database a command names is missing or behind the code."""

from __future__ import annotations

import shlex
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from alembic import command
from alembic.config import Config
from sqlalchemy.engine import Connection, make_url
from sqlalchemy.exc import DBAPIError, SQLAlchemyError

from agentcron.core.errors import StartupError
from agentcron.core.storage.database import (
    Database,
    ensure_sqlite_dir,
    sqlite_file,
    unavailable,
)

# migrations/ sits beside the core package in the source tree (installed editable by `make`).
MIGRATIONS_DIR = Path(__file__).resolve().parents[2] / "migrations"
# PostgreSQL's SQLSTATE for "database ... does not exist" (invalid_catalog_name).
_NO_SUCH_DATABASE = "3D000"
_MIGRATE_FIRST = "run `agentcron migrate` (or `make migrate`) first"


def alembic_config(url: str) -> Config:
    """An Alembic config that targets ``url`` regardless of the environment."""
    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS_DIR))
    config.attributes["url"] = url
    return config


def upgrade(url: str, revision: str = "head") -> None:
    """Bring the database at ``url`` to ``revision``. Blocking: call it off the event loop.

    A PostgreSQL database that does not exist raises ``StartupError`` saying how to create
    it; any other failure of the database ``SchedulerUnavailable`` (``store_errors``)."""
    if make_url(url).get_backend_name() == "sqlite":
        ensure_sqlite_dir(url)
    with _missing_or_unavailable(url):
        command.upgrade(alembic_config(url), revision)


@contextmanager
def _missing_or_unavailable(url: str) -> Iterator[None]:
    """``store_errors``, but a PostgreSQL database that does not exist is the ``StartupError``
    of ``missing_database``."""
    try:
        yield
    except DBAPIError as exc:
        missing = missing_database(url, exc)
        if missing is not None:
            raise missing from None
        raise unavailable(exc) from exc
    except (SQLAlchemyError, OSError) as exc:
        raise unavailable(exc) from exc


def missing_database(url: str, exc: DBAPIError) -> StartupError | None:
    """A one-line ``StartupError`` naming the PostgreSQL database ``exc`` says does not exist
    and the ``createdb`` command that makes it; None when ``exc`` is about something else."""
    if getattr(exc.orig, "sqlstate", None) != _NO_SUCH_DATABASE:
        return None
    parsed = make_url(url)
    host, port = parsed.host or "localhost", parsed.port or 5432
    createdb = ["createdb", "-h", host]
    if port != 5432:
        createdb += ["-p", str(port)]
    if parsed.username:
        createdb += ["-U", parsed.username]
    createdb.append(parsed.database or "")
    return StartupError(
        f'database "{parsed.database}" does not exist on {host}:{port}; '
        f"create it with: {shlex.join(createdb)}"
    )


def require_database_file(url: str) -> None:
    """Refuse a SQLite database whose file does not exist, before anything connects: SQLite
    would create an empty file, which then hides the real database from the next command."""
    path = sqlite_file(url)
    if path is not None and not path.exists():
        raise StartupError(
            f"there is no database at {path} (AGENTCRON_DATABASE_URL, relative to the current"
            f" directory): {_MIGRATE_FIRST} to create it, or run from the directory that has it"
        )


def head_revision() -> str | None:
    """The newest migration in ``migrations/versions``."""
    from alembic.script import ScriptDirectory

    return ScriptDirectory.from_config(alembic_config("")).get_current_head()


async def current_revision(db: Database) -> str | None:
    """The revision the database is at (None for an empty database)."""
    from alembic.migration import MigrationContext

    def read(connection: Connection) -> str | None:
        return MigrationContext.configure(connection).get_current_revision()

    with _missing_or_unavailable(db.url):
        async with db.engine.connect() as connection:
            return await connection.run_sync(read)


async def check_schema(db: Database) -> None:
    """Refuse to start on a database that is missing or not at the code's migration head."""
    current, head = await current_revision(db), head_revision()
    if current != head:
        where = sqlite_file(db.url) or make_url(db.url).render_as_string(hide_password=True)
        raise StartupError(
            f"the database {where} is at schema {current or 'nothing'} but this version needs"
            f" {head}: {_MIGRATE_FIRST}"
        )
