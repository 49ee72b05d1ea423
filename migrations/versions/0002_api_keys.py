"""api keys

Revision ID: 0002
Revises: 0001
Create Date: 2026-12-01 09:00:00.000000

Written by hand (issue 6). A new table only, so nothing existing is rewritten; indexes go through
``batch_alter_table`` like 0001 so the file stays valid under ``render_as_batch`` on SQLite.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

from agentcron.core.storage.types import UTCDateTime

UTC_DATETIME = UTCDateTime()

revision: str = "0002"
down_revision: str | None = "0001"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "api_keys",
        sa.Column("id", sa.Uuid(), nullable=False),
        sa.Column("owner", sa.String(length=200), nullable=False),
        sa.Column("admin", sa.Boolean(), nullable=False),
        sa.Column("prefix", sa.String(length=32), nullable=False),
        sa.Column("key_hash", sa.String(length=64), nullable=False),
        sa.Column("created_at", UTC_DATETIME, nullable=False),
        sa.Column("last_used_at", UTC_DATETIME, nullable=True),
        sa.Column("revoked_at", UTC_DATETIME, nullable=True),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_api_keys")),
        sa.UniqueConstraint("prefix", name=op.f("uq_api_keys_prefix")),
    )
    with op.batch_alter_table("api_keys", schema=None) as batch_op:
        batch_op.create_index("ix_api_keys_owner", ["owner"], unique=False)


def downgrade() -> None:
    with op.batch_alter_table("api_keys", schema=None) as batch_op:
        batch_op.drop_index("ix_api_keys_owner")

    op.drop_table("api_keys")
