"""The ``email`` channel: the delivery as a plain-text and HTML mail over SMTP."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from core.errors import InvalidSchedule, RunPermanentError
from core.notify.base import ENV_NAME, DeliveryRequest, check_keys, required_string

_EMAIL = re.compile(r"^[^@\s]+@[^@\s]+\.[^@\s]+$")


class EmailNotifier:
    """``{"type": "email", "to": [addr], "smtp_url_env": "ENV_NAME", "from": addr}``."""

    name = "email"

    def validate(
        self, channel: Mapping[str, Any], field: str, *, allow_private: bool
    ) -> dict[str, Any]:
        check_keys(channel, {"to", "smtp_url_env", "from"}, field)
        to = channel.get("to")
        if not isinstance(to, list) or not to or len(to) > 50:
            raise InvalidSchedule("to must be a list of 1-50 addresses", field=f"{field}.to")
        for index, address in enumerate(to):
            if not isinstance(address, str) or not _EMAIL.match(address):
                raise InvalidSchedule("not an email address", field=f"{field}.to.{index}")
        env = required_string(channel, "smtp_url_env", field, max_len=200)
        if not ENV_NAME.match(env):
            raise InvalidSchedule(
                "must name an environment variable", field=f"{field}.smtp_url_env"
            )
        sender = required_string(channel, "from", field, max_len=320)
        if not _EMAIL.match(sender):
            raise InvalidSchedule("not an email address", field=f"{field}.from")
        return {"type": self.name, "to": list(to), "smtp_url_env": env, "from": sender}

    def target(self, channel: Mapping[str, Any]) -> str:
        return "mailto:" + ",".join(channel["to"])

    async def deliver(self, request: DeliveryRequest) -> None:
        raise RunPermanentError("email delivery is not available yet")
