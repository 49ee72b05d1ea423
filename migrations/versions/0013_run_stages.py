"""runs.claimed_at, runs.output_at: the stages of a run between its start and its finish

Revision ID: 0013
Revises: 0012
Create Date: 2026-12-07 13:15:00.000000

Written by hand. A run's record already says when it was created, started and finished; it
now also says when an engine first took it (``claimed_at``: the claim of its due time, or the
first take of a queued run) and when its last attempt's agent returned its output
(``output_at``, before the outcome is recorded). NULL on every existing row: not known.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

from agentcron.core.storage.types import UTCDateTime

revision: str = "0013"
down_revision: str | None = "0012"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("runs", schema=None) as batch_op:
        batch_op.add_column(sa.Column("claimed_at", UTCDateTime(), nullable=True))
        batch_op.add_column(sa.Column("output_at", UTCDateTime(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("runs", schema=None) as batch_op:
        batch_op.drop_column("output_at")
        batch_op.drop_column("claimed_at")
