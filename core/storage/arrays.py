"""Rows sent as arrays: one array parameter per column, ``unnest``-ed into a derived table.

PostgreSQL's way to hand a statement a batch of rows of any size as a fixed number of
parameters, so one statement (and one prepared plan) serves every batch. JSON values travel
as text and are cast back (``as_column``): an array parameter would take a JSON list for one
more dimension of the array.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from sqlalchemy import JSON, Text, bindparam, cast, column, func
from sqlalchemy.dialects.postgresql import ARRAY, JSONB
from sqlalchemy.types import TypeEngine


def unnested(types: Mapping[str, TypeEngine[Any]], prefix: str, alias: str) -> Any:
    """The derived table ``alias`` with a column per entry of ``types``, read from the array
    parameters ``<prefix>_<name>`` (``array_params`` builds them)."""
    sent = {name: Text() if isinstance(kind, JSON) else kind for name, kind in types.items()}
    arrays = [bindparam(f"{prefix}_{name}", type_=ARRAY(kind)) for name, kind in sent.items()]
    return (
        func.unnest(*arrays)
        .table_valued(*(column(name, kind) for name, kind in sent.items()))
        .render_derived(name=alias)
    )


def as_column(rows: Any, name: str, kind: TypeEngine[Any]) -> Any:
    """Column ``name`` of an ``unnested`` table as a value of type ``kind`` (JSON cast back)."""
    return cast(rows.c[name], JSONB) if isinstance(kind, JSON) else rows.c[name]


def array_params(
    types: Mapping[str, TypeEngine[Any]], prefix: str, rows: Sequence[Mapping[str, Any]]
) -> dict[str, list[Any]]:
    """The parameters of an ``unnested`` table of ``types`` holding ``rows`` (dicts by column
    name)."""
    params = {}
    for name, kind in types.items():
        values = [row[name] for row in rows]
        if isinstance(kind, JSON):
            values = [None if value is None else json.dumps(value) for value in values]
        params[f"{prefix}_{name}"] = values
    return params
