"""Index runs.replay_of: deleting a run must not scan the ledger

Revision ID: 0006
Revises: 0005
Create Date: 2026-11-29 22:45:00.000000

``runs.replay_of`` is a foreign key to ``runs.id`` with ON DELETE SET NULL (0004). Without an
index on it, every deleted run makes the database scan all runs for replays pointing at it, so
the pruner's batches grew with the size of the ledger (measured by ``python -m bench.retention``:
on SQLite a batch of 500 held the write lock for about 0.9 s on a 6,000-row ledger).
"""

from __future__ import annotations

from collections.abc import Sequence

from alembic import op

revision: str = "0006"
down_revision: str | None = "0005"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("runs", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_runs_replay_of"), ["replay_of"], unique=False)


def downgrade() -> None:
    with op.batch_alter_table("runs", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_runs_replay_of"))
