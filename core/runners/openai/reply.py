"""The endpoint's reply as the ``openai`` runner reads it, and the key kept out of every error.

It owns reading a reply body up to ``RESPONSE_LIMIT`` bytes, the one-line, truncated error
message of a non-2xx reply, the assistant's text of a chat completion (or the permanent error
of a malformed one), and ``Redactor``, which replaces the API key in any text that leaves the
runner.
"""

from __future__ import annotations

import json

import httpx

from agentcron.core.errors import RunPermanentError

RESPONSE_LIMIT = 8 * 1024 * 1024  # bytes of a reply body read at most
MESSAGE_LIMIT = 500  # characters of a server's error message kept in the run's error
REDACTED = "[redacted]"


class Redactor:
    """Replaces the API key wherever it appears in text that leaves the runner."""

    def __init__(self, secret: str) -> None:
        self._secret = secret

    def __call__(self, text: str) -> str:
        return text.replace(self._secret, REDACTED) if self._secret else text

    def __repr__(self) -> str:
        return "Redactor()"


async def read_capped(response: httpx.Response) -> bytes:
    """The body, or ``RunPermanentError`` once it exceeds ``RESPONSE_LIMIT`` bytes."""
    data = bytearray()
    async for chunk in response.aiter_bytes():
        data += chunk
        if len(data) > RESPONSE_LIMIT:
            raise RunPermanentError(f"the reply is larger than {RESPONSE_LIMIT} bytes")
    return bytes(data)


def server_message(raw: bytes, redact: Redactor) -> str:
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


def chat_reply(raw: bytes, endpoint: str) -> tuple[str, dict[str, int] | None]:
    """``choices[0].message.content`` of a chat completion, and its token usage when the reply
    says it (``usage.prompt_tokens`` and ``completion_tokens``, as ``input_tokens`` and
    ``output_tokens``: the attempt's span names them so); or ``RunPermanentError``."""
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
    usage = data.get("usage") if isinstance(data, dict) else None
    names = (("input_tokens", "prompt_tokens"), ("output_tokens", "completion_tokens"))
    counts = {
        ours: usage[theirs]
        for ours, theirs in names
        if isinstance(usage, dict) and type(usage.get(theirs)) is int
    }
    return content, counts or None
