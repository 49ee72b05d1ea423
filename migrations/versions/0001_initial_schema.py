"""initial schema

Revision ID: 0001
Revises:
Create Date: 2026-11-29 16:38:10.721114
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

from agentcron.core.storage.types import JSONType as JSON_TYPE
from agentcron.core.storage.types import UTCDateTime

UTC_DATETIME = UTCDateTime()

revision: str = "0001"
down_revision: str | None = None
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "schedules",
        sa.Column("id", sa.Uuid(), nullable=False),
        sa.Column("owner", sa.String(length=200), nullable=False),
        sa.Column("name", sa.String(length=200), nullable=False),
        sa.Column("prompt", sa.Text(), nullable=False),
        sa.Column("trigger", JSON_TYPE, nullable=False),
        sa.Column("enabled", sa.Boolean(), nullable=False),
        sa.Column("mode", sa.String(length=16), nullable=False),
        sa.Column("overlap", sa.String(length=16), nullable=False),
        sa.Column("catchup", sa.String(length=16), nullable=False),
        sa.Column("catchup_window_seconds", sa.Integer(), nullable=False),
        sa.Column("misfire_grace_seconds", sa.Integer(), nullable=False),
        sa.Column("timeout_seconds", sa.Integer(), nullable=False),
        sa.Column("max_attempts", sa.Integer(), nullable=False),
        sa.Column("runner", JSON_TYPE, nullable=False),
        sa.Column("notify", JSON_TYPE, nullable=False),
        sa.Column("next_run", UTC_DATETIME, nullable=True),
        sa.Column("task_id", sa.Uuid(), nullable=True),
        sa.Column("paused_at", UTC_DATETIME, nullable=True),
        sa.Column("paused_note", sa.Text(), nullable=True),
        sa.Column("last_run_at", UTC_DATETIME, nullable=True),
        sa.Column("last_status", sa.String(length=16), nullable=True),
        sa.Column("last_error", sa.Text(), nullable=True),
        sa.Column("last_run_id", sa.Uuid(), nullable=True),
        sa.Column("consecutive_failures", sa.Integer(), nullable=False),
        sa.Column("created_at", UTC_DATETIME, nullable=False),
        sa.Column("updated_at", UTC_DATETIME, nullable=False),
        sa.Column("deleted_at", UTC_DATETIME, nullable=True),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_schedules")),
    )
    with op.batch_alter_table("schedules", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_schedules_next_run"), ["next_run"], unique=False)
        batch_op.create_index(
            "ix_schedules_owner_created", ["owner", "created_at", "id"], unique=False
        )

    op.create_table(
        "runs",
        sa.Column("id", sa.Uuid(), nullable=False),
        sa.Column("schedule_id", sa.Uuid(), nullable=False),
        sa.Column("trigger", sa.String(length=16), nullable=False),
        sa.Column("due_at", UTC_DATETIME, nullable=True),
        sa.Column("replay_of", sa.Uuid(), nullable=True),
        sa.Column("status", sa.String(length=16), nullable=False),
        sa.Column("reason", sa.String(length=64), nullable=True),
        sa.Column("attempt", sa.Integer(), nullable=False),
        sa.Column("task_id", sa.Uuid(), nullable=True),
        sa.Column("payload", JSON_TYPE, nullable=False),
        sa.Column("created_at", UTC_DATETIME, nullable=False),
        sa.Column("available_at", UTC_DATETIME, nullable=False),
        sa.Column("started_at", UTC_DATETIME, nullable=True),
        sa.Column("finished_at", UTC_DATETIME, nullable=True),
        sa.Column("error", sa.Text(), nullable=True),
        sa.Column("output", sa.Text(), nullable=True),
        sa.Column("lease_owner", sa.String(length=200), nullable=True),
        sa.Column("lease_expires_at", UTC_DATETIME, nullable=True),
        sa.Column("cancel_requested", sa.Boolean(), nullable=False),
        sa.ForeignKeyConstraint(["replay_of"], ["runs.id"], name=op.f("fk_runs_replay_of_runs")),
        sa.ForeignKeyConstraint(
            ["schedule_id"],
            ["schedules.id"],
            name=op.f("fk_runs_schedule_id_schedules"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_runs")),
        sa.UniqueConstraint("schedule_id", "due_at", name=op.f("uq_runs_schedule_id_due_at")),
    )
    with op.batch_alter_table("runs", schema=None) as batch_op:
        batch_op.create_index(
            "ix_runs_schedule_created", ["schedule_id", "created_at", "id"], unique=False
        )
        batch_op.create_index("ix_runs_status_available", ["status", "available_at"], unique=False)

    op.create_table(
        "tasks",
        sa.Column("id", sa.Uuid(), nullable=False),
        sa.Column("schedule_id", sa.Uuid(), nullable=True),
        sa.Column("owner", sa.String(length=200), nullable=False),
        sa.Column("workdir", sa.Text(), nullable=False),
        sa.Column("conversation", JSON_TYPE, nullable=False),
        sa.Column("lock_run_id", sa.Uuid(), nullable=True),
        sa.Column("created_at", UTC_DATETIME, nullable=False),
        sa.Column("updated_at", UTC_DATETIME, nullable=False),
        sa.ForeignKeyConstraint(
            ["schedule_id"],
            ["schedules.id"],
            name=op.f("fk_tasks_schedule_id_schedules"),
            ondelete="SET NULL",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_tasks")),
    )
    with op.batch_alter_table("tasks", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_tasks_schedule_id"), ["schedule_id"], unique=False)

    op.create_table(
        "deliveries",
        sa.Column("id", sa.Uuid(), nullable=False),
        sa.Column("run_id", sa.Uuid(), nullable=False),
        sa.Column("index", sa.Integer(), nullable=False),
        sa.Column("channel", sa.String(length=32), nullable=False),
        sa.Column("target", sa.Text(), nullable=False),
        sa.Column("status", sa.String(length=16), nullable=False),
        sa.Column("attempts", sa.Integer(), nullable=False),
        sa.Column("error", sa.Text(), nullable=True),
        sa.Column("created_at", UTC_DATETIME, nullable=False),
        sa.Column("updated_at", UTC_DATETIME, nullable=False),
        sa.ForeignKeyConstraint(
            ["run_id"], ["runs.id"], name=op.f("fk_deliveries_run_id_runs"), ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_deliveries")),
        sa.UniqueConstraint("run_id", "index", name=op.f("uq_deliveries_run_id_index")),
    )


def downgrade() -> None:
    op.drop_table("deliveries")
    with op.batch_alter_table("tasks", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_tasks_schedule_id"))

    op.drop_table("tasks")
    with op.batch_alter_table("runs", schema=None) as batch_op:
        batch_op.drop_index("ix_runs_status_available")
        batch_op.drop_index("ix_runs_schedule_created")

    op.drop_table("runs")
    with op.batch_alter_table("schedules", schema=None) as batch_op:
        batch_op.drop_index("ix_schedules_owner_created")
        batch_op.drop_index(batch_op.f("ix_schedules_next_run"))

    op.drop_table("schedules")
