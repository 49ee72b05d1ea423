"""The timeline: runs.covers/covers_until; retention: schedules.retention_days and indexes

Revision ID: 0004
Revises: 0003
Create Date: 2026-11-29 22:10:00.000000

Written by hand, through ``batch_alter_table`` like 0001-0003 so it stays valid under
``render_as_batch`` on SQLite (where changing a foreign key means copying the table, which
batch mode does).

- ``runs.covers``, ``runs.covers_until``: a skipped row that accounts for due times that did
  not run says how many it stands for and the last of them (``core.timeline``). NULL on every
  existing run.
- ``runs.origin``, ``runs.started_by``: provenance (what started a run, and which API key
  owner asked for a manual run or a replay). NULL on existing runs, whose ``trigger`` says.
- ``schedules.retention_days``: a per-schedule override of ``AGENTCRON_RETENTION_DAYS``;
  NULL (every existing schedule) means the service default.
- ``ix_runs_created_at``: the pruner walks runs oldest first; without it each pass would scan
  the whole ledger. ``ix_runs_task_id``: a pruned run's task is deleted only when no run
  left refers to it, which is one index probe with it.
- ``runs.replay_of`` becomes ON DELETE SET NULL: a replay must survive the pruning of the run
  it replayed (it keeps its own payload), instead of pinning the original forever.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

from agentcron.core.storage.types import UTCDateTime

revision: str = "0004"
down_revision: str | None = "0003"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("schedules", schema=None) as batch_op:
        batch_op.add_column(sa.Column("retention_days", sa.Integer(), nullable=True))
    with op.batch_alter_table("runs", schema=None) as batch_op:
        batch_op.add_column(sa.Column("covers", sa.Integer(), nullable=True))
        batch_op.add_column(sa.Column("covers_until", UTCDateTime(), nullable=True))
        batch_op.add_column(sa.Column("origin", sa.String(length=16), nullable=True))
        batch_op.add_column(sa.Column("started_by", sa.String(length=200), nullable=True))
        batch_op.create_index(batch_op.f("ix_runs_created_at"), ["created_at", "id"], unique=False)
        batch_op.create_index(batch_op.f("ix_runs_task_id"), ["task_id"], unique=False)
        batch_op.drop_constraint(batch_op.f("fk_runs_replay_of_runs"), type_="foreignkey")
        batch_op.create_foreign_key(
            batch_op.f("fk_runs_replay_of_runs"), "runs", ["replay_of"], ["id"], ondelete="SET NULL"
        )


def downgrade() -> None:
    with op.batch_alter_table("runs", schema=None) as batch_op:
        batch_op.drop_constraint(batch_op.f("fk_runs_replay_of_runs"), type_="foreignkey")
        batch_op.create_foreign_key(
            batch_op.f("fk_runs_replay_of_runs"), "runs", ["replay_of"], ["id"]
        )
        batch_op.drop_index(batch_op.f("ix_runs_task_id"))
        batch_op.drop_index(batch_op.f("ix_runs_created_at"))
        batch_op.drop_column("started_by")
        batch_op.drop_column("origin")
        batch_op.drop_column("covers_until")
        batch_op.drop_column("covers")
    with op.batch_alter_table("schedules", schema=None) as batch_op:
        batch_op.drop_column("retention_days")
