"""A small real OpenAI-compatible chat-completions server on loopback, for runner tests.

``ChatServer`` is a raw ASGI app served by uvicorn on 127.0.0.1 (a free port) in the test's
event loop. It records every request (path, headers, JSON body) and answers each from a
script of ``Reply`` steps, or, once the script is empty, with an echo completion
``"reply <n>: <last user message>"``. A ``Reply(hang=True)`` never answers: the handler waits
until the client goes away and counts the disconnect, so a test can prove that a cancelled
runner really closed its request.

    async with ChatServer() as server:
        server.script(Reply(status=429, json={"error": {"message": "slow down"}}))
        ... base_url=server.base_url ...
        assert server.requests[0].body["messages"] == [...]
"""

from __future__ import annotations

import asyncio
import json
import socket
from collections import deque
from dataclasses import dataclass
from types import TracebackType
from typing import Any

import uvicorn

Scope = dict[str, Any]
Message = dict[str, Any]


@dataclass(frozen=True)
class Reply:
    """One scripted answer: ``status`` with ``json`` (or raw ``text``); ``hang`` never answers.

    With neither ``json`` nor ``text``, a 2xx status answers with the echo completion.
    """

    status: int = 200
    json: Any = None
    text: str | None = None
    hang: bool = False


@dataclass(frozen=True)
class Recorded:
    """A request as the server received it."""

    method: str
    path: str
    headers: dict[str, str]
    body: Any


def completion(content: str, model: str = "test-model") -> dict[str, Any]:
    """A chat completion in OpenAI's response shape."""
    return {
        "id": "chatcmpl-test",
        "object": "chat.completion",
        "created": 0,
        "model": model,
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": content},
                "finish_reason": "stop",
            }
        ],
        "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
    }


class ChatServer:
    """The server; use it as an async context manager (see the module docstring)."""

    def __init__(self) -> None:
        self.requests: list[Recorded] = []
        self.disconnects = 0
        self._script: deque[Reply] = deque()
        self._changed = asyncio.Condition()
        self._server: uvicorn.Server | None = None
        self._task: asyncio.Task[None] | None = None
        self.port = 0

    @property
    def base_url(self) -> str:
        """What a runner's ``base_url`` should be (the chat endpoint is below it)."""
        return f"http://127.0.0.1:{self.port}/v1"

    def script(self, *replies: Reply) -> None:
        """Answer the next requests with ``replies``, in order (then echo again)."""
        self._script.extend(replies)

    async def wait_requests(self, count: int) -> None:
        """Return once ``count`` requests arrived (bound it with ``asyncio.timeout``)."""
        async with self._changed:
            await self._changed.wait_for(lambda: len(self.requests) >= count)

    async def wait_disconnects(self, count: int) -> None:
        """Return once ``count`` hanging requests saw their client leave."""
        async with self._changed:
            await self._changed.wait_for(lambda: self.disconnects >= count)

    async def _notify(self) -> None:
        async with self._changed:
            self._changed.notify_all()

    # -- ASGI -----------------------------------------------------------------------------

    async def __call__(self, scope: Scope, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return
        raw = b""
        while True:
            message: Message = await receive()
            if message["type"] == "http.disconnect":
                return
            raw += message.get("body", b"")
            if not message.get("more_body"):
                break
        headers = {k.decode("latin-1"): v.decode("latin-1") for k, v in scope["headers"]}
        try:
            body: Any = json.loads(raw) if raw else None
        except ValueError:
            body = raw.decode("utf-8", errors="replace")
        self.requests.append(Recorded(scope["method"], scope["path"], headers, body))
        await self._notify()

        reply = self._script.popleft() if self._script else Reply()
        if reply.hang:
            while (await receive())["type"] != "http.disconnect":
                pass
            self.disconnects += 1
            await self._notify()
            return
        if reply.text is not None:
            payload, kind = reply.text.encode(), b"text/plain; charset=utf-8"
        else:
            data = reply.json if reply.json is not None else self._echo(body)
            payload, kind = json.dumps(data).encode(), b"application/json"
        await send(
            {
                "type": "http.response.start",
                "status": reply.status,
                "headers": [(b"content-type", kind)],
            }
        )
        await send({"type": "http.response.body", "body": payload})

    def _echo(self, body: Any) -> dict[str, Any]:
        messages = body.get("messages", []) if isinstance(body, dict) else []
        users = [m.get("content") for m in messages if m.get("role") == "user"]
        model = body.get("model", "test-model") if isinstance(body, dict) else "test-model"
        return completion(f"reply {len(self.requests)}: {users[-1] if users else ''}", model)

    # -- lifecycle ------------------------------------------------------------------------

    async def __aenter__(self) -> ChatServer:
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(("127.0.0.1", 0))
        self.port = sock.getsockname()[1]
        config = uvicorn.Config(
            self,
            lifespan="off",
            log_level="warning",
            access_log=False,
            ws="none",
            timeout_graceful_shutdown=1,
        )
        self._server = uvicorn.Server(config)
        self._task = asyncio.create_task(self._server.serve(sockets=[sock]))
        async with asyncio.timeout(10):
            while not self._server.started:
                if self._task.done():
                    self._task.result()  # raise the start-up failure
                await asyncio.sleep(0.005)
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        assert self._server is not None and self._task is not None
        self._server.should_exit = True
        await asyncio.wait({self._task}, timeout=5)
        if not self._task.done():
            self._task.cancel()
