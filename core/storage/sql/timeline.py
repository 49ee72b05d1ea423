"""Statements on a schedule's timeline, its runs by due time (``core.timeline``): the rows
written outside a claim (a gap's, a backfill's, a skipped occurrence's), the runs of a range of
due times or of one, the gap summaries across an instant, and a skipped occurrence undone.

None takes a row lock: their callers hold the schedule's row when they write (a backfill), and
a run of a due time is unique, (schedule_id, due_at).
"""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Any

from sqlalchemy import Delete, Select, delete, select
from sqlalchemy.dialects import postgresql, sqlite

from agentcron.core.states import RunReason, RunStatus
from agentcron.core.storage.models import RUNS, Run


def insert_runs(dialect: str) -> Any:
    """Insert scheduled runs, executed with one parameter set per run (SQLAlchemy sends them
    as multi-row INSERTs); a (schedule_id, due_at) already present is skipped by the UNIQUE
    constraint (``ON CONFLICT DO NOTHING``), never by reading first. Returns the ids actually
    inserted."""
    return _INSERT_RUNS[dialect]


_INSERT_RUNS = {
    name: insert(RUNS)
    .on_conflict_do_nothing(index_elements=["schedule_id", "due_at"])
    .returning(RUNS.c.id)
    for name, insert in (("postgresql", postgresql.insert), ("sqlite", sqlite.insert))
}


def runs_due_between(schedule_id: uuid.UUID, start: datetime, end: datetime) -> Select[Run]:
    """The runs of schedule ``schedule_id`` due in ``[start, end)``."""
    return select(Run).where(Run.schedule_id == schedule_id, Run.due_at >= start, Run.due_at < end)


def run_due_at(schedule_id: uuid.UUID, due: datetime) -> Select[Run]:
    """The run of schedule ``schedule_id`` due at ``due`` (unique)."""
    return select(Run).where(Run.schedule_id == schedule_id, Run.due_at == due)


def summaries_across(schedule_id: uuid.UUID, start: datetime) -> Select[Run]:
    """The skipped rows of schedule ``schedule_id`` due before ``start`` whose gap covers it
    (``covers_until`` at or after ``start``): the summaries a backfill from ``start`` trims."""
    return select(Run).where(
        Run.schedule_id == schedule_id,
        Run.due_at < start,
        Run.covers_until >= start,
        Run.status == RunStatus.SKIPPED,
    )


def delete_skipped_occurrence(schedule_id: uuid.UUID, due: datetime) -> Delete:
    """Delete the row of schedule ``schedule_id`` due at ``due`` if it is an occurrence skipped
    on purpose (``occurrence_skipped``); the row count says whether there was one."""
    return delete(Run).where(
        Run.schedule_id == schedule_id,
        Run.due_at == due,
        Run.status == RunStatus.SKIPPED,
        Run.reason == RunReason.OCCURRENCE_SKIPPED,
    )
