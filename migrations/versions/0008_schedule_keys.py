"""Schedules carry the host's key for them

Revision ID: 0008
Revises: 0007
Create Date: 2026-12-02 19:00:00.000000

Written by hand. A host that owns its records (a deployment, an agent) names the schedule it
keeps for each by its own key, so it never stores our ids and can reconcile its table against
ours:

- ``schedules.key``: NULL for schedules made without one, so nothing existing is rewritten;
- ``ux_schedules_owner_key``: one live schedule per (owner, key). Partial (``key IS NOT NULL
  AND deleted_at IS NULL``), so unkeyed schedules never collide and a deleted schedule's key
  can be used again while its runs stay readable.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0008"
down_revision: str | None = "0007"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

LIVE_KEYS = sa.text("key IS NOT NULL AND deleted_at IS NULL")


def upgrade() -> None:
    with op.batch_alter_table("schedules", schema=None) as batch_op:
        batch_op.add_column(sa.Column("key", sa.String(length=200), nullable=True))
    op.create_index(
        "ux_schedules_owner_key",
        "schedules",
        ["owner", "key"],
        unique=True,
        postgresql_where=LIVE_KEYS,
        sqlite_where=LIVE_KEYS,
    )


def downgrade() -> None:
    op.drop_index("ux_schedules_owner_key", table_name="schedules")
    with op.batch_alter_table("schedules", schema=None) as batch_op:
        batch_op.drop_column("key")
