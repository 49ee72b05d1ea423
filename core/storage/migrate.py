"""Apply Alembic migrations from code (``agentcron migrate``, ``make run``, tests)."""

from __future__ import annotations

from pathlib import Path

from alembic import command
from alembic.config import Config
from sqlalchemy.engine import Connection, make_url
from sqlalchemy.exc import DBAPIError

from core.errors import SchedulerUnavailable, StartupError
from core.storage.database import Database, ensure_sqlite_dir

# migrations/ sits beside the core package in the source tree (installed editable by `make`).
MIGRATIONS_DIR = Path(__file__).resolve().parents[2] / "migrations"


def alembic_config(url: str) -> Config:
    """An Alembic config that targets ``url`` regardless of the environment."""
    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS_DIR))
    config.attributes["url"] = url
    return config


def upgrade(url: str, revision: str = "head") -> None:
    """Bring the database at ``url`` to ``revision``. Blocking: call it off the event loop."""
    if make_url(url).get_backend_name() == "sqlite":
        ensure_sqlite_dir(url)
    command.upgrade(alembic_config(url), revision)


def head_revision() -> str | None:
    """The newest migration in ``migrations/versions``."""
    from alembic.script import ScriptDirectory

    return ScriptDirectory.from_config(alembic_config("")).get_current_head()


async def current_revision(db: Database) -> str | None:
    """The revision the database is at (None for an empty database)."""
    from alembic.migration import MigrationContext

    def read(connection: Connection) -> str | None:
        return MigrationContext.configure(connection).get_current_revision()

    try:
        async with db.engine.connect() as connection:
            return await connection.run_sync(read)
    except (OSError, DBAPIError) as exc:
        raise SchedulerUnavailable("the database is unavailable") from exc


async def check_schema(db: Database) -> None:
    """Refuse to start on a database that is not at the code's migration head."""
    current, head = await current_revision(db), head_revision()
    if current != head:
        raise StartupError(
            f"the database schema is at {current or 'nothing'} but this version needs {head}: "
            "run `agentcron migrate` (or `make migrate`) first"
        )
