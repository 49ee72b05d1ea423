"""Alembic environment: async engines, batch mode on SQLite, URL and schema from agentcron
settings (or from ``core.storage.migrate.alembic_config``)."""

from __future__ import annotations

import asyncio

from alembic import context
from sqlalchemy.engine import Connection
from sqlalchemy.ext.asyncio import create_async_engine

from agentcron.core.config import get_settings
from agentcron.core.storage.migrate import ensure_schema, refuse_foreign
from agentcron.core.storage.models import Base
from agentcron.core.storage.scope import connect_args

config = context.config
target_metadata = Base.metadata


def _url() -> str:
    return config.attributes.get("url") or get_settings().database_url


def _schema() -> str | None:
    if "schema" in config.attributes:
        schema: str | None = config.attributes["schema"]
        return schema
    return get_settings().database_schema


def _configure(connection: Connection) -> None:
    context.configure(
        connection=connection,
        target_metadata=target_metadata,
        # SQLite cannot ALTER most things in place; batch mode copies the table instead.
        render_as_batch=connection.dialect.name == "sqlite",
        compare_type=True,
    )


def _run_sync(connection: Connection) -> None:
    schema = _schema()
    if schema is not None:
        # In the migrations' transaction: a migration that fails leaves no schema behind.
        ensure_schema(connection, _url(), schema)
    refuse_foreign(connection, _url(), schema)
    _configure(connection)
    with context.begin_transaction():
        context.run_migrations()


async def _run_async() -> None:
    # The connection's search_path is the schema: the tables and alembic_version go there.
    engine = create_async_engine(_url(), connect_args=connect_args(_url(), _schema()))
    try:
        async with engine.connect() as connection:
            await connection.run_sync(_run_sync)
            await connection.commit()
    finally:
        await engine.dispose()


def run_migrations_offline() -> None:
    context.configure(url=_url(), target_metadata=target_metadata, literal_binds=True)
    with context.begin_transaction():
        context.run_migrations()


if context.is_offline_mode():
    run_migrations_offline()
else:
    connection = config.attributes.get("connection")
    if connection is not None:
        _run_sync(connection)
    else:
        asyncio.run(_run_async())
