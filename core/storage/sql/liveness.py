"""Statements on liveness (PostgreSQL): the lock key of an engine, whether someone holds it
(read from pg_locks), and taking it. ``liveness_held`` is a where-clause the idle look
(``sql.wakeups``), the claim (``sql.leases``) and the take-over of deliveries
(``sql.deliveries``) compose."""

from __future__ import annotations

from typing import Any

from sqlalchemy import (
    BigInteger,
    Boolean,
    ColumnElement,
    Integer,
    Select,
    SQLColumnExpression,
    cast,
    column,
    exists,
    func,
    literal,
    select,
    table,
    true,
)

from agentcron.core.storage.scope import scoped

# pg_locks, as much of it as the check reads. A 64-bit advisory key shows there split in two
# (``classid`` the high half, ``objid`` the low one) with ``objsubid`` 1. The view shows the
# locks of every database of the server; an advisory lock belongs to one (``database``).
_PG_LOCKS = table(
    "pg_locks",
    column("locktype"),
    column("database"),
    column("classid"),
    column("objid"),
    column("objsubid"),
    column("granted"),
)
_PG_DATABASE = table("pg_database", column("oid"), column("datname"))
_THIS_DATABASE = (
    select(_PG_DATABASE.c.oid)
    .where(_PG_DATABASE.c.datname == func.current_database())
    .scalar_subquery()
)


def liveness_key(owner: SQLColumnExpression[Any] | str, schema: str | None) -> ColumnElement[int]:
    """The advisory lock key of ``owner`` in the installation of ``schema``
    (``AGENTCRON_DATABASE_SCHEMA``; None: ``agentcron:<owner>``, as before the setting), so
    engines of one instance id in two schemas of a database hold two locks. Computed by the
    database both when the lock is taken and when it is looked for, so no client-side hash has
    to agree with it."""
    name = literal(owner) if isinstance(owner, str) else owner
    prefix = literal(scoped("agentcron", schema) + ":")
    return func.hashtextextended(prefix + name, 0, type_=BigInteger)


def liveness_held(owner: SQLColumnExpression[Any], schema: str | None) -> ColumnElement[bool]:
    """Whether some session of this database holds ``owner``'s liveness lock now: pg_locks
    only, no lock taken or tried (trying another's would hold it, if only for an instant)."""
    locks = _PG_LOCKS.c
    high = cast(locks.classid, BigInteger).op("<<")(literal(32, Integer))
    key = high.op("|")(cast(locks.objid, BigInteger))
    return exists().where(
        locks.locktype == "advisory",
        locks.database == _THIS_DATABASE,
        locks.objsubid == 1,
        locks.granted.is_(true()),
        key == liveness_key(owner, schema),
    )


def take_liveness(owner: str, schema: str | None) -> Select[bool]:
    """Take ``owner``'s liveness lock for the session (True), or say another session holds it
    (False): never waits, so a stuck holder is logged instead of blocking the engine."""
    return select(func.pg_try_advisory_lock(liveness_key(owner, schema), type_=Boolean))
