"""The ``openai`` runner: one chat turn against any OpenAI-compatible endpoint.

Configuration (validated at create/update, ``InvalidSchedule`` naming ``runner.<key>``)::

    {"type": "openai", "base_url": "https://api.example.org/v1", "model": "gpt-4o-mini",
     "api_key_env": "OPENAI_API_KEY", "system": "...", "temperature": 0.2, "max_tokens": 800}

The key comes from exactly one of ``api_key_env`` (an environment variable of the service) or
``api_key_secret`` (the name of the schedule owner's stored secret, ``core.secrets``, resolved
by the engine into ``RunRequest.secrets``).

One attempt is one ``POST {base_url}/chat/completions`` carrying ``[system?] + history +
[prompt]`` (history as role/content pairs, oldest first). A reply is returned as
``RunOutcome(output=reply, turns=[user turn, assistant turn])`` with the run id on each turn;
the engine appends them to the task's conversation when it records the success, so a
``persistent`` schedule's next run sees this one.

Classification: 408, 429, 5xx, timeouts and connection failures are transient
(``TransientRunError``); any other non-2xx status is permanent (``RunPermanentError`` with the
status and the server's message, truncated); a 2xx that is not a chat completion is permanent.

The API key is read (from the environment or the request's secrets) at each attempt and lives
only in the request headers: this module never stores it on an object, and every message it
raises has the key replaced by ``[redacted]`` (servers sometimes echo the key they refused).
"""

from __future__ import annotations

import asyncio
import json
import math
import os
import re
from collections.abc import Mapping
from typing import Any
from urllib.parse import urlsplit

import httpx

from core.errors import InvalidSchedule, RunPermanentError
from core.notify.ssrf import classify, literal_host_kind, resolve
from core.runners.base import CancelToken, Runner, RunOutcome, RunRequest, TransientRunError
from core.secrets import check_name

FIELDS = frozenset(
    {
        "type",
        "base_url",
        "model",
        "api_key_env",
        "api_key_secret",
        "system",
        "temperature",
        "max_tokens",
        "private_endpoints",
    }
)
URL_LIMIT = 2048
MODEL_LIMIT = 256
SYSTEM_LIMIT = 100_000
MAX_TOKENS_LIMIT = 200_000
RESPONSE_LIMIT = 8 * 1024 * 1024  # bytes of a reply body read at most
MESSAGE_LIMIT = 500  # characters of a server's error message kept in the run's error
HISTORY_ROLES = frozenset({"system", "user", "assistant"})
REDACTED = "[redacted]"
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_HEADER_SAFE = re.compile(r"^[\x21-\x7e]+$")  # visible ASCII: what a bearer token may hold


def _invalid(message: str, key: str) -> InvalidSchedule:
    return InvalidSchedule(message, field=f"runner.{key}")


def _check_base_url(value: object) -> str:
    """The base URL without a trailing slash; ``InvalidSchedule`` unless absolute http(s)."""
    if not isinstance(value, str) or not value:
        raise _invalid("base_url is required (an http or https URL)", "base_url")
    if len(value) > URL_LIMIT or not value.isprintable() or any(c.isspace() for c in value):
        raise _invalid(
            f"base_url must be a URL of at most {URL_LIMIT} printable characters", "base_url"
        )
    try:
        parts = urlsplit(value)
        parts.port  # noqa: B018 - parsing the port validates it
    except ValueError:
        raise _invalid("base_url is not a valid URL", "base_url") from None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise _invalid("base_url must be an absolute http or https URL", "base_url")
    if parts.username is not None or parts.password is not None:
        raise _invalid(
            "base_url must not carry credentials; name the key in api_key_env or api_key_secret",
            "base_url",
        )
    if parts.query or parts.fragment:
        raise _invalid("base_url must not have a query or a fragment", "base_url")
    return value.rstrip("/")


