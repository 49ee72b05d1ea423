"""The ``openai`` runner through the real API and engine, on both databases (the ``python``
runner: tests/unit/test_python_runner.py).

Schedules are created and run through the HTTP API (``client``); the in-process engine
(``engine``, sharing the test database) executes them. The ``openai`` runner talks to a real
OpenAI-compatible server on loopback (``tests.chat_server``) that records what it was sent, so
the tests see the conversation a ``persistent`` schedule carries from run to run, and the key.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
from structlog.testing import capture_logs

from tests.chat_server import ChatServer, Reply
from tests.integration.delivery_kit import created, schedule_body
from tests.integration.engine_kit import API, Engine, run_to_end

KEY_ENV = "AGENTCRON_TEST_AGENTS_KEY"
KEY = "sk-live-7d0c3b9e2f8a41d6-must-never-be-shown"


@pytest.fixture
async def llm(monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[ChatServer]:
    monkeypatch.setenv(KEY_ENV, KEY)
    async with ChatServer() as server:
        yield server


def openai_runner(server: ChatServer, **extra: Any) -> dict[str, Any]:
    runner = {"type": "openai", "base_url": server.base_url, "model": "test-model"}
    return runner | {"api_key_env": KEY_ENV, **extra}


async def create(client: httpx.AsyncClient, runner: dict[str, Any], **fields: Any) -> str:
    schedule = await created(client, schedule_body(runner, prompt="question 1", **fields))
    return str(schedule["id"])


async def set_prompt(client: httpx.AsyncClient, schedule_id: str, prompt: str) -> None:
    response = await client.patch(f"{API}/schedules/{schedule_id}", json={"prompt": prompt})
    assert response.status_code == 200, response.text


async def conversation(client: httpx.AsyncClient, task_id: str) -> list[dict[str, Any]]:
    response = await client.get(f"{API}/tasks/{task_id}")
    assert response.status_code == 200, response.text
    turns: list[dict[str, Any]] = response.json()["conversation"]
    return turns


# -- openai: the conversation -------------------------------------------------------------


async def test_a_persistent_schedule_carries_the_conversation(
    client: httpx.AsyncClient, engine: Engine, llm: ChatServer
) -> None:
    runner = openai_runner(llm, system="Answer in one line.")
    schedule_id = await create(client, runner, mode="persistent")
    runs = []
    for n in (1, 2, 3):
        await set_prompt(client, schedule_id, f"question {n}")
        run = await run_to_end(client, schedule_id)
        assert run["status"] == "succeeded", run["error"]
        assert run["output"] == f"reply {n}: question {n}"
        runs.append(run)

    system = {"role": "system", "content": "Answer in one line."}
    pairs = [
        [{"role": "user", "content": f"question {n}"}, {"role": "assistant", "content": reply}]
        for n, reply in ((1, "reply 1: question 1"), (2, "reply 2: question 2"))
    ]
    sent = [request.body["messages"] for request in llm.requests]
    assert sent[0] == [system, {"role": "user", "content": "question 1"}]
    assert sent[1] == [system, *pairs[0], {"role": "user", "content": "question 2"}]
    assert sent[2] == [system, *pairs[0], *pairs[1], {"role": "user", "content": "question 3"}]

    task_ids = {run["task_id"] for run in runs}
    assert len(task_ids) == 1  # one task keeps the conversation
    turns = await conversation(client, task_ids.pop())
    assert len(turns) == 6
    assert [(t["role"], t["content"]) for t in turns] == [
        (role, f"{prefix}question {n}")
        for n in (1, 2, 3)
        for role, prefix in (("user", ""), ("assistant", f"reply {n}: "))
    ]
    assert [t["run_id"] for t in turns] == [run["id"] for run in runs for _ in (1, 2)]


async def test_a_retried_run_adds_its_turns_once(
    client: httpx.AsyncClient, engine: Engine, llm: ChatServer
) -> None:
    """A transient failure then a success: the same turn is sent twice, stored once."""
    schedule_id = await create(client, openai_runner(llm), mode="persistent", max_attempts=3)
    first = await run_to_end(client, schedule_id)
    llm.script(Reply(status=503, json={"error": {"message": "overloaded"}}))
    await set_prompt(client, schedule_id, "question 2")
    second = await run_to_end(client, schedule_id)
    assert second["status"] == "succeeded" and second["attempt"] == 2

    retried = [request.body["messages"] for request in llm.requests[1:]]
    assert len(retried) == 2 and retried[0] == retried[1]
    assert [m["content"] for m in retried[1]] == ["question 1", "reply 1: question 1", "question 2"]
    turns = await conversation(client, second["task_id"])
    assert [t["run_id"] for t in turns] == [first["id"]] * 2 + [second["id"]] * 2


# -- the key stays secret -----------------------------------------------------------------


async def test_the_api_key_appears_in_no_response_and_no_log(
    client: httpx.AsyncClient,
    engine: Engine,
    llm: ChatServer,
    caplog: pytest.LogCaptureFixture,
    capsys: pytest.CaptureFixture[str],
) -> None:
    caplog.set_level(logging.DEBUG)
    bodies: list[str] = []

    async def keep(response: httpx.Response) -> None:
        await response.aread()
        bodies.append(response.text)

    client.event_hooks["response"].append(keep)
    with capture_logs() as events:
        schedule_id = await create(client, openai_runner(llm), mode="persistent")
        ok = await run_to_end(client, schedule_id)
        # A server that echoes the key it refused: the run's error must not repeat it.
        llm.script(Reply(status=401, json={"error": {"message": f"Incorrect API key: {KEY}"}}))
        refused = await run_to_end(client, schedule_id)
        await client.get(f"{API}/schedules/{schedule_id}")
        await client.get(f"{API}/schedules/{schedule_id}/runs")
        await client.get(f"{API}/tasks/{ok['task_id']}")

    assert ok["status"] == "succeeded"
    assert refused["status"] == "failed" and refused["attempt"] == 1
    assert "HTTP 401" in refused["error"] and "Incorrect API key: [redacted]" in refused["error"]
    # The key really was in play: the server received it on every request.
    assert [r.headers["authorization"] for r in llm.requests] == [f"Bearer {KEY}"] * 2

    assert len(bodies) >= 8
    assert all(KEY not in body for body in bodies)
    assert any(event["event"] == "run_finished" for event in events)  # the capture works
    assert KEY not in repr(events)
    assert KEY not in caplog.text
    captured = capsys.readouterr()
    assert KEY not in captured.out and KEY not in captured.err
