"""Notify channels: the registry, validation and masking of channel configurations.

One module per channel type (``file``, ``webhook``, ``email``); third parties add their own
through the ``agentcron.notifiers`` entry-point group (an object with the ``Notifier``
protocol of ``core.notify.base``). Delivery of a finished run lives in ``core.notify.delivery``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from agentcron.core.errors import InvalidSchedule
from agentcron.core.notify.base import Notifier
from agentcron.core.notify.email.notifier import EmailNotifier
from agentcron.core.notify.file import FileNotifier
from agentcron.core.notify.webhook import WebhookNotifier
from agentcron.core.plugins import load_entry_points

NOTIFY_ON = ("succeeded", "failed", "timed_out")
ENTRY_POINT_GROUP = "agentcron.notifiers"
_MASK = "…"
_REGISTRY: dict[str, Notifier] = {}
_plugins_loaded = False


def register_notifier(notifier: Notifier) -> None:
    """Make a channel type available to schedules under ``notifier.name``."""
    _REGISTRY[notifier.name] = notifier


def _load_plugins() -> None:
    global _plugins_loaded
    if _plugins_loaded:
        return
    _plugins_loaded = True
    load_entry_points(ENTRY_POINT_GROUP, register_notifier)


def notifier(kind: str) -> Notifier | None:
    """The registered channel type called ``kind``, or None."""
    _load_plugins()
    return _REGISTRY.get(kind)


def validate_channels(
    channels: Sequence[Any], *, allow_private: bool = False
) -> list[dict[str, Any]]:
    """Check notify channels; return their normalised form or raise ``InvalidSchedule``."""
    _load_plugins()
    result = []
    for index, channel in enumerate(channels):
        field = f"notify.{index}"
        if not isinstance(channel, Mapping):
            raise InvalidSchedule("a channel is an object", field=field)
        kind = channel.get("type")
        found = _REGISTRY.get(kind) if isinstance(kind, str) else None
        if found is None:
            known = ", ".join(sorted(_REGISTRY))
            raise InvalidSchedule(f"type must be one of {known}", field=f"{field}.type")
        normalised = found.validate(channel, field, allow_private=allow_private)
        notify_on = channel.get("notify_on", ["succeeded"])
        if (
            not isinstance(notify_on, list)
            or not notify_on
            or any(item not in NOTIFY_ON for item in notify_on)
        ):
            raise InvalidSchedule(
                f"notify_on is a list of {', '.join(NOTIFY_ON)}", field=f"{field}.notify_on"
            )
        normalised["notify_on"] = list(dict.fromkeys(notify_on))
        result.append(normalised)
    return result


def mask_secret(secret: str) -> str:
    """The form a secret takes in API output: its prefix and last four characters."""
    return f"whsec_{_MASK}{secret[-4:]}"


def masked_channels(channels: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Channels as shown to clients: secrets masked. A reference to a stored secret
    (``{"secret": NAME}``) is shown as it is: it holds a name, not a value."""
    shown = []
    for channel in channels:
        copy = dict(channel)
        if isinstance(copy.get("secret"), str):
            copy["secret"] = mask_secret(copy["secret"])
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
            and isinstance(old[index].get("secret"), str)
            and channel["secret"] == mask_secret(str(old[index]["secret"]))
        ):
            channel = {**channel, "secret": old[index]["secret"]}
        merged.append(channel)
    return merged


for _builtin in (FileNotifier(), WebhookNotifier(), EmailNotifier()):
    register_notifier(_builtin)

__all__ = [
    "NOTIFY_ON",
    "keep_masked_secrets",
    "mask_secret",
    "masked_channels",
    "notifier",
    "register_notifier",
    "validate_channels",
]
