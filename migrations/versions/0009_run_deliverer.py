"""runs.deliverer: the engine making a finished run's deliveries

Revision ID: 0009
Revises: 0008
Create Date: 2026-12-03 11:00:00.000000

Written by hand. ``deliver_until`` is a lease on a finished run's deliveries, but the run's
``lease_owner`` is cleared when it finishes, so nothing said whose lease it was: a dead
replica's deliveries could only be taken once the lease ran out. ``deliverer`` names the
engine instance holding that lease, so its deliveries are taken over as soon as its liveness
lock is gone, like its runs. NULL on every existing row: those keep the lease fallback.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0009"
down_revision: str | None = "0008"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("runs", schema=None) as batch_op:
        batch_op.add_column(sa.Column("deliverer", sa.String(length=200), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("runs", schema=None) as batch_op:
        batch_op.drop_column("deliverer")
