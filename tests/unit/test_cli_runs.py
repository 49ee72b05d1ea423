"""``agentcron runs show``: how one run is printed, from the API's answer."""

from __future__ import annotations

from typing import Any

import pytest

from agentcron.web.cli.runs import show_run


def answer(**fields: Any) -> dict[str, Any]:
    """A finished run as ``GET /api/v1/runs/{id}`` answers it."""
    run: dict[str, Any] = {
        "id": "5b1e2c3d-4f5a-6b7c-8d9e-0f1a2b3c4d5e",
        "schedule_id": "3f0c6a2e-5d3b-4e7f-9a41-0c2b7d8e9f10",
        "trigger": "manual",
        "replay_of": None,
        "status": "succeeded",
        "reason": None,
        "attempt": 1,
        "task_id": None,
        "due_at": None,
        "created_at": "2026-12-05T08:00:00Z",
        "started_at": "2026-12-05T08:00:01Z",
        "finished_at": "2026-12-05T08:00:02Z",
        "error": None,
        "output": "opened a session",
        "result": None,
        "deliveries": [],
    }
    return run | fields


def test_a_runs_result_is_printed_whole_after_its_output(
    capsys: pytest.CaptureFixture[str],
) -> None:
    show_run(answer(result={"session_id": "s-81", "note": "café"}))
    printed = capsys.readouterr().out
    assert printed.endswith(
        'output:\nopened a session\n\nresult:\n{\n  "session_id": "s-81",\n  "note": "café"\n}\n'
    )


def test_a_run_without_a_result_prints_none(capsys: pytest.CaptureFixture[str]) -> None:
    show_run(answer())
    assert "result:" not in capsys.readouterr().out
    old_service = answer()
    del old_service["result"]  # a service from before runs kept a result
    show_run(old_service)
    assert "result:" not in capsys.readouterr().out
