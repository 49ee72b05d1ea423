"""runs.result: the JSON object a run's handler returned

Revision ID: 0010
Revises: 0009
Create Date: 2026-12-05 23:30:00.000000

Written by hand. A host's handler returns what it needs to find the work a run started (the
session it opened, say); until now only text could be kept (``output``). ``result`` keeps a
JSON object of at most 16 KB (``RESULT_LIMIT``), read back with the run. NULL on every existing
row: none returned one.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

from agentcron.core.storage.types import JSONType

revision: str = "0010"
down_revision: str | None = "0009"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("runs", schema=None) as batch_op:
        batch_op.add_column(sa.Column("result", JSONType, nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("runs", schema=None) as batch_op:
        batch_op.drop_column("result")
