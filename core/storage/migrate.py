"""Apply Alembic migrations from code (``agentcron migrate``, ``make run``, tests), and say
plainly when the database a command names is missing, behind the code, or already holds
tables or a migration stamp that are not agentcron's."""

from __future__ import annotations

import shlex
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from alembic import command
from alembic.config import Config
from alembic.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import inspect, text
from sqlalchemy.engine import Connection, make_url
from sqlalchemy.exc import DBAPIError, SQLAlchemyError

from agentcron.core.errors import StartupError
from agentcron.core.storage.database import (
    Database,
    ensure_sqlite_dir,
    sqlite_file,
    unavailable,
)
from agentcron.core.storage.models import Base

# migrations/ sits beside the core package in the source tree (installed editable by `make`).
MIGRATIONS_DIR = Path(__file__).resolve().parents[2] / "migrations"
# PostgreSQL's SQLSTATE for "database ... does not exist" (invalid_catalog_name).
_NO_SUCH_DATABASE = "3D000"
_NO_PRIVILEGE = "42501"  # insufficient_privilege
_MIGRATE_FIRST = "run `agentcron migrate` (or `make migrate`) first"


def alembic_config(url: str, schema: str | None = None) -> Config:
    """An Alembic config that targets ``url`` (and ``schema`` in it, see ``upgrade``)
    regardless of the environment."""
    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS_DIR))
    config.attributes["url"] = url
    config.attributes["schema"] = schema
    return config


def upgrade(url: str, revision: str = "head", *, schema: str | None = None) -> None:
    """Bring the database at ``url`` to ``revision``. Blocking: call it off the event loop.

    ``schema`` (PostgreSQL): the tables and the migration stamp go there, the schema made
    first if it does not exist. A PostgreSQL database that does not exist raises
    ``StartupError`` saying how to create it, as do tables of agentcron's names that
    agentcron did not make (``refuse_foreign``); any other failure of the database
    ``SchedulerUnavailable`` (``store_errors``)."""
    if make_url(url).get_backend_name() == "sqlite":
        ensure_sqlite_dir(url)
    with _missing_or_unavailable(url):
        command.upgrade(alembic_config(url, schema), revision)


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
    return ScriptDirectory.from_config(alembic_config("")).get_current_head()


async def current_revision(db: Database) -> str | None:
    """The revision the database is at (None for an empty database). Tables or a stamp
    that are not agentcron's raise ``StartupError`` (``refuse_foreign``)."""

    def read(connection: Connection) -> str | None:
        refuse_foreign(connection, db.url, db.schema)
        return MigrationContext.configure(connection).get_current_revision()

    with _missing_or_unavailable(db.url):
        async with db.engine.connect() as connection:
            return await connection.run_sync(read)


async def check_schema(db: Database) -> None:
    """Refuse to start on a database that is missing or not at the code's migration head."""
    current, head = await current_revision(db), head_revision()
    if current != head:
        raise StartupError(
            f"{_where(db.url, db.schema)} is at schema {current or 'nothing'} but this version"
            f" needs {head}: {_MIGRATE_FIRST}"
        )


def ensure_schema(connection: Connection, url: str, schema: str) -> None:
    """Create ``schema`` in the database at ``url`` unless it exists. One that exists is used
    as it is, so a role without the database's CREATE privilege can migrate into a schema an
    administrator made for it; one it cannot create raises ``StartupError`` saying so."""
    found = connection.execute(text("SELECT 1 FROM pg_namespace WHERE nspname = :s"), {"s": schema})
    if found.first() is not None:
        return
    try:
        # IF NOT EXISTS: two replicas starting with migrate=True at once may both get here.
        connection.execute(text(f'CREATE SCHEMA IF NOT EXISTS "{schema}"'))
    except DBAPIError as exc:
        if getattr(exc.orig, "sqlstate", None) != _NO_PRIVILEGE:
            raise
        raise StartupError(
            f'cannot create the schema "{schema}" (database_schema) in'
            f" {_where(url, None)}: this role may not create schemas;"
            f' have it made with CREATE SCHEMA "{schema}" AUTHORIZATION <this role>'
        ) from None


def refuse_foreign(connection: Connection, url: str, schema: str | None) -> None:
    """Raise a one-line ``StartupError`` when where agentcron keeps its tables already holds
    something that is not agentcron's: a migration stamp of another tool (a host migrating
    with Alembic too), or, without agentcron's stamp, tables of the names agentcron creates
    (a host's own ``runs``, ``tasks``). Migrating over them would fail half-way on the
    driver's "already exists" or "can't locate revision"; the message names what clashes and
    the setting that keeps agentcron apart."""
    heads = MigrationContext.configure(connection).get_current_heads()
    script = ScriptDirectory.from_config(alembic_config(""))
    known = {revision.revision for revision in script.walk_revisions()}
    where, advice = _where(url, schema), _apart(url, schema)
    for head in heads:
        if head not in known:
            raise StartupError(
                f"{where} records migration {head} in alembic_version, which is not one of"
                f" agentcron's (another tool's migrations?): {advice}"
            )
    if heads:
        return
    clash = sorted(set(inspect(connection).get_table_names()) & set(Base.metadata.tables))
    if clash:
        raise StartupError(
            f"{where} already has tables named {', '.join(clash)} that agentcron did not"
            f" make (it records no agentcron migration): {advice}"
        )


def _where(url: str, schema: str | None) -> str:
    """How a message names the database (and schema) at ``url``, password hidden."""
    database = sqlite_file(url) or make_url(url).render_as_string(hide_password=True)
    if schema is None:
        return f"the database {database}"
    return f'the schema "{schema}" of the database {database}'


def _apart(url: str, schema: str | None) -> str:
    """What keeps agentcron's tables apart from what already is at ``url`` (and ``schema``)."""
    if make_url(url).get_backend_name() == "sqlite":
        return "give agentcron a database file of its own (AGENTCRON_DATABASE_URL)"
    if schema is not None:
        return "choose another schema (database_schema, AGENTCRON_DATABASE_SCHEMA)"
    return (
        "keep agentcron's tables in a schema of their own with the setting database_schema"
        ' (AGENTCRON_DATABASE_SCHEMA=agentcron, or Engine(database_schema="agentcron"))'
    )
