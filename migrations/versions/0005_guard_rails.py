"""Guard rails: DST rule applied per run, circuit breaker, max runs, jitter, warnings

Revision ID: 0005
Revises: 0004
Create Date: 2026-11-29 22:20:00.000000

Written by hand, through ``batch_alter_table`` like 0001-0004. Every column is nullable (or
has a server default), so existing rows need no rewrite:

- ``runs.dst_rule``: which daylight-saving rule decided this due time, when one did (a time
  shifted out of a spring gap, one pass of a repeated autumn hour); NULL otherwise.
- ``schedules.pause_after_failures``: the circuit breaker (pause after N failed runs in a row).
- ``schedules.max_runs`` and ``schedules.scheduled_runs``: a bound on the timetable's runs and
  the count of due times it has created so far.
- ``schedules.jitter_seconds``: spread the runs of schedules due at the same instant.
- ``schedules.warnings``: what create or update found worth saying (not errors), kept so a
  later read shows them too.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

from agentcron.core.storage.types import JSONType

revision: str = "0005"
down_revision: str | None = "0004"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("runs", schema=None) as batch_op:
        batch_op.add_column(sa.Column("dst_rule", sa.String(length=16), nullable=True))
    with op.batch_alter_table("schedules", schema=None) as batch_op:
        batch_op.add_column(sa.Column("pause_after_failures", sa.Integer(), nullable=True))
        batch_op.add_column(sa.Column("max_runs", sa.Integer(), nullable=True))
        batch_op.add_column(
            sa.Column("scheduled_runs", sa.Integer(), nullable=False, server_default="0")
        )
        batch_op.add_column(sa.Column("jitter_seconds", sa.Integer(), nullable=True))
        batch_op.add_column(sa.Column("warnings", JSONType, nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("schedules", schema=None) as batch_op:
        batch_op.drop_column("warnings")
        batch_op.drop_column("jitter_seconds")
        batch_op.drop_column("scheduled_runs")
        batch_op.drop_column("max_runs")
        batch_op.drop_column("pause_after_failures")
    with op.batch_alter_table("runs", schema=None) as batch_op:
        batch_op.drop_column("dst_rule")