class OpenAIRunnerType:
    """The ``openai`` runner type; see the module docstring for the configuration."""

    name = "openai"

    def validate(self, config: Mapping[str, Any]) -> dict[str, Any]:
        """Return the normalised configuration (``base_url`` without a trailing slash).

        Raises ``InvalidSchedule`` naming ``runner.<key>`` for an unknown key, a missing
        required key (``base_url``, ``model``, one of ``api_key_env`` and ``api_key_secret``), a
        wrong type or a value out of range. The key's variable need not be set yet: that is
        checked at each run (the secret's existence is checked by the schedule service).
        """
        unknown = set(config) - FIELDS
        if unknown:
            key = sorted(unknown)[0]
            raise _invalid(f"unknown field {key!r}", key)
        normalised: dict[str, Any] = {
            "type": self.name,
            "base_url": _check_base_url(config.get("base_url")),
        }
        model = config.get("model")
        if not isinstance(model, str) or not model.strip() or len(model) > MODEL_LIMIT:
            raise _invalid(
                f"model is required (a non-empty string of at most {MODEL_LIMIT} characters)",
                "model",
            )
        normalised["model"] = model
        if "api_key_env" in config and "api_key_secret" in config:
            raise _invalid("give api_key_env or api_key_secret, not both", "api_key_secret")
        if "api_key_secret" in config:
            normalised["api_key_secret"] = check_name(
                config["api_key_secret"], "runner.api_key_secret"
            )
        else:
            env = config.get("api_key_env")
            if not isinstance(env, str) or not _ENV_NAME.match(env):
                raise _invalid(
                    "api_key_env (the environment variable holding the key) or api_key_secret "
                    "(the name of a stored secret) is required",
                    "api_key_env",
                )
            normalised["api_key_env"] = env
        if "system" in config:
            system = config["system"]
            if not isinstance(system, str) or len(system) > SYSTEM_LIMIT:
                raise _invalid(
                    f"system must be a string of at most {SYSTEM_LIMIT} characters", "system"
                )
            normalised["system"] = system
        if "temperature" in config:
            temperature = config["temperature"]
            if (
                isinstance(temperature, bool)
                or not isinstance(temperature, int | float)
                or not math.isfinite(temperature)
                or not 0 <= temperature <= 2
            ):
                raise _invalid("temperature must be a number in [0, 2]", "temperature")
            normalised["temperature"] = float(temperature)
        if "max_tokens" in config:
            max_tokens = config["max_tokens"]
            if (
                isinstance(max_tokens, bool)
                or not isinstance(max_tokens, int)
                or not 1 <= max_tokens <= MAX_TOKENS_LIMIT
            ):
                raise _invalid(
                    f"max_tokens must be an integer in [1, {MAX_TOKENS_LIMIT}]", "max_tokens"
                )
            normalised["max_tokens"] = max_tokens
        if "private_endpoints" in config:
            # False: the host must resolve to public addresses only, checked at each attempt
            # (the tenants' guard, core.policy; the webhooks' rule, core.notify.ssrf).
            if not isinstance(config["private_endpoints"], bool):
                raise _invalid("private_endpoints must be true or false", "private_endpoints")
            normalised["private_endpoints"] = config["private_endpoints"]
        return normalised

    def build(self, config: Mapping[str, Any]) -> Runner:
        """A runner for a configuration that ``validate`` accepted."""
        return OpenAIRunner(
            base_url=str(config["base_url"]),
            model=str(config["model"]),
            api_key_env=config.get("api_key_env"),
            api_key_secret=config.get("api_key_secret"),
            system=config.get("system"),
            temperature=config.get("temperature"),
            max_tokens=config.get("max_tokens"),
            public_only=config.get("private_endpoints") is False,
        )


class _Redactor:
    """Replaces the API key wherever it appears in text that leaves this module."""

    def __init__(self, secret: str) -> None:
        self._secret = secret

    def __call__(self, text: str) -> str:
        return text.replace(self._secret, REDACTED) if self._secret else text

    def __repr__(self) -> str:
        return "_Redactor()"


