"""The claim's writes (``core.ledger.claim``): the planned runs, their tasks, the schedules'
next due times.

On PostgreSQL they are one statement, ``CLAIM_WRITES``, over array parameters
(``core.storage.arrays``); SQLite has no data-modifying CTEs and sends the three statements of
``core.storage.queries`` (``insert_runs``, ``INSERT_TASKS``, ``ADVANCE_SCHEDULES``). Either
way a (schedule_id, due_at) already present is skipped by the UNIQUE constraint, and only the
tasks of the runs inserted are.

The columns every row of a claim shares (``SHARED_RUN_COLUMNS``, ``SHARED_TASK_COLUMNS``: the
claim's instant, its lease, this engine) are sent once, as scalars, not as arrays with an
element per row: a timestamp element costs about 0.7 us to check and encode, and these were a
third of the elements a claim sent.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from sqlalchemy import Table, bindparam, select, update
from sqlalchemy.dialects.postgresql import insert
from sqlalchemy.types import TypeEngine

from agentcron.core.storage.arrays import array_params, as_column, unnested
from agentcron.core.storage.queries import RUNS, SCHEDULES, TASKS


def _types(table: Table, *names: str) -> dict[str, TypeEngine[Any]]:
    return {name: table.c[name].type for name in names}


# The same for every row of a claim (``core.ledger.claim`` builds them so): one scalar each.
SHARED_RUN_COLUMNS = _types(
    RUNS, "trigger", "created_at", "lease_owner", "lease_expires_at", "cancel_requested"
)
SHARED_TASK_COLUMNS = _types(TASKS, "conversation", "lock_run_id", "created_at", "updated_at")


# The columns that differ from row to row, in ``core.ledger.claim``'s row dicts.
RUN_COLUMNS = _types(
    RUNS,
    "id",
    "schedule_id",
    "due_at",
    "origin",
    "status",
    "attempt",
    "started_at",
    "task_id",
    "payload",
    "available_at",
    "dst_rule",
)
TASK_COLUMNS = _types(
    TASKS,
    "id",
    "schedule_id",
    "owner",
    "workdir",
)
ADVANCE_COLUMNS = _types(SCHEDULES, "id", "next_run", "scheduled_runs")


def _inserted_from(
    rows: Any,
    columns: Mapping[str, TypeEngine[Any]],
    shared: Mapping[str, TypeEngine[Any]],
    prefix: str,
) -> Any:
    """The rows to insert: the ``columns`` of the unnested ``rows``, then the ``shared``
    scalars (parameters ``<prefix>_<name>``), in the order of ``list(columns) + list(shared)``."""
    return select(
        *(as_column(rows, name, kind) for name, kind in columns.items()),
        *(bindparam(f"{prefix}_{name}", type_=kind) for name, kind in shared.items()),
    )


def _claim_writes() -> Any:
    runs = unnested(RUN_COLUMNS, "r", "planned")
    inserted = (
        insert(RUNS)
        .from_select(
            [*RUN_COLUMNS, *SHARED_RUN_COLUMNS],
            _inserted_from(runs, RUN_COLUMNS, SHARED_RUN_COLUMNS, "rc"),
        )
        .on_conflict_do_nothing(index_elements=["schedule_id", "due_at"])
        .returning(RUNS.c.id, RUNS.c.task_id)
        .cte("inserted")
    )
    tasks = unnested(TASK_COLUMNS, "t", "task_row")
    added = (
        insert(TASKS)
        .from_select(
            [*TASK_COLUMNS, *SHARED_TASK_COLUMNS],
            _inserted_from(tasks, TASK_COLUMNS, SHARED_TASK_COLUMNS, "tc").where(
                tasks.c.id.in_(select(inserted.c.task_id))
            ),
        )
        .cte("tasks_added")
    )
    advance = unnested(ADVANCE_COLUMNS, "a", "advance")
    advanced = (
        update(SCHEDULES)
        .where(SCHEDULES.c.id == advance.c.id)
        .values(next_run=advance.c.next_run, scheduled_runs=advance.c.scheduled_runs)
        .cte("advanced")
    )
    # The two CTEs no SELECT reads still run: PostgreSQL executes every data-modifying one.
    return select(inserted.c.id).add_cte(added, advanced)


CLAIM_WRITES = _claim_writes()


def claim_params(
    runs: Sequence[Mapping[str, Any]],
    tasks: Sequence[Mapping[str, Any]],
    advances: Sequence[Mapping[str, Any]],
) -> dict[str, Any]:
    """``CLAIM_WRITES``'s parameters from the claim's row dicts (advances: ``b_id``,
    ``b_next_run``, ``b_scheduled_runs``, as ``ADVANCE_SCHEDULES`` takes them). ``ValueError``
    if the rows do not share the values of the shared columns (a caller's bug)."""
    moves = [{name: row[f"b_{name}"] for name in ADVANCE_COLUMNS} for row in advances]
    return {
        **array_params(RUN_COLUMNS, "r", runs),
        **_shared(SHARED_RUN_COLUMNS, "rc", runs),
        **array_params(TASK_COLUMNS, "t", tasks),
        **_shared(SHARED_TASK_COLUMNS, "tc", tasks),
        **array_params(ADVANCE_COLUMNS, "a", moves),
    }


def _shared(
    columns: Mapping[str, TypeEngine[Any]], prefix: str, rows: Sequence[Mapping[str, Any]]
) -> dict[str, Any]:
    """The scalar parameters of the ``columns`` every row shares (None when there are no
    rows: then nothing reads them)."""
    first = rows[0] if rows else {}
    values = {name: first.get(name) for name in columns}
    for row in rows:
        for name, value in values.items():
            if row[name] != value:
                raise ValueError(f"the rows of a claim differ in {name!r}, which they share")
    return {f"{prefix}_{name}": value for name, value in values.items()}
