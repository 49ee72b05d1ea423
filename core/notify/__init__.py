"""Notify channels: validation and masking of channel configurations.

Delivery itself (the engine sending a finished run to each channel) lives beside this, one
module per channel.
"""

from __future__ import annotations

import base64
import binascii
import re
from collections.abc import Mapping, Sequence
from typing import Any
from urllib.parse import urlsplit

from core.errors import InvalidSchedule

NOTIFY_ON = ("succeeded", "failed", "timed_out")
_MASK = "…"
_EMAIL = re.compile(r"^[^@\s]+@[^@\s]+\.[^@\s]+$")
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def _fail(message: str, field: str) -> InvalidSchedule:
    return InvalidSchedule(message, field=field)


def _check_keys(channel: Mapping[str, Any], allowed: set[str], field: str) -> None:
    unknown = set(channel) - allowed - {"type", "notify_on"}
    if unknown:
        name = sorted(unknown)[0]
        raise _fail(f"unknown field {name!r}", f"{field}.{name}")


def _string(channel: Mapping[str, Any], key: str, field: str, max_len: int = 2000) -> str:
    value = channel.get(key)
    if not isinstance(value, str) or not value or len(value) > max_len:
        raise _fail(f"{key} is required (a string of 1-{max_len} characters)", f"{field}.{key}")
    return value


def _webhook(channel: Mapping[str, Any], field: str) -> dict[str, Any]:
    _check_keys(channel, {"url", "secret"}, field)
    url = _string(channel, "url", field)
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise _fail("url must be an absolute http(s) URL", f"{field}.url")
    secret = _string(channel, "secret", field, max_len=200)
    if not secret.startswith("whsec_"):
        raise _fail("secret must look like whsec_<base64>", f"{field}.secret")
    try:
        key = base64.b64decode(secret.removeprefix("whsec_"), validate=True)
    except (binascii.Error, ValueError):
        raise _fail("secret is not valid base64 after whsec_", f"{field}.secret") from None
    if not 24 <= len(key) <= 64:
        raise _fail("secret must decode to 24-64 bytes", f"{field}.secret")
    return {"type": "webhook", "url": url, "secret": secret}


def _email(channel: Mapping[str, Any], field: str) -> dict[str, Any]:
    _check_keys(channel, {"to", "smtp_url_env", "from"}, field)
    to = channel.get("to")
    if not isinstance(to, list) or not to or len(to) > 50:
        raise _fail("to must be a list of 1-50 addresses", f"{field}.to")
    for index, address in enumerate(to):
        if not isinstance(address, str) or not _EMAIL.match(address):
            raise _fail("not an email address", f"{field}.to.{index}")
    env = _string(channel, "smtp_url_env", field, max_len=200)
    if not _ENV_NAME.match(env):
        raise _fail("must name an environment variable", f"{field}.smtp_url_env")
    sender = _string(channel, "from", field, max_len=320)
    if not _EMAIL.match(sender):
        raise _fail("not an email address", f"{field}.from")
    return {"type": "email", "to": list(to), "smtp_url_env": env, "from": sender}


def _file(channel: Mapping[str, Any], field: str) -> dict[str, Any]:
    _check_keys(channel, {"path", "mode"}, field)
    path = _string(channel, "path", field, max_len=500)
    if path.startswith(("/", "\\")) or ".." in path.replace("\\", "/").split("/"):
        raise _fail("path must stay inside the task's working directory", f"{field}.path")
    mode = channel.get("mode", "append")
    if mode not in ("append", "replace"):
        raise _fail("mode must be append or replace", f"{field}.mode")
    return {"type": "file", "path": path, "mode": mode}


_VALIDATORS = {"webhook": _webhook, "email": _email, "file": _file}


def validate_channels(channels: Sequence[Any]) -> list[dict[str, Any]]:
    """Check notify channels; return their normalised form or raise ``InvalidSchedule``."""
    result = []
    for index, channel in enumerate(channels):
        field = f"notify.{index}"
        if not isinstance(channel, Mapping):
            raise _fail("a channel is an object", field)
        kind = channel.get("type")
        validator = _VALIDATORS.get(kind) if isinstance(kind, str) else None
        if validator is None:
            raise _fail(f"type must be one of {', '.join(_VALIDATORS)}", f"{field}.type")
        normalised = validator(channel, field)
        notify_on = channel.get("notify_on", ["succeeded"])
        if (
            not isinstance(notify_on, list)
            or not notify_on
            or any(item not in NOTIFY_ON for item in notify_on)
        ):
            raise _fail(f"notify_on is a list of {', '.join(NOTIFY_ON)}", f"{field}.notify_on")
        normalised["notify_on"] = list(dict.fromkeys(notify_on))
        result.append(normalised)
    return result


def mask_secret(secret: str) -> str:
    """The form a secret takes in API output: its prefix and last four characters."""
    return f"whsec_{_MASK}{secret[-4:]}"


def masked_channels(channels: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Channels as shown to clients: secrets masked."""
    shown = []
    for channel in channels:
        copy = dict(channel)
        if "secret" in copy:
            copy["secret"] = mask_secret(str(copy["secret"]))
        shown.append(copy)
    return shown


def keep_masked_secrets(new: list[Any], old: Sequence[Mapping[str, Any]]) -> list[Any]:
    """Swap a masked secret sent back unchanged for the stored secret at the same index."""
    merged = []
    for index, channel in enumerate(new):
        if (
            isinstance(channel, dict)
            and isinstance(channel.get("secret"), str)
            and index < len(old)
            and "secret" in old[index]
            and channel["secret"] == mask_secret(str(old[index]["secret"]))
        ):
            channel = {**channel, "secret": old[index]["secret"]}
        merged.append(channel)
    return merged
