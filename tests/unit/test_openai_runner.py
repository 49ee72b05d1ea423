"""The ``openai`` runner against a real OpenAI-compatible server on loopback.

The server (``tests.chat_server.ChatServer``) records every request and answers from a script,
so each test checks what went over the wire and how the runner classified the answer.
"""

from __future__ import annotations

import asyncio
import socket
import time
import uuid
from collections.abc import AsyncIterator, Mapping, Sequence
from typing import Any

import pytest

from agentcron.core.errors import InvalidSchedule, RunPermanentError
from agentcron.core.runners import build_runner, validate_runner
from agentcron.core.runners.base import CancelToken, RunOutcome, RunRequest, TransientRunError
from agentcron.core.runners.openai import reply as openai_reply
from tests.chat_server import ChatServer, Reply, completion
from tests.factories import run_request
from tests.network import BANNERS, MARK, listening, resolving

KEY_ENV = "AGENTCRON_TEST_OPENAI_KEY"
KEY = "sk-test-4f1c9e0b7a2d4c55-do-not-leak"


@pytest.fixture
async def server(monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[ChatServer]:
    monkeypatch.setenv(KEY_ENV, KEY)
    async with ChatServer() as chat:
        yield chat


def config(base_url: str) -> dict[str, Any]:
    return {"type": "openai", "base_url": base_url, "model": "test-model", "api_key_env": KEY_ENV}


def request(
    prompt: str = "What changed today?",
    *,
    history: Sequence[Mapping[str, Any]] = (),
    timeout: float = 10.0,
    run_id: uuid.UUID | None = None,
) -> RunRequest:
    return run_request(
        run_id=run_id or uuid.uuid4(), prompt=prompt, timeout_seconds=timeout, history=history
    )


async def run(
    server: ChatServer,
    req: RunRequest | None = None,
    token: CancelToken | None = None,
    **extra: Any,
) -> RunOutcome:
    runner = build_runner(validate_runner({**config(server.base_url), **extra}))
    return await runner.run(req or request(), token or CancelToken())


def assert_no_key(exc: BaseException) -> None:
    assert KEY not in str(exc) and KEY not in repr(exc)


# -- what is sent, what comes back --------------------------------------------------------


@pytest.mark.parametrize("options", [{}, {"temperature": 0.2, "max_tokens": 50}])
async def test_sends_the_prompt_with_only_the_options_given_and_returns_both_turns(
    server: ChatServer, options: dict[str, Any]
) -> None:
    """The system message and the history, sent before the prompt, are proved by
    tests/integration/test_agents.py::test_a_persistent_schedule_carries_the_conversation."""
    req = request("just this")
    # A trailing slash in base_url is ignored.
    outcome = await run(server, req, base_url=server.base_url + "/", **options)

    [sent] = server.requests
    assert (sent.method, sent.path) == ("POST", "/v1/chat/completions")
    assert sent.headers["authorization"] == f"Bearer {KEY}"
    assert sent.body == {
        "model": "test-model",
        "messages": [{"role": "user", "content": "just this"}],
        **options,
    }
    assert outcome.output == "reply 1: just this"
    run_id = str(req.run_id)
    assert list(outcome.turns) == [
        {"role": "user", "content": "just this", "run_id": run_id},
        {"role": "assistant", "content": "reply 1: just this", "run_id": run_id},
    ]


async def test_a_resumed_run_does_not_send_its_own_turn_twice(server: ChatServer) -> None:
    """Dispatch is idempotent by run id: turns already stored for this run are left out."""
    this_run, earlier = uuid.uuid4(), str(uuid.uuid4())
    history: list[dict[str, Any]] = [
        {"role": "user", "content": "old", "run_id": earlier},
        {"role": "assistant", "content": "old reply", "run_id": earlier},
        {"role": "user", "content": "again", "run_id": str(this_run)},
        {"role": "assistant", "content": "stored reply", "run_id": str(this_run)},
        {"role": "tool", "content": "not a chat turn", "run_id": earlier},
        {"role": "user", "content": None, "run_id": earlier},
    ]
    await run(server, request("again", history=history, run_id=this_run))
    assert server.requests[0].body["messages"] == [
        {"role": "user", "content": "old"},
        {"role": "assistant", "content": "old reply"},
        {"role": "user", "content": "again"},
    ]


# -- classification -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("reply", "error", "message"),
    [
        *(
            (
                Reply(status, json={"error": {"message": "try again"}}),
                TransientRunError,
                "try again",
            )
            for status in (429, 500, 502, 503, 408)  # rate limits, server errors, timeouts
        ),
        (
            Reply(400, json={"error": {"message": "max_tokens is too large"}}),
            RunPermanentError,
            "max_tokens is too large",
        ),
        (
            Reply(404, json={"error": "model 'x' not found"}),
            RunPermanentError,
            "model 'x' not found",
        ),
        (Reply(422, json={"message": "bad input"}), RunPermanentError, "bad input"),
        (Reply(403, text="forbidden\nby policy"), RunPermanentError, "forbidden by policy"),
    ],
)
async def test_an_error_status_is_transient_or_permanent_with_the_server_message(
    server: ChatServer, reply: Reply, error: type[Exception], message: str
) -> None:
    server.script(reply)
    with pytest.raises(error) as caught:
        await run(server)
    text = str(caught.value)
    assert text == f"HTTP {reply.status} from {server.base_url}/chat/completions: {message}"
    assert_no_key(caught.value)


