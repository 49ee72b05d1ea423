"""What keeps one agentcron installation apart from another in the same PostgreSQL database
(``AGENTCRON_DATABASE_SCHEMA``): its tables, by the search_path of every connection it makes;
its wake-ups, by a NOTIFY channel of its own; its advisory locks, by keys that name its schema.

Unset, each is what it was before the setting existed (the connection's own search_path, the
channel ``agentcron_schedules``, the same keys), so the replicas of an installation made
without it keep agreeing with each other.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy.engine import make_url


def connect_args(url: str, schema: str | None) -> dict[str, Any]:
    """The driver's connect arguments that put ``schema`` alone on the session's search_path:
    every table agentcron names without a schema (ORM, text statements, Alembic and its
    ``alembic_version``) is then found, and created, there and nowhere else. Empty when
    ``schema`` is None. ``schema`` must be a name ``Settings`` accepted, on PostgreSQL."""
    if schema is None:
        return {}
    if make_url(url).get_backend_name() != "postgresql":
        raise ValueError("a database schema is a PostgreSQL setting")
    # Quoted, so that a name which is also an SQL keyword ("user") is taken as a name; the
    # names Settings accepts are lower case, so quoting changes nothing else. Only the schema,
    # not "public" after it: a table missing there must not be found among the host's.
    return {"server_settings": {"search_path": f'"{schema}"'}}


def scoped(name: str, schema: str | None) -> str:
    """``name`` (a NOTIFY channel, the name an advisory lock key is hashed from) made this
    installation's: unchanged without a schema, else ``name@schema``. A schema name holds no
    ``@`` or ``:``, so no installation's name is another's."""
    return name if schema is None else f"{name}@{schema}"
