"""A success that did something: a schedule's expectations (``expect``), through the real API
and engine, on both databases, for each runner type.

The agent ends well in every test; what it answered decides. A command runs ``cat`` (its
answer is the prompt), a python target answers ``hello from python: <prompt>``, and the
openai runner talks to a real OpenAI-compatible server on loopback (``tests.chat_server``),
which answers ``reply <n>: <prompt>``. Which outputs meet which expectation, one by one:
tests/unit/test_expectations.py.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
from fastapi import FastAPI

from tests.chat_server import ChatServer
from tests.conftest import issue_key
from tests.integration.engine_kit import API, Engine, assert_error, run_to_end
from tests.integration.test_dashboard import FORM, browser

HOURLY = {"every_seconds": 3600}  # never due during a test: runs come from "run now"
KEY_ENV = "AGENTCRON_TEST_EXPECT_KEY"


@pytest.fixture
async def llm(monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[ChatServer]:
    monkeypatch.setenv(KEY_ENV, "sk-test")
    async with ChatServer() as server:
        yield server


def runner_of(kind: str, llm: ChatServer) -> dict[str, Any]:
    if kind == "command":
        return {"type": "command", "argv": ["cat"]}
    if kind == "python":
        return {"type": "python", "target": "tests.agents_fixture:greet"}
    return {"type": "openai", "base_url": llm.base_url, "model": "m", "api_key_env": KEY_ENV}


async def create(client: httpx.AsyncClient, **fields: Any) -> dict[str, Any]:
    body = {"name": "digest", "prompt": "7 headlines", "trigger": HOURLY, **fields}
    response = await client.post(f"{API}/schedules", json=body)
    assert response.status_code == 201, response.text
    schedule: dict[str, Any] = response.json()
    return schedule


@pytest.mark.parametrize("kind", ["command", "python", "openai"])
async def test_a_run_meeting_its_expectations_succeeds_and_one_missing_them_fails_after_retries(
    client: httpx.AsyncClient, engine: Engine, llm: ChatServer, kind: str
) -> None:
    runner = runner_of(kind, llm)
    met = await create(client, runner=runner, expect={"not_empty": True, "matches": r"\d+ head"})
    assert met["expect"] == {"not_empty": True, "matches": r"\d+ head"}
    run = await run_to_end(client, met["id"])
    assert (run["status"], run["error"], run["attempt"]) == ("succeeded", None, 1)

    missed = await create(client, runner=runner, expect={"json": True}, max_attempts=2)
    run = await run_to_end(client, missed["id"])
    # Tried again, as any failure with an attempt left; then failed, saying which and why.
    assert (run["status"], run["attempt"]) == ("failed", 2)
    assert run["error"].startswith("expectation not met: json: the output is not JSON")
    assert "7 headlines" in run["output"]  # what missed is kept on the run
    schedule = (await client.get(f"{API}/schedules/{missed['id']}")).json()
    assert (schedule["last_status"], schedule["consecutive_failures"]) == ("failed", 1)


async def test_a_json_schema_is_held_to_and_the_breaker_counts_its_misses(
    client: httpx.AsyncClient, engine: Engine, llm: ChatServer
) -> None:
    schema = {"type": "object", "required": ["headlines"]}
    schedule = await create(
        client,
        prompt='{"headlines": ["a", "b"]}',
        runner=runner_of("command", llm),
        expect={"json_schema": schema},
        max_attempts=1,
        pause_after_failures=2,
    )
    assert (await run_to_end(client, schedule["id"]))["status"] == "succeeded"
    patch = {"prompt": '{"weather": "rain"}'}
    assert (await client.patch(f"{API}/schedules/{schedule['id']}", json=patch)).status_code == 200
    for _ in range(2):
        run = await run_to_end(client, schedule["id"])
        assert run["status"] == "failed"
        assert run["error"] == (
            "expectation not met: json_schema: at the whole value: "
            "'headlines' is a required property"
        )
    after = (await client.get(f"{API}/schedules/{schedule['id']}")).json()
    assert after["enabled"] is False and "pause_after_failures=2" in after["paused_note"]


async def test_an_empty_answer_is_not_a_success_and_clearing_expect_makes_it_one(
    client: httpx.AsyncClient, engine: Engine, llm: ChatServer
) -> None:
    schedule = await create(
        client, runner={"type": "command", "argv": ["true"]}, expect={"not_empty": True},
        max_attempts=1,
    )  # fmt: skip
    run = await run_to_end(client, schedule["id"])
    assert (run["status"], run["error"]) == (
        "failed", "expectation not met: not_empty: the output is empty"
    )  # fmt: skip
    cleared = await client.patch(f"{API}/schedules/{schedule['id']}", json={"expect": None})
    assert cleared.status_code == 200 and cleared.json()["expect"] is None
    assert (await run_to_end(client, schedule["id"]))["status"] == "succeeded"


async def test_a_bad_expectation_is_refused_at_its_field_and_nothing_is_written(
    client: httpx.AsyncClient, llm: ChatServer
) -> None:
    runner = runner_of("command", llm)
    body = {"name": "x", "prompt": "p", "trigger": HOURLY, "runner": runner}
    bad = {**body, "expect": {"matches": "(unclosed"}}
    assert_error(await client.post(f"{API}/schedules", json=bad), 422, field="expect.matches")
    assert (await client.get(f"{API}/schedules")).json()["items"] == []
    schedule = await create(client, runner=runner, expect={"not_empty": True})
    patch = {"expect": {"json_schema": {"type": 7}}}
    response = await client.patch(f"{API}/schedules/{schedule['id']}", json=patch)
    assert_error(response, 422, field="expect.json_schema")
    kept = (await client.get(f"{API}/schedules/{schedule['id']}")).json()
    assert kept["expect"] == {"not_empty": True}


async def test_the_dashboard_form_sets_them_and_the_schedule_page_says_them(
    live_app: FastAPI,
) -> None:
    async with browser(live_app, await issue_key(live_app)) as http:
        bad = await http.post("/schedules/new", data={**FORM, "expect": '{"matches": "("}'})
        assert bad.status_code == 422
        assert "expect.matches is not a regular expression" in bad.text
        form = {**FORM, "expect": '{"not_empty": true, "matches": "^OK"}'}
        created = await http.post("/schedules/new", data=form)
        assert created.status_code == 303, created.text
        page = await http.get(created.headers["location"])
        words = "the agent ends well and its output is not empty and matches &#39;^OK&#39;"
        assert words in page.text
        edit = await http.get(created.headers["location"].split("?")[0] + "/edit")
        assert "{&#34;not_empty&#34;: true, &#34;matches&#34;: &#34;^OK&#34;}" in edit.text


async def test_the_preview_checks_them_and_says_them_in_words(client: httpx.AsyncClient) -> None:
    body = {"trigger": HOURLY, "count": 1, "expect": {"matches": "^OK", "not_empty": True}}
    answer = (await client.post(f"{API}/schedules/preview", json=body)).json()
    assert answer["expect"] == "its output is not empty and matches '^OK'"
    assert (await client.post(f"{API}/schedules/preview", json={"trigger": HOURLY})).json()[
        "expect"
    ] is None
    bad = {"trigger": HOURLY, "expect": {"json": "yes"}}
    response = await client.post(f"{API}/schedules/preview", json=bad)
    assert_error(response, 422, "InvalidSchedule", field="expect.json")
