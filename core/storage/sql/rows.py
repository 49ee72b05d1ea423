"""A batch of rows as one parameter: the derived table a batched statement reads.

So one statement, compiled once, serves a batch of any size: PostgreSQL is handed one array
parameter per column and reads them with ``unnest``; SQLite is handed one JSON text and reads
it with ``json_each``. That is the one difference between the two databases in the engine's
batched writes, and it is decided here.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import JSON, ColumnElement, Text, Uuid, any_, bindparam, cast, column, func, select
from sqlalchemy.dialects.postgresql import ARRAY, JSONB
from sqlalchemy.engine import Dialect
from sqlalchemy.types import TypeEngine

Columns = Mapping[str, TypeEngine[Any]]


def columns_of(table: Any, *names: str) -> Columns:
    """The columns ``names`` of ``table``, each with the type the table gives it."""
    return {name: table.c[name].type for name in names}


@dataclass(frozen=True)
class RowsTable:
    """The derived table of a batch: ``c[name]`` is column ``name`` of the current row, typed
    as the table column it is written to."""

    c: Mapping[str, Any]


def rows_table(
    columns: Columns, name: str, dialect: str, shared: Columns | None = None
) -> RowsTable:
    """The derived table ``name`` of ``columns`` on ``dialect``, read from the parameter(s)
    ``rows_params`` builds under the same ``name``. ``shared``: columns every row of a batch
    has the same value of, each sent once, as a scalar (a timestamp element costs about
    0.7 us to check and encode, and a claim's rows share five of their columns)."""
    scalars = {key: bindparam(f"{name}_{key}", type_=kind) for key, kind in (shared or {}).items()}
    if dialect == "postgresql":
        # JSON travels as text (an array parameter would take a JSON list for one more of its
        # dimensions) and is cast back.
        sent = {key: Text() if isinstance(kind, JSON) else kind for key, kind in columns.items()}
        arrays = [bindparam(f"{name}_{key}", type_=ARRAY(kind)) for key, kind in sent.items()]
        table = (
            func.unnest(*arrays)
            .table_valued(*(column(key, kind) for key, kind in sent.items()))
            .render_derived(name=name)
        )
        return RowsTable(
            {
                **{
                    key: cast(table.c[key], JSONB) if isinstance(kind, JSON) else table.c[key]
                    for key, kind in columns.items()
                },
                **scalars,
            }
        )
    each = func.json_each(bindparam(f"{name}_rows")).table_valued("value").alias(name)
    return RowsTable(
        {
            **{
                key: func.json_extract(each.c.value, f"$[{index}]", type_=kind)
                for index, (key, kind) in enumerate(columns.items())
            },
            **scalars,
        }
    )


IDS: Columns = {"id": Uuid()}


def split(columns: Columns, shared: frozenset[str]) -> tuple[Columns, Columns]:
    """``columns`` as (those sent per row, those ``shared`` by every row)."""
    each = {key: kind for key, kind in columns.items() if key not in shared}
    return each, {key: kind for key, kind in columns.items() if key in shared}


def among(
    column: Any, name: str, dialect: str, columns: Columns = IDS, key: str = "id"
) -> ColumnElement[bool]:
    """``column`` is one of the values of column ``key`` of the derived table ``name``
    (``columns``; default ``IDS``, a plain list of ids): the same statement for a list of any
    length (an expanding ``IN`` makes a new statement, and a new prepared plan, per length).
    On PostgreSQL ``= ANY(array)``, which the planner reads as index lookups; a join to the
    ``unnest`` made it scan the table."""
    if dialect == "postgresql":
        sent = Text() if isinstance(columns[key], JSON) else columns[key]
        matched: ColumnElement[bool] = column == any_(bindparam(f"{name}_{key}", type_=ARRAY(sent)))
        return matched
    rows = rows_table(columns, name, dialect)
    within: ColumnElement[bool] = column.in_(select(rows.c[key]))
    return within


def rows_params(
    columns: Columns,
    name: str,
    rows: Sequence[Mapping[str, Any]],
    dialect: Dialect,
    shared: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """The parameters of the derived table ``name`` of ``columns`` holding ``rows`` (dicts by
    column name), for ``dialect`` (the database's own, so values are stored as its columns
    store them); ``shared``: the value of each shared column (``rows_table``)."""
    scalars = {f"{name}_{key}": value for key, value in (shared or {}).items()}
    if dialect.name == "postgresql":
        params = {}
        for key, kind in columns.items():
            values = [row.get(key) for row in rows]
            if isinstance(kind, JSON):
                values = [None if value is None else json.dumps(value) for value in values]
            params[f"{name}_{key}"] = values
        return {**params, **scalars}
    processors = [
        (
            key,
            None if isinstance(kind, JSON) else kind.dialect_impl(dialect).bind_processor(dialect),
        )
        for key, kind in columns.items()
    ]
    table = [
        [row.get(key) if process is None else process(row.get(key)) for key, process in processors]
        for row in rows
    ]
    return {f"{name}_rows": json.dumps(table), **scalars}
