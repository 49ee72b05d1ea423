"""schedules.expect: what success means beyond the agent ending well

Revision ID: 0012
Revises: 0011
Create Date: 2026-12-07 13:00:00.000000

Written by hand. A schedule may say what its runs' output must be (not empty, matching a
pattern, JSON, JSON a schema accepts: ``core.expectations``); a run that misses it fails. NULL
on every existing row: nothing was expected, as before.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

from agentcron.core.storage.types import JSONType

revision: str = "0012"
down_revision: str | None = "0011"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("schedules", schema=None) as batch_op:
        batch_op.add_column(sa.Column("expect", JSONType, nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("schedules", schema=None) as batch_op:
        batch_op.drop_column("expect")
