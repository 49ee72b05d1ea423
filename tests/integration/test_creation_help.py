"""Help at the moment a schedule is saved (issue 17): a program that is not there, a variable
that is not set, an interval that runs the agent tens of thousands of times a day, a zone
spelled in the wrong case, and a skip time in a repeated hour."""

from __future__ import annotations

import stat
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import pytest

from agentcron.core.config import Settings
from tests.integration.engine_kit import assert_error
from tests.integration.test_schedules_api import API, body, create


def command(*argv: str) -> dict[str, Any]:
    return {"type": "command", "argv": list(argv)}


def codes(schedule: dict[str, Any]) -> list[str]:
    return [warning["code"] for warning in schedule["warnings"]]


# -- a program that is not there ----------------------------------------------------------------


async def test_a_command_not_on_path_is_saved_with_a_warning(client: httpx.AsyncClient) -> None:
    schedule = await create(client, runner=command("agentcron-no-such-agent", "--go"))
    [warning] = schedule["warnings"]
    assert warning["code"] == "command_not_found"
    assert warning["field"] == "runner.argv.0"
    assert "'agentcron-no-such-agent' is not found on the PATH agents get" in warning["message"]
    # Shown on every read, not only in the creation's answer.
    url = f"/api/v1/schedules/{schedule['id']}"
    assert codes((await client.get(url)).json()) == ["command_not_found"]
    # An edit of the runner looks again: installed commands, on the PATH or by path, are fine.
    for argv in (["cat"], ["/bin/sh"]):
        edited = await client.patch(url, json={"runner": {"type": "command", "argv": argv}})
        assert edited.status_code == 200 and codes(edited.json()) == [], edited.text


async def test_a_relative_path_is_judged_where_the_runs_start(
    client: httpx.AsyncClient, settings: Settings, tmp_path: Path
) -> None:
    schedule = await create(client, runner=command("python3", "my_agent.py"))
    [warning] = schedule["warnings"]
    workdir = (settings.data_dir / "tasks").resolve() / "local" / schedule["id"]
    assert warning["code"] == "script_not_found"
    assert warning["field"] == "runner.argv.1"
    assert f"working directory {workdir}, where every run starts" in warning["message"]
    script = tmp_path / "my_agent.py"
    script.write_text("print('hi')\n")
    absolute = await create(client, runner=command("python3", str(script)))
    assert codes(absolute) == []

    schedule = await create(client, runner=command("./agent.sh"))
    [warning] = schedule["warnings"]
    assert warning["code"] == "command_not_found"
    assert "where runs start" in warning["message"]
    # Put it there, as the warning says (the directory was made with the schedule), and edit
    # the runner: the warning is recomputed.
    workdir = (settings.data_dir / "tasks").resolve() / "local" / schedule["id"]
    assert workdir.is_dir()
    agent = workdir / "agent.sh"
    agent.write_text("#!/bin/sh\ncat\n")
    agent.chmod(agent.stat().st_mode | stat.S_IXUSR)
    edited = await client.patch(
        f"{API}/{schedule['id']}", json={"runner": command("./agent.sh", "-v")}
    )
    assert edited.status_code == 200, edited.text
    assert codes(edited.json()) == []


# -- a variable of the service that is not set -------------------------------------------------

KEY_VAR, SMTP_VAR = "AGENTCRON_TEST_LLM_KEY", "AGENTCRON_TEST_SMTP_URL"
CHAT = {
    "type": "openai",
    "base_url": "https://llm.example.org/v1",
    "model": "m",
    "api_key_env": KEY_VAR,
}
MAIL = {
    "type": "email",
    "to": ["ops@example.org"],
    "smtp_url_env": SMTP_VAR,
    "from": "a@example.org",
}


