"""The ``webhook`` channel: an HTTP POST of the delivery body, signed per Standard Webhooks."""

from __future__ import annotations

import base64
import binascii
from collections.abc import Mapping
from typing import Any
from urllib.parse import urlsplit

from core.errors import InvalidSchedule, RunPermanentError
from core.notify.base import DeliveryRequest, check_keys, required_string


class WebhookNotifier:
    """``{"type": "webhook", "url": "https://...", "secret": "whsec_<base64>"}``."""

    name = "webhook"

    def validate(
        self, channel: Mapping[str, Any], field: str, *, allow_private: bool
    ) -> dict[str, Any]:
        check_keys(channel, {"url", "secret"}, field)
        url = required_string(channel, "url", field)
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise InvalidSchedule("url must be an absolute http(s) URL", field=f"{field}.url")
        secret = required_string(channel, "secret", field, max_len=200)
        if not secret.startswith("whsec_"):
            raise InvalidSchedule("secret must look like whsec_<base64>", field=f"{field}.secret")
        try:
            key = base64.b64decode(secret.removeprefix("whsec_"), validate=True)
        except (binascii.Error, ValueError):
            raise InvalidSchedule(
                "secret is not valid base64 after whsec_", field=f"{field}.secret"
            ) from None
        if not 24 <= len(key) <= 64:
            raise InvalidSchedule("secret must decode to 24-64 bytes", field=f"{field}.secret")
        return {"type": self.name, "url": url, "secret": secret}

    def target(self, channel: Mapping[str, Any]) -> str:
        parts = urlsplit(str(channel["url"]))
        return f"{parts.scheme}://{parts.hostname}{parts.path}"

    async def deliver(self, request: DeliveryRequest) -> None:
        raise RunPermanentError("webhook delivery is not available yet")
