"""The schedule half of the HTTP API, on SQLite and PostgreSQL, through the real app."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo

import httpx
import pytest

from tests.integration.engine_kit import assert_error

API = "/api/v1/schedules"
RUNNER = {"type": "command", "argv": ["python3", "-c", "print('hi')"]}


def body(**overrides: Any) -> dict[str, Any]:
    return {
        "name": "morning digest",
        "prompt": "Summarise today's headlines in five bullets.",
        "trigger": {"cron": "0 8 * * 1-5", "timezone": "Asia/Shanghai"},
        "runner": RUNNER,
        **overrides,
    }


async def create(client: httpx.AsyncClient, **overrides: Any) -> dict[str, Any]:
    response = await client.post(API, json=body(**overrides))
    assert response.status_code == 201, response.text
    result: dict[str, Any] = response.json()
    return result


async def paged(client: httpx.AsyncClient, url: str, limit: int) -> list[list[dict[str, Any]]]:
    """Every page of the list at ``url``, ``limit`` items a page, following its cursors."""
    pages: list[list[dict[str, Any]]] = []
    cursor: str | None = None
    while not pages or cursor is not None:
        params: dict[str, Any] = {"limit": limit, **({"cursor": cursor} if cursor else {})}
        response = await client.get(url, params=params)
        assert response.status_code == 200, response.text
        assert len(response.json()["items"]) <= limit
        pages.append(response.json()["items"])
        cursor = response.json()["next_cursor"]
    return pages


async def test_create_cron_schedule_in_zone(client: httpx.AsyncClient) -> None:
    before = datetime.now(UTC)
    created = await create(client)
    assert created["description"] == "At 08:00, Monday through Friday, Asia/Shanghai"
    assert created["trigger"] == {"cron": "0 8 * * 1-5", "timezone": "Asia/Shanghai"}
    assert created["enabled"] is True
    assert created["mode"] == "isolated" and created["overlap"] == "allow"
    assert created["catchup"] == "skip" and created["catchup_window_seconds"] == 3600
    assert created["misfire_grace_seconds"] == 60
    assert created["timeout_seconds"] == 3600 and created["max_attempts"] == 3
    assert created["notify"] == [] and created["consecutive_failures"] == 0
    next_run = datetime.fromisoformat(created["next_run"])
    assert next_run.utcoffset() == timedelta(0)
    local = next_run.astimezone(ZoneInfo("Asia/Shanghai"))
    assert (local.hour, local.minute, local.second) == (8, 0, 0)
    assert local.isoweekday() <= 5
    assert before < next_run <= before + timedelta(days=4)
    # A persistent schedule's runs share one task: its overlap defaults to skip.
    assert (await create(client, mode="persistent"))["overlap"] == "skip"


async def test_patch_replaces_fields_and_recomputes_next_run(client: httpx.AsyncClient) -> None:
    created = await create(client)
    response = await client.patch(
        f"{API}/{created['id']}", json={"trigger": {"every_seconds": 90}, "name": "renamed"}
    )
    assert response.status_code == 200, response.text
    patched = response.json()
    assert patched["name"] == "renamed"
    assert patched["prompt"] == created["prompt"]
    assert patched["description"] == "Every 90 seconds"
    next_run = datetime.fromisoformat(patched["next_run"])
    now = datetime.now(UTC)
    assert now < next_run <= now + timedelta(seconds=91)


async def test_preview_next_ten_in_local_offsets(client: httpx.AsyncClient) -> None:
    trigger = {"cron": "30 1 * * *", "timezone": "America/New_York"}
    after = "2025-10-30T12:00:00+00:00"
    response = await client.post(f"{API}/preview", json={"trigger": trigger, "after": after})
    assert response.status_code == 200, response.text
    data = response.json()
    assert len(data["next"]) == 10
    # 2025-11-02 repeats 01:30 in New York: a fixed-time job fires once, at the first (EDT).
    assert data["next"][:5] == [
        "2025-10-31T01:30:00-04:00",
        "2025-11-01T01:30:00-04:00",
        "2025-11-02T01:30:00-04:00",
        "2025-11-03T01:30:00-05:00",
        "2025-11-04T01:30:00-05:00",
    ]


# What parse_trigger refuses is tested in tests/unit/test_triggers.py: one trigger error here
# shows the API names its field, one needs the server's clock.
FTP_HOOK = {"type": "webhook", "url": "ftp://x", "secret": "whsec_x"}
BAD_INPUT = [
    ("cron_out_of_range", {"trigger": {"cron": "60 8 * * *"}}, 422, "trigger.cron"),
    ("interval_negative", {"trigger": {"every_seconds": -5}}, 422, "trigger.every_seconds"),
    ("at_past", {"trigger": {"at": "2001-01-01T00:00:00+00:00"}}, 422, "trigger.at"),
    ("timeout_zero", {"timeout_seconds": 0}, 422, "timeout_seconds"),
    ("attempts_negative", {"max_attempts": -1}, 422, "max_attempts"),
    # The loop claims a due time a few milliseconds after it comes due: a zero grace would
    # make every due time "missed", so it is refused rather than silently never run.
    ("misfire_grace_zero", {"misfire_grace_seconds": 0}, 422, "misfire_grace_seconds"),
    ("unknown_field", {"colour": "blue"}, 422, "colour"),
    ("prompt_too_long", {"prompt": "x" * 100_001}, 422, "prompt"),
    ("name_empty", {"name": ""}, 422, "name"),
    ("name_too_long", {"name": "n" * 201}, 422, "name"),
    ("runner_unknown", {"runner": {"type": "teleport"}}, 422, "runner.type"),
    ("runner_argv_empty", {"runner": {"type": "command", "argv": []}}, 422, "runner.argv"),
    ("runner_missing", {"runner": None}, 422, "runner"),  # None: left out of the body
    ("int_as_string", {"max_attempts": "3"}, 422, "max_attempts"),
    ("notify_bad_url", {"notify": [FTP_HOOK]}, 422, "notify.0.url"),
]


async def test_bad_input_is_rejected_naming_the_field(
    client: httpx.AsyncClient, subtests: pytest.Subtests
) -> None:
    for case, overrides, status, field in BAD_INPUT:
        with subtests.test(case=case):
            data = {name: value for name, value in body(**overrides).items() if value is not None}
            error = assert_error(await client.post(API, json=data), status, field=field)["error"]
            assert error["type"] in ("InvalidSchedule", "ValidationError")
    assert (await client.get(API)).json()["items"] == []


async def test_patch_bad_input_changes_nothing(client: httpx.AsyncClient) -> None:
    created = await create(client)
    for patch, field in (
        ({"trigger": {"cron": "61 * * * *"}}, "trigger.cron"),
        ({"name": None}, "name"),
        ({"timeout_seconds": -1}, "timeout_seconds"),
        ({"bogus": 1}, "bogus"),
    ):
        assert_error(await client.patch(f"{API}/{created['id']}", json=patch), 422, field=field)
    after = (await client.get(f"{API}/{created['id']}")).json()
    assert after == created
