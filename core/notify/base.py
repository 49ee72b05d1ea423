"""The notify seam: the ``Notifier`` protocol, the delivery request, shared validation helpers."""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field
from datetime import date, datetime
from pathlib import Path
from typing import Any, Protocol

from agentcron.core.errors import InvalidSchedule

ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


@dataclass(frozen=True)
class DeliveryRequest:
    """One channel's delivery of one finished run.

    ``body`` is the documented payload (``{"type": "run.finished", "schedule": ..., "run":
    ...}``); ``delivery_id`` is ``<run id>.<channel index>``, stable across retries so a
    receiver can de-duplicate. ``allow_private`` is ``AGENTCRON_ALLOW_PRIVATE_WEBHOOKS``.
    """

    delivery_id: str
    channel: Mapping[str, Any]
    body: Mapping[str, Any]
    workdir: Path
    allow_private: bool = False
    # The owner's stored secrets the channel refers to (name -> value), resolved for this
    # delivery (core.secrets). Out of repr: a request may be logged.
    secrets: Mapping[str, str] = field(default_factory=dict, repr=False)
    # The delivery's trace context (``traceparent``, ``tracestate``) when the engine traces
    # (``core.otel``): a channel that makes a request sends it as headers.
    trace: Mapping[str, str] = field(default_factory=dict)


class Notifier(Protocol):
    """One kind of notify channel (``webhook``, ``email``, ``file``, or a plug-in).

    Contract:
    - ``validate`` runs when a schedule is created or updated; it returns the normalised
      channel or raises ``InvalidSchedule`` naming ``<field>.<key>`` (``field`` is
      ``notify.<index>``). ``type`` and ``notify_on`` are checked by the caller.
    - ``deliver`` is idempotent by ``request.delivery_id`` (a retry after a crash may repeat
      a delivery; the receiver sees the same id). It raises ``RunPermanentError`` when retrying
      cannot help (a 4xx answer, a refused address); any other exception is transient and is
      retried with the shared ``RetryPolicy``.
    - ``target`` says where the channel delivers, safe to show: no secrets, no credentials.
    """

    name: str

    def validate(
        self, channel: Mapping[str, Any], field: str, *, allow_private: bool
    ) -> dict[str, Any]: ...

    def target(self, channel: Mapping[str, Any]) -> str: ...

    async def deliver(self, request: DeliveryRequest) -> None: ...


def _json_default(value: Any) -> Any:
    # ISO 8601 with a "T", as the API writes times; UUIDs and the rest as their text.
    if isinstance(value, datetime | date):
        return value.isoformat()
    return str(value)


def encode_body(body: Mapping[str, Any]) -> bytes:
    """The delivery body as compact UTF-8 JSON, the same bytes for every channel (a webhook
    signs exactly these). Datetimes are ISO 8601, UUIDs and anything else are strings."""
    text = json.dumps(body, default=_json_default, separators=(",", ":"), ensure_ascii=False)
    return text.encode("utf-8")


def check_keys(channel: Mapping[str, Any], allowed: AbstractSet[str], field: str) -> None:
    """Refuse keys a channel type does not know (``type`` and ``notify_on`` are common)."""
    unknown = set(channel) - allowed - {"type", "notify_on"}
    if unknown:
        name = sorted(unknown)[0]
        raise InvalidSchedule(f"unknown field {name!r}", field=f"{field}.{name}")


def required_string(channel: Mapping[str, Any], key: str, field: str, max_len: int = 2000) -> str:
    """``channel[key]`` as a non-empty string of at most ``max_len`` characters."""
    value = channel.get(key)
    if not isinstance(value, str) or not value or len(value) > max_len:
        raise InvalidSchedule(
            f"{key} is required (a string of 1-{max_len} characters)", field=f"{field}.{key}"
        )
    return value
