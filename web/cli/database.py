"""How the commands that act on the server's database open it (``example``, ``keys``,
``secrets-rotate``): only one that exists and is migrated, the way ``serve`` insists, and
never by creating an empty SQLite file where the command happens to run."""

from __future__ import annotations

import sys
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, NoReturn, TypeVar

import typer

if TYPE_CHECKING:
    from agentcron.core.config import Settings
    from agentcron.core.storage.database import Database

T = TypeVar("T")


def on_database(work: Callable[[Database], Awaitable[T]]) -> T:
    """``work`` on the database of AGENTCRON_DATABASE_URL, then the engine disposed.

    A database that is missing, not migrated or not the code's version ends the command
    with one line and status 2 (as ``serve`` refuses to start); an unreachable one with
    status 1. Other errors of ``work`` propagate to the caller."""
    import asyncio

    from agentcron.core.errors import SchedulerUnavailable, StartupError
    from agentcron.core.storage.database import Database
    from agentcron.core.storage.migrate import check_schema, require_database_file

    settings = read_settings()
    url = settings.database_url

    async def run() -> T:
        # Before Database(): it creates a SQLite file's directory, and connecting the file.
        require_database_file(url)
        db = Database.from_settings(settings)
        try:
            await check_schema(db)
            return await work(db)
        finally:
            await db.dispose()

    try:
        return asyncio.run(run())
    except StartupError as exc:
        fail(exc.message, 2)
    except SchedulerUnavailable as exc:
        fail(unreachable(url, exc), 1)


def read_settings() -> Settings:
    """The service's settings (``AGENTCRON_*``). A bad value ends the command with one line
    naming its variable, and status 2, as ``serve`` refuses a configuration that cannot work."""
    from pydantic import ValidationError

    from agentcron.core.config import get_settings

    try:
        return get_settings()
    except ValidationError as exc:
        error = exc.errors()[0]
        name = "AGENTCRON_" + "_".join(str(part) for part in error["loc"]).upper()
        fail(f"{name}: {error['msg'].removeprefix('Value error, ')}", 2)


def unreachable(url: str, exc: BaseException) -> str:
    """One line for a database that cannot be reached, naming it and the driver's reason."""
    from sqlalchemy.engine import make_url
    from sqlalchemy.exc import DBAPIError

    cause = exc.__cause__ or exc
    # SQLAlchemy's text of a driver error adds the statement and a link on lines of their own.
    reason = str(cause.orig if isinstance(cause, DBAPIError) else cause).splitlines()
    where = make_url(url).render_as_string(hide_password=True)
    return f"cannot reach the database {where}: {reason[0] if reason else type(cause).__name__}"


def fail(message: str, status: int) -> NoReturn:
    """Print ``agentcron: MESSAGE`` on stderr and exit with ``status``."""
    sys.stderr.write(f"agentcron: {message}\n")
    raise typer.Exit(status)
