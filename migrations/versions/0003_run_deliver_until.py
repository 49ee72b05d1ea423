"""runs.deliver_until: the lease on a finished run's deliveries

Revision ID: 0003
Revises: 0002
Create Date: 2026-12-08 09:00:00.000000

Written by hand. A nullable column and its index, added through ``batch_alter_table`` like 0001
and 0002 so the file stays valid under ``render_as_batch`` on SQLite (where adding a nullable
column is done in place, without copying the table). Existing runs get NULL: nothing to
deliver, so no run finished before the upgrade is delivered again.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

from agentcron.core.storage.types import UTCDateTime

revision: str = "0003"
down_revision: str | None = "0002"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("runs", schema=None) as batch_op:
        batch_op.add_column(sa.Column("deliver_until", UTCDateTime(), nullable=True))
        batch_op.create_index(batch_op.f("ix_runs_deliver_until"), ["deliver_until"], unique=False)


def downgrade() -> None:
    with op.batch_alter_table("runs", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_runs_deliver_until"))
        batch_op.drop_column("deliver_until")