class OpenAIRunner:
    """One chat-completions call per attempt (see the module docstring for the contract).

    ``transport`` is for embedding hosts and tests that need a custom httpx transport; by
    default httpx's own is used (which honours the usual proxy environment variables).
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
        public_only: bool = False,
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
        self.public_only = public_only

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

        Raises ``TransientRunError`` (408/429/5xx, timeout, connection failure; retried by the
        engine), ``RunPermanentError`` (missing key variable, other non-2xx status, malformed
        reply; or ``cancelled (<reason>)`` once ``cancel`` is set, which abandons the request
        and closes its connection at once). No call lasts longer than
        ``request.timeout_seconds``.
        """
        if self.public_only:
            await self._check_public()
        key = self._api_key(request)
        redact = _Redactor(key)
        body: dict[str, Any] = {"model": self.model, "messages": self.messages(request)}
        if self.temperature is not None:
            body["temperature"] = self.temperature
        if self.max_tokens is not None:
            body["max_tokens"] = self.max_tokens
        limit = max(0.001, request.timeout_seconds)

        exchange = asyncio.ensure_future(self._exchange(body, key, limit, redact))
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
        reply = exchange.result()
        run_id = str(request.run_id)
        return RunOutcome(
            output=reply,
            turns=(
                {"role": "user", "content": request.prompt, "run_id": run_id},
                {"role": "assistant", "content": reply, "run_id": run_id},
            ),
        )

    async def _check_public(self) -> None:
        """``RunPermanentError`` unless the endpoint's host resolves to public addresses only.
        (The connection then resolves the name again: a rebinding in between is not caught,
        unlike the webhooks, which connect to the address they checked.)"""
        parts = urlsplit(self.endpoint)
        host = parts.hostname or ""
        kind = literal_host_kind(host)
        if kind is None:
            port = parts.port or (443 if parts.scheme == "https" else 80)
            try:
                addresses = await resolve(host, port)
            except OSError as exc:
                raise TransientRunError(f"cannot resolve {host} ({exc})") from exc
            kind = next((k for k in map(classify, addresses) if k is not None), None)
        if kind is not None:
            raise RunPermanentError(
                f"{host} is a {kind} address, which this schedule may not reach (an operator "
                "can allow the endpoint with AGENTCRON_TENANT_ENDPOINTS)"
            )

    async def _exchange(
        self, body: dict[str, Any], key: str, limit: float, redact: _Redactor
    ) -> str:
        """POST ``body``; the assistant's reply, or a classified error (see ``run``)."""
        headers = {"Authorization": f"Bearer {key}", "Accept": "application/json"}
        try:
            async with httpx.AsyncClient(
                timeout=httpx.Timeout(limit), transport=self._transport
            ) as client:
                request = client.build_request("POST", self.endpoint, json=body, headers=headers)
                response = await client.send(request, stream=True)
                try:
                    raw = await _read_capped(response)
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
                redact(f"cannot reach {self.endpoint} ({type(exc).__name__}: {exc})")
            ) from exc
        except httpx.HTTPError as exc:
            raise RunPermanentError(
                redact(f"request to {self.endpoint} failed ({type(exc).__name__}: {exc})")
            ) from exc

        status = response.status_code
        if not 200 <= status < 300:
            detail = _server_message(raw, redact)
            message = f"HTTP {status} from {self.endpoint}" + (f": {detail}" if detail else "")
            if status in (408, 429) or status >= 500:
                raise TransientRunError(message)
            raise RunPermanentError(message)
        return _reply_text(raw, self.endpoint)


async def _read_capped(response: httpx.Response) -> bytes:
    """The body, or ``RunPermanentError`` once it exceeds ``RESPONSE_LIMIT`` bytes."""
    data = bytearray()
    async for chunk in response.aiter_bytes():
        data += chunk
        if len(data) > RESPONSE_LIMIT:
            raise RunPermanentError(f"the reply is larger than {RESPONSE_LIMIT} bytes")
    return bytes(data)


def _server_message(raw: bytes, redact: _Redactor) -> str:
    """The error text of a non-2xx reply: ``error.message`` (OpenAI's shape), ``error`` or
    ``message`` when it is JSON, else the body; one line, key redacted, then truncated."""
    text = raw.decode("utf-8", errors="replace")
    try:
        data = json.loads(raw)
    except ValueError:
        data = None
    if isinstance(data, dict):
        error = data.get("error")
        if isinstance(error, dict) and isinstance(error.get("message"), str):
            text = error["message"]
        elif isinstance(error, str):
            text = error
        elif isinstance(data.get("message"), str):
            text = data["message"]
    # Redact before truncating, so a cut can never leave part of the key behind.
    text = redact(" ".join(text.split()))
    if len(text) > MESSAGE_LIMIT:
        text = text[: MESSAGE_LIMIT - 1] + "…"
    return text


def _reply_text(raw: bytes, endpoint: str) -> str:
    """``choices[0].message.content`` of a chat completion, or ``RunPermanentError``."""
    try:
        data = json.loads(raw)
        content = data["choices"][0]["message"]["content"]
    except (ValueError, KeyError, IndexError, TypeError) as exc:
        raise RunPermanentError(
            f"malformed reply from {endpoint}: not a chat completion "
            "(expected choices[0].message.content)"
        ) from exc
    if not isinstance(content, str):
        raise RunPermanentError(
            f"malformed reply from {endpoint}: choices[0].message.content is not a string"
        )
    return content


__all__ = ["OpenAIRunner", "OpenAIRunnerType"]
