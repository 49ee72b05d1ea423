"""Statements on stored secrets: the rows ``core.secrets`` checks, reads, locks, lists and
deletes."""

from __future__ import annotations

import uuid
from collections.abc import Iterable
from datetime import datetime

from sqlalchemy import ColumnElement, Delete, ScalarSelect, Select, delete, select

from agentcron.core.storage.models import Secret


def _one(owner: str, name: str) -> ColumnElement[bool]:
    return (Secret.owner == owner) & (Secret.name == name)


def stored_names(owner: str, names: Iterable[str]) -> Select[str]:
    """Which of ``names`` ``owner`` has stored."""
    return select(Secret.name).where(Secret.owner == owner, Secret.name.in_(names))


def ciphertexts(who: str | ScalarSelect[str], names: Iterable[str]) -> Select[str, str, str]:
    """Owner, name and token of the secrets ``names`` of the owner ``who`` (a name, or a
    subquery that finds it: ``sql.schedules.schedule_owner``)."""
    return select(Secret.owner, Secret.name, Secret.ciphertext).where(
        Secret.owner == who, Secret.name.in_(names)
    )


def secret_locked(owner: str, name: str) -> Select[Secret]:
    """``owner``'s secret ``name``, row-locked."""
    return select(Secret).where(_one(owner, name)).with_for_update()


def secrets_listed(owner: str) -> Select[str, datetime, datetime]:
    """``owner``'s secrets by name: name, created_at and updated_at, never a token."""
    return (
        select(Secret.name, Secret.created_at, Secret.updated_at)
        .where(Secret.owner == owner)
        .order_by(Secret.name)
    )


def delete_secret_row(owner: str, name: str) -> Delete:
    """Delete ``owner``'s secret ``name`` (the result's row count says whether there was one)."""
    return delete(Secret).where(_one(owner, name))


def secrets_batch(after: uuid.UUID | None, limit: int) -> Select[Secret]:
    """Up to ``limit`` stored secrets of every owner in id order, after id ``after`` (None:
    from the first), row-locked."""
    query = select(Secret).order_by(Secret.id).limit(limit).with_for_update()
    return query if after is None else query.where(Secret.id > after)
