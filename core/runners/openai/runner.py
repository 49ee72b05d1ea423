"""``OpenAIRunner``: one attempt of an ``openai`` runner, one chat-completions call.

It owns the messages sent (``[system?] + history + [prompt]``), reading the API key at each
attempt, the destination of a tenant's endpoint (resolved once, judged, connected to at the
address judged), the HTTP exchange with its classification of failures, and the attempt's
bound: the timeout and the engine's cancel, either of which abandons the request at once.
"""

from __future__ import annotations

import asyncio
import os
import re
from collections.abc import Mapping
from typing import Any

import httpx

from agentcron.core.errors import RunPermanentError
from agentcron.core.notify.outbound import http_failure, send_pinned, system_tls
from agentcron.core.notify.ssrf import IPAddress, PrivateDestination, resolve, vet
from agentcron.core.runners.base import CancelToken, RunOutcome, RunRequest, TransientRunError
from agentcron.core.runners.openai.reply import Redactor, chat_reply, read_capped, server_message

HISTORY_ROLES = frozenset({"system", "user", "assistant"})
_HEADER_SAFE = re.compile(r"^[\x21-\x7e]+$")  # visible ASCII: what a bearer token may hold


class OpenAIRunner:
    """One chat-completions call per attempt (see ``core.runners.openai`` for the contract).

    ``private_endpoints`` is the stored runner's (set by the tenants' policy, ``core.policy``):
    ``None`` for the operator's own runners (admin keys, trusted owners), whose requests go as
    httpx sends them (the usual proxy environment variables honoured); otherwise the host is
    resolved once per attempt and the request goes to an address of that answer with the name
    kept in ``Host``, SNI and the certificate check, proxies ignored, and with ``False`` every
    address must be public (``core.notify.ssrf.vet``), as a webhook's.

    ``transport`` is for embedding hosts and tests that need a custom httpx transport.
    """

    def __init__(
        self,
        *,
        base_url: str,
        model: str,
        api_key_env: str | None = None,
        api_key_secret: str | None = None,
        system: str | None = None,
        temperature: float | None = None,
        max_tokens: int | None = None,
        transport: httpx.AsyncBaseTransport | None = None,
        private_endpoints: bool | None = None,
    ) -> None:
        self.endpoint = f"{base_url.rstrip('/')}/chat/completions"
        self.model = model
        if (api_key_env is None) == (api_key_secret is None):
            raise ValueError("exactly one of api_key_env and api_key_secret")
        self.api_key_env = api_key_env
        self.api_key_secret = api_key_secret
        self.system = system
        self.temperature = temperature
        self.max_tokens = max_tokens
        self._transport = transport
        self.private_endpoints = private_endpoints

    def __repr__(self) -> str:
        return f"OpenAIRunner(endpoint={self.endpoint!r}, model={self.model!r})"

    def messages(self, request: RunRequest) -> list[dict[str, str]]:
        """``[system?] + history + [prompt]`` as role/content pairs, oldest first.

        History turns of this very run (a re-dispatch after a crash) and turns that are not
        ``{"role": "system"|"user"|"assistant", "content": str}`` are left out, so the same
        turn is never sent twice and a damaged entry cannot fail every later run.
        """
        messages: list[dict[str, str]] = []
        if self.system:
            messages.append({"role": "system", "content": self.system})
        this_run = str(request.run_id)
        for turn in request.history:
            role, content = turn.get("role"), turn.get("content")
            if (
                role in HISTORY_ROLES
                and isinstance(content, str)
                and turn.get("run_id") != this_run
            ):
                messages.append({"role": str(role), "content": content})
        messages.append({"role": "user", "content": request.prompt})
        return messages

    def _api_key(self, request: RunRequest) -> str:
        if self.api_key_secret is not None:
            source = f"secret {self.api_key_secret!r}"
            key = request.secrets.get(self.api_key_secret, "").strip()
            missing = f"{source} (runner.api_key_secret) was not resolved for this run"
        else:
            assert self.api_key_env is not None
            source = f"environment variable {self.api_key_env}"
            key = os.environ.get(self.api_key_env, "").strip()
            missing = f"{source} (runner.api_key_env) is not set"
        if not key:
            raise RunPermanentError(missing)
        if not _HEADER_SAFE.match(key):
            raise RunPermanentError(
                f"{source} holds characters that cannot be sent in an HTTP header"
            )
        return key

    async def run(self, request: RunRequest, cancel: CancelToken) -> RunOutcome:
        """Send the conversation, return the reply with the two turns to store.

        Raises ``TransientRunError`` (408/429/5xx, timeout, connection failure, a host that does
        not resolve; retried by the engine), ``RunPermanentError`` (missing key variable, a
        host that is not public where it must be, other non-2xx status, malformed reply; or
        ``cancelled (<reason>)`` once ``cancel`` is set, which abandons the request and closes
        its connection at once). No call lasts longer than ``request.timeout_seconds``. A
        failure names its class, never what a server that is not an HTTP server sent.
        """
        key = self._api_key(request)
        redact = Redactor(key)
        body: dict[str, Any] = {"model": self.model, "messages": self.messages(request)}
        if self.temperature is not None:
            body["temperature"] = self.temperature
        if self.max_tokens is not None:
            body["max_tokens"] = self.max_tokens
        limit = max(0.001, request.timeout_seconds)

        exchange = asyncio.ensure_future(self._exchange(body, key, limit, redact, request.trace))
        stopped = asyncio.ensure_future(cancel.wait())
        try:
            done, _ = await asyncio.wait(
                {exchange, stopped}, timeout=limit, return_when=asyncio.FIRST_COMPLETED
            )
        finally:
            stopped.cancel()
            if not exchange.done():
                exchange.cancel()  # closes the connection: the server sees the client leave
                await asyncio.wait({exchange})
            if not exchange.cancelled():
                exchange.exception()  # retrieved here; raised below through result()
        if cancel.cancelled:
            raise RunPermanentError(f"cancelled ({cancel.reason}); the request was abandoned")
        if exchange not in done:
            raise TransientRunError(f"no reply from {self.endpoint} within {limit:g} s")
        reply, usage = exchange.result()
        run_id = str(request.run_id)
        return RunOutcome(
            output=reply,
            usage=usage,
            turns=(
                {"role": "user", "content": request.prompt, "run_id": run_id},
                {"role": "assistant", "content": reply, "run_id": run_id},
            ),
        )

    async def _addresses(self, url: httpx.URL) -> list[IPAddress]:
        """Where a tenant's request goes: its host resolved once and, unless the operator
        allows the endpoint, judged (``RunPermanentError`` for a non-public address)."""
        host = url.raw_host.decode("ascii")
        port = url.port or (443 if url.scheme == "https" else 80)
        try:
            return await vet(
                host, port, allow_private=bool(self.private_endpoints), resolver=resolve
            )
        except PrivateDestination as exc:
            raise RunPermanentError(
                f"{exc}, which this schedule may not reach (an operator can allow the endpoint "
                "with AGENTCRON_TENANT_ENDPOINTS)"
            ) from None
        except OSError as exc:
            raise TransientRunError(f"cannot resolve {host} ({exc})") from exc

    async def _exchange(
        self,
        body: dict[str, Any],
        key: str,
        limit: float,
        redact: Redactor,
        trace: Mapping[str, str],
    ) -> tuple[str, dict[str, int] | None]:
        """POST ``body``; the assistant's reply and token usage, or a classified error (see
        ``run``). ``trace``: the attempt's trace context, sent as headers."""
        headers = {"Authorization": f"Bearer {key}", "Accept": "application/json", **trace}
        pinned = self.private_endpoints is not None  # a tenant's: see the class docstring
        try:
            async with httpx.AsyncClient(
                timeout=httpx.Timeout(limit),
                transport=self._transport,
                trust_env=not pinned,
                verify=system_tls() if pinned else True,
            ) as client:
                request = client.build_request("POST", self.endpoint, json=body, headers=headers)
                if pinned:
                    addresses = await self._addresses(request.url)
                    response = await send_pinned(client, request, addresses)
                else:
                    response = await client.send(request, stream=True)
                try:
                    raw = await read_capped(response)
                finally:
                    await response.aclose()
        except httpx.TimeoutException as exc:
            raise TransientRunError(
                redact(f"{self.endpoint} timed out ({type(exc).__name__})")
            ) from exc
        except httpx.UnsupportedProtocol as exc:
            raise RunPermanentError(redact(f"cannot reach {self.endpoint}: {exc}")) from exc
        except httpx.TransportError as exc:
            raise TransientRunError(
                redact(f"cannot reach {self.endpoint} ({http_failure(exc)})")
            ) from exc
        except httpx.HTTPError as exc:
            raise RunPermanentError(
                redact(f"request to {self.endpoint} failed ({type(exc).__name__}: {exc})")
            ) from exc

        status = response.status_code
        if not 200 <= status < 300:
            detail = server_message(raw, redact)
            message = f"HTTP {status} from {self.endpoint}" + (f": {detail}" if detail else "")
            if status in (408, 429) or status >= 500:
                raise TransientRunError(message)
            raise RunPermanentError(message)
        return chat_reply(raw, self.endpoint)