async def test_a_key_or_smtp_variable_not_set_is_saved_with_a_warning(
    client: httpx.AsyncClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(KEY_VAR, raising=False)
    monkeypatch.setenv(SMTP_VAR, "  ")  # blank is not set: the delivery reads it as unset
    schedule = await create(client, runner=CHAT, notify=[MAIL])
    key, smtp = schedule["warnings"]
    assert (key["code"], key["field"]) == ("variable_not_set", "runner.api_key_env")
    unset = "is not set in the service's environment: every"
    assert key["message"].startswith(f"{KEY_VAR} {unset} run fails")
    assert (smtp["code"], smtp["field"]) == ("variable_not_set", "notify.0.smtp_url_env")
    assert smtp["message"].startswith(f"{SMTP_VAR} {unset} delivery to this channel")
    again = await client.get(f"/api/v1/schedules/{schedule['id']}")
    assert codes(again.json()) == ["variable_not_set", "variable_not_set"]

    # Set later, as the warning says: an edit of the runner or of the channels looks again.
    monkeypatch.setenv(KEY_VAR, "sk-test")
    url = f"/api/v1/schedules/{schedule['id']}"
    edited = (await client.patch(url, json={"runner": CHAT})).json()
    assert [warning["field"] for warning in edited["warnings"]] == ["notify.0.smtp_url_env"]
    monkeypatch.setenv(SMTP_VAR, "smtp://mail.example.org:25")
    assert codes((await client.patch(url, json={"notify": [MAIL]})).json()) == []


# -- an interval below a minute -----------------------------------------------------------------


async def test_an_interval_under_a_minute_is_warned(client: httpx.AsyncClient) -> None:
    for every, warned in ((1, True), (59, True), (60, False), (900, False)):
        schedule = await create(client, runner=command("cat"), trigger={"every_seconds": every})
        assert codes(schedule) == (["frequent"] if warned else []), every
        if warned:
            [warning] = schedule["warnings"]
            assert warning["field"] == "trigger.every_seconds"
            assert f"{86_400 // every:,} times a day" in warning["message"]
            assert "below 60 s" in warning["message"]


# -- a zone in the wrong case -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("typed", "meant"),
    [
        ("europe/london", "Europe/London"),
        ("ASIA/SHANGHAI", "Asia/Shanghai"),
        ("new york", "America/New_York"),
        ("Mars/Olympus", None),  # nothing like it: no guess
    ],
)
async def test_a_zone_in_the_wrong_case_gets_a_suggestion(
    client: httpx.AsyncClient, typed: str, meant: str | None
) -> None:
    trigger = {"cron": "0 9 * * *", "timezone": typed}
    refused = await client.post(API, json=body(runner=command("cat"), trigger=trigger))
    # The preview answers the same.
    preview = await client.post(f"{API}/preview", json={"trigger": trigger})
    for response in (refused, preview):
        error = assert_error(response, 422, field="trigger.timezone")["error"]
        if meant is None:
            assert "did you mean" not in error["message"]
            assert "IANA zone name" in error["message"]
        else:
            assert f"did you mean {meant!r}?" in error["message"]


# -- a skip time in a repeated hour -------------------------------------------------------------


async def test_a_skip_time_in_a_repeated_hour_takes_the_pass_that_is_due(
    client: httpx.AsyncClient,
) -> None:
    # 01:30 occurs twice in New York when the clocks go back; with dst_repeat "last" only the
    # second pass is a due time, and "01:30" without an offset finds it.
    now = datetime.now(UTC)
    year = now.year + 1
    trigger = {"cron": "30 1 * * *", "timezone": "America/New_York", "dst_repeat": "last"}
    schedule = await create(client, runner=command("cat"), trigger=trigger)
    first_sunday = next(
        day for day in (datetime(year, 11, d) for d in range(1, 8)) if day.weekday() == 6
    )
    wall = first_sunday.replace(hour=1, minute=30).isoformat()
    skipped = await client.post(f"/api/v1/schedules/{schedule['id']}/skip", json={"due_at": wall})
    assert skipped.status_code == 200, skipped.text
    # The second pass: 01:30 EST, 06:30 UTC (the first would be 05:30 UTC).
    assert skipped.json()["due_at"] == f"{first_sunday.date().isoformat()}T06:30:00Z"
