"""The claim's one statement sends the columns its rows share once, as scalars."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from agentcron.core.storage.claim_sql import claim_params

NOW = datetime(2026, 1, 5, 9, 0, tzinfo=UTC)


def run_row(**changes: Any) -> dict[str, Any]:
    return {
        "id": uuid.uuid4(),
        "schedule_id": uuid.uuid4(),
        "trigger": "schedule",
        "due_at": NOW,
        "origin": "schedule",
        "status": "running",
        "attempt": 1,
        "started_at": NOW,
        "task_id": None,
        "payload": {"prompt": "p"},
        "created_at": NOW,
        "available_at": NOW,
        "lease_owner": "engine-a",
        "lease_expires_at": NOW + timedelta(seconds=30),
        "cancel_requested": False,
        "dst_rule": None,
        **changes,
    }


def test_shared_columns_are_one_scalar_and_the_others_an_array_each() -> None:
    rows = [run_row(), run_row(status="pending", attempt=0, started_at=None)]
    params = claim_params(rows, [], [])
    assert params["rc_lease_owner"] == "engine-a"
    assert params["rc_created_at"] == NOW
    assert params["r_status"] == ["running", "pending"]
    assert params["r_payload"] == ['{"prompt": "p"}', '{"prompt": "p"}']
    assert "r_lease_owner" not in params


def test_rows_that_differ_in_a_shared_column_are_refused() -> None:
    """A scalar would write the first row's value on every row: a caller that builds rows
    with different leases must not get a silently wrong claim."""
    rows = [run_row(), run_row(lease_owner="engine-b")]
    with pytest.raises(ValueError, match="lease_owner"):
        claim_params(rows, [], [])