async def test_a_long_server_message_is_truncated(server: ChatServer) -> None:
    server.script(Reply(status=400, json={"error": {"message": "x" * 10_000}}))
    with pytest.raises(RunPermanentError) as caught:
        await run(server)
    assert len(str(caught.value)) < openai_reply.MESSAGE_LIMIT + 100
    assert str(caught.value).endswith("…")


@pytest.mark.parametrize(
    "reply",
    [
        Reply(text="<html>not json</html>"),
        Reply(json={"choices": []}),
        Reply(json={"object": "list", "data": []}),
        Reply(json={"choices": [{"message": {"role": "assistant", "content": None}}]}),
        Reply(json=["not", "an", "object"]),
    ],
    ids=["not_json", "no_choices", "not_a_completion", "null_content", "json_list"],
)
async def test_a_malformed_reply_is_permanent(server: ChatServer, reply: Reply) -> None:
    server.script(reply)
    with pytest.raises(RunPermanentError, match="malformed reply"):
        await run(server)


async def test_an_oversized_reply_is_permanent(
    server: ChatServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(openai_reply, "RESPONSE_LIMIT", 1000)  # read where the body is read
    server.script(Reply(json=completion("y" * 5000)))
    with pytest.raises(RunPermanentError, match="larger than 1000 bytes"):
        await run(server)


async def test_an_empty_reply_is_a_success(server: ChatServer) -> None:
    server.script(Reply(json=completion("")))
    outcome = await run(server)
    assert outcome.output == "" and outcome.turns[1]["content"] == ""


async def test_a_refused_connection_is_transient(server: ChatServer) -> None:
    with socket.socket() as sock:  # a port that was free a moment ago: nothing listens
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    with pytest.raises(TransientRunError, match="cannot reach") as caught:
        await run(server, base_url=f"http://127.0.0.1:{port}/v1")
    assert_no_key(caught.value)


@pytest.mark.parametrize("banner", BANNERS.values(), ids=BANNERS.keys())
async def test_a_service_that_is_not_http_is_named_never_quoted(
    server: ChatServer, banner: bytes
) -> None:
    """An endpoint the operator allows, or any with private destinations allowed, may be any
    service of the network: what it says must not come back in the run's error."""
    async with listening(banner) as service:
        with pytest.raises(Exception) as caught:
            await run(server, request(timeout=0.5), base_url=f"http://127.0.0.1:{service.port}/v1")
    assert service.connections == 1
    assert MARK not in str(caught.value) and "nginx" not in str(caught.value), caught.value


async def test_a_tenants_endpoint_is_reached_at_the_address_it_resolved_to(
    server: ChatServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A tenant's runner (the policy stores ``private_endpoints``) resolves its host once and
    # connects to that answer. ``.test`` never resolves in real DNS (RFC 6761): the request can
    # only arrive through the address given here, while it still names the host.
    monkeypatch.setattr("agentcron.core.runners.openai.runner.resolve", resolving("127.0.0.1"))
    port = server.base_url.rsplit(":", 1)[1].split("/")[0]
    named = f"http://models.example.test:{port}/v1"
    outcome = await run(server, request("hi"), base_url=named, private_endpoints=True)
    assert outcome.output == "reply 1: hi"
    assert [r.headers["host"] for r in server.requests] == [f"models.example.test:{port}"]


async def test_a_hanging_server_is_a_transient_timeout_within_the_limit(
    server: ChatServer,
) -> None:
    server.script(Reply(hang=True))
    started = time.monotonic()
    with pytest.raises(TransientRunError) as caught:
        await run(server, request(timeout=0.3))
    assert time.monotonic() - started < 2.0
    assert "timed out" in str(caught.value) or "no reply" in str(caught.value)
    async with asyncio.timeout(5):
        await server.wait_disconnects(1)  # the request was closed, not left behind


async def test_the_cancel_token_abandons_the_request_at_once(server: ChatServer) -> None:
    server.script(Reply(hang=True))
    token = CancelToken()
    job = asyncio.ensure_future(run(server, request(timeout=30), token))
    async with asyncio.timeout(5):
        await server.wait_requests(1)
    started = time.monotonic()
    token.cancel("cancel")
    with pytest.raises(RunPermanentError, match=r"cancelled \(cancel\)"):
        await job
    assert time.monotonic() - started < 1.0
    async with asyncio.timeout(5):
        await server.wait_disconnects(1)


async def test_a_token_already_set_cancels_at_once(server: ChatServer) -> None:
    token = CancelToken()
    token.cancel("shutdown")
    with pytest.raises(RunPermanentError, match=r"cancelled \(shutdown\)"):
        await run(server, token=token)


# -- the key ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "says"),
    [
        (None, "is not set"),
        ("", "is not set"),
        ("   ", "is not set"),
        ("sk-é-secret", "cannot be sent in an HTTP header"),
    ],
)
async def test_a_key_that_is_blank_or_cannot_be_a_header_is_permanent_and_not_echoed(
    server: ChatServer, monkeypatch: pytest.MonkeyPatch, value: str | None, says: str
) -> None:
    if value is None:
        monkeypatch.delenv(KEY_ENV, raising=False)
    else:
        monkeypatch.setenv(KEY_ENV, value)
    with pytest.raises(RunPermanentError) as caught:
        await run(server)
    assert KEY_ENV in str(caught.value) and says in str(caught.value)
    assert "sk-é" not in str(caught.value)
    assert server.requests == []


async def test_the_key_is_in_no_config_or_repr(server: ChatServer) -> None:
    normalised = validate_runner(config(server.base_url))
    runner = build_runner(normalised)
    await runner.run(request(), CancelToken())
    assert KEY not in repr(normalised)
    assert KEY not in repr(runner) and KEY not in repr(vars(runner))


# -- validation ---------------------------------------------------------------------------


def test_validate_normalises() -> None:
    given = {
        "type": "openai",
        "base_url": "https://api.example.org/v1/",
        "model": "gpt-test",
        "api_key_env": "OPENAI_API_KEY",
        "system": "",
        "temperature": 1,
        "max_tokens": 200_000,
    }
    normalised = validate_runner(given)
    assert normalised == {**given, "base_url": "https://api.example.org/v1", "temperature": 1.0}
    assert type(normalised["temperature"]) is float


GOOD = {"base_url": "http://127.0.0.1:9/v1", "model": "m", "api_key_env": "KEY"}


@pytest.mark.parametrize(
    ("changes", "field"),
    [
        ({"colour": "blue"}, "runner.colour"),
        ({"api_key": "sk-inline"}, "runner.api_key"),
        ({"base_url": None}, "runner.base_url"),
        ({"base_url": 5}, "runner.base_url"),
        ({"base_url": ""}, "runner.base_url"),
        ({"base_url": "ftp://example.org/v1"}, "runner.base_url"),
        ({"base_url": "example.org/v1"}, "runner.base_url"),
        ({"base_url": "http:///v1"}, "runner.base_url"),
        ({"base_url": "http://user:pw@example.org/v1"}, "runner.base_url"),
        ({"base_url": "http://example.org/v1?key=1"}, "runner.base_url"),
        ({"base_url": "http://example.org:99999/v1"}, "runner.base_url"),
        ({"base_url": "http://exa mple.org/v1"}, "runner.base_url"),
        ({"base_url": "https://example.org/" + "a" * 3000}, "runner.base_url"),
        ({"model": None}, "runner.model"),
        ({"model": ""}, "runner.model"),
        ({"model": 3}, "runner.model"),
        ({"model": "m" * 257}, "runner.model"),
        ({"api_key_env": None}, "runner.api_key_env"),
        ({"api_key_env": "MY-KEY"}, "runner.api_key_env"),
        ({"api_key_env": "1KEY"}, "runner.api_key_env"),
        ({"api_key_env": ["KEY"]}, "runner.api_key_env"),
        ({"system": 5}, "runner.system"),
        ({"temperature": "0.5"}, "runner.temperature"),
        ({"temperature": True}, "runner.temperature"),
        ({"temperature": -0.1}, "runner.temperature"),
        ({"temperature": 2.01}, "runner.temperature"),
        ({"temperature": float("nan")}, "runner.temperature"),
        ({"max_tokens": 0}, "runner.max_tokens"),
        ({"max_tokens": 200_001}, "runner.max_tokens"),
        ({"max_tokens": 1.5}, "runner.max_tokens"),
        ({"max_tokens": True}, "runner.max_tokens"),
    ],
)
def test_validate_rejects_naming_the_field(changes: dict[str, Any], field: str) -> None:
    candidate: dict[str, Any] = {"type": "openai", **GOOD, **changes}
    for key, value in changes.items():
        if value is None:
            del candidate[key]
    with pytest.raises(InvalidSchedule) as caught:
        validate_runner(candidate)
    assert caught.value.field == field
