"""Statements on API keys: the rows ``core.keys`` finds, lists, locks and touches."""

from __future__ import annotations

import uuid
from datetime import datetime

from sqlalchemy import Select, Update, or_, select, update

from agentcron.core.storage.models import ApiKey


def key_by_prefix(prefix: str) -> Select[ApiKey]:
    """The key whose public prefix is ``prefix`` (unique)."""
    return select(ApiKey).where(ApiKey.prefix == prefix)


def touch_key(key_id: uuid.UUID, now: datetime, stale: datetime) -> Update:
    """Note ``now`` as when key ``key_id`` was last used, unless a use after ``stale`` is
    noted already."""
    return (
        update(ApiKey)
        .where(
            ApiKey.id == key_id,
            or_(ApiKey.last_used_at.is_(None), ApiKey.last_used_at <= stale),
        )
        .values(last_used_at=now)
    )


def keys_listed(owner: str | None, *, include_revoked: bool) -> Select[ApiKey]:
    """The keys of ``owner`` (None: every owner), oldest first (ties by id)."""
    query = select(ApiKey).order_by(ApiKey.created_at, ApiKey.id)
    if owner is not None:
        query = query.where(ApiKey.owner == owner)
    if not include_revoked:
        query = query.where(ApiKey.revoked_at.is_(None))
    return query


def key_named(key: uuid.UUID | str) -> Select[ApiKey]:
    """The key whose id (a UUID) or prefix (a string) is ``key``, row-locked."""
    found = ApiKey.id == key if isinstance(key, uuid.UUID) else ApiKey.prefix == key
    return select(ApiKey).where(found).with_for_update()
