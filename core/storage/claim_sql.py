"""The claim's writes (``core.ledger.claim``): the planned runs, their tasks, the schedules'
next due times.

On PostgreSQL they are one statement, ``CLAIM_WRITES``, with one array parameter per column;
SQLite has no data-modifying CTEs and sends the three statements of ``core.storage.queries``
(``insert_runs``, ``INSERT_TASKS``, ``ADVANCE_SCHEDULES``). Either way a (schedule_id, due_at)
already present is skipped by the UNIQUE constraint, and only the tasks of the runs inserted
are.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from sqlalchemy import JSON, Table, Text, bindparam, cast, column, func, select, update
from sqlalchemy.dialects.postgresql import ARRAY, JSONB, insert

from agentcron.core.storage.models import Run, Schedule, Task

RUNS: Table = Run.__table__  # type: ignore[assignment]  # declarative tables are Tables
SCHEDULES: Table = Schedule.__table__  # type: ignore[assignment]
TASKS: Table = Task.__table__  # type: ignore[assignment]

# The columns of the rows the claim builds, in ``core.ledger.claim``'s row dicts.
RUN_COLUMNS = (
    "id",
    "schedule_id",
    "trigger",
    "due_at",
    "origin",
    "status",
    "attempt",
    "started_at",
    "task_id",
    "payload",
    "created_at",
    "available_at",
    "lease_owner",
    "lease_expires_at",
    "cancel_requested",
    "dst_rule",
)
TASK_COLUMNS = (
    "id",
    "schedule_id",
    "owner",
    "workdir",
    "conversation",
    "lock_run_id",
    "created_at",
    "updated_at",
)
ADVANCE_COLUMNS = ("id", "next_run", "scheduled_runs")


def _is_json(table: Table, name: str) -> bool:
    return isinstance(table.c[name].type, JSON)


def _unnested(table: Table, names: Sequence[str], prefix: str, alias: str) -> Any:
    """``unnest`` of one array parameter per column (``<prefix>_<column>``), typed as the
    table's columns, as a derived table ``alias``. JSON values travel as text (``claim_params``
    serialises them): an array parameter would take a JSON list for one more dimension."""
    types = {name: Text() if _is_json(table, name) else table.c[name].type for name in names}
    arrays = [bindparam(f"{prefix}_{name}", type_=ARRAY(types[name])) for name in names]
    return (
        func.unnest(*arrays)
        .table_valued(*(column(name, types[name]) for name in names))
        .render_derived(name=alias)
    )


def _columns(table: Table, rows: Any, names: Sequence[str]) -> list[Any]:
    """The select list inserting ``rows`` (an ``_unnested``) into ``table``'s ``names``."""
    return [cast(rows.c[name], JSONB) if _is_json(table, name) else rows.c[name] for name in names]


def _claim_writes() -> Any:
    runs = _unnested(RUNS, RUN_COLUMNS, "r", "planned")
    inserted = (
        insert(RUNS)
        .from_select(list(RUN_COLUMNS), select(*_columns(RUNS, runs, RUN_COLUMNS)))
        .on_conflict_do_nothing(index_elements=["schedule_id", "due_at"])
        .returning(RUNS.c.id, RUNS.c.task_id)
        .cte("inserted")
    )
    tasks = _unnested(TASKS, TASK_COLUMNS, "t", "task_row")
    prepared = (
        insert(TASKS)
        .from_select(
            list(TASK_COLUMNS),
            select(*_columns(TASKS, tasks, TASK_COLUMNS)).where(
                tasks.c.id.in_(select(inserted.c.task_id))
            ),
        )
        .cte("tasks_added")
    )
    advance = _unnested(SCHEDULES, ADVANCE_COLUMNS, "a", "advance")
    advanced = (
        update(SCHEDULES)
        .where(SCHEDULES.c.id == advance.c.id)
        .values(next_run=advance.c.next_run, scheduled_runs=advance.c.scheduled_runs)
        .cte("advanced")
    )
    # The two CTEs no SELECT reads still run: PostgreSQL executes every data-modifying one.
    return select(inserted.c.id).add_cte(prepared, advanced)


CLAIM_WRITES = _claim_writes()


def claim_params(
    runs: Sequence[Mapping[str, Any]],
    tasks: Sequence[Mapping[str, Any]],
    advances: Sequence[Mapping[str, Any]],
) -> dict[str, list[Any]]:
    """``CLAIM_WRITES``'s parameters from the claim's row dicts (advances: ``b_id``,
    ``b_next_run``, ``b_scheduled_runs``, as ``ADVANCE_SCHEDULES`` takes them)."""
    params = {f"r_{name}": _values(RUNS, runs, name) for name in RUN_COLUMNS}
    params.update({f"t_{name}": _values(TASKS, tasks, name) for name in TASK_COLUMNS})
    params.update({f"a_{name}": [row[f"b_{name}"] for row in advances] for name in ADVANCE_COLUMNS})
    return params


def _values(table: Table, rows: Sequence[Mapping[str, Any]], name: str) -> list[Any]:
    if _is_json(table, name):
        return [None if row[name] is None else json.dumps(row[name]) for row in rows]
    return [row[name] for row in rows]
