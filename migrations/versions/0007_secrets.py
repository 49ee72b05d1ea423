"""Tenants' stored secrets

Revision ID: 0007
Revises: 0006
Create Date: 2026-12-01 21:30:00.000000

Written by hand. A new table only, so nothing existing is rewritten:

- ``secrets``: one row per (owner, name), holding a Fernet token of the value bound to that
  owner and name (``core.secrets``); never the value itself. The unique constraint is also the
  index every lookup uses (they are all by owner and name).
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

from agentcron.core.storage.types import UTCDateTime

UTC_DATETIME = UTCDateTime()

revision: str = "0007"
down_revision: str | None = "0006"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "secrets",
        sa.Column("id", sa.Uuid(), nullable=False),
        sa.Column("owner", sa.String(length=200), nullable=False),
        sa.Column("name", sa.String(length=100), nullable=False),
        sa.Column("ciphertext", sa.Text(), nullable=False),
        sa.Column("created_at", UTC_DATETIME, nullable=False),
        sa.Column("updated_at", UTC_DATETIME, nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_secrets")),
        sa.UniqueConstraint("owner", "name", name=op.f("uq_secrets_owner_name")),
    )


def downgrade() -> None:
    op.drop_table("secrets")
