"""The notify seam: the ``Notifier`` protocol and the payload every channel delivers."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol


@dataclass(frozen=True)
class DeliveryRequest:
    """One channel's delivery of one finished run.

    ``body`` is the documented payload (``{"type": "run.finished", "schedule": ..., "run":
    ...}``); ``delivery_id`` is ``<run id>.<channel index>``, stable across retries so a
    receiver can de-duplicate.
    """

    delivery_id: str
    channel: Mapping[str, Any]
    body: Mapping[str, Any]
    workdir: Path


class Notifier(Protocol):
    """Delivers a finished run to one kind of channel.

    Contract: idempotent by ``delivery_id`` (a retry after a crash may repeat a delivery; the
    receiver sees the same id). Raise ``RunPermanentError`` when retrying cannot help (4xx,
    bad address); any other exception is transient and retried with the shared RetryPolicy.
    """

    async def deliver(self, request: DeliveryRequest) -> None: ...

    def target(self, channel: Mapping[str, Any]) -> str:
        """Where the channel delivers, safe to show (no secrets)."""
        ...
