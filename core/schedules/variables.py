"""The service's environment variables a schedule names, looked at when it is saved.

An ``openai`` runner's ``api_key_env`` and an ``email`` channel's ``smtp_url_env`` name a
variable of the service's own environment, read at each attempt and each delivery. One that is
not set there fails every run (or every delivery) at once; it may be set before the first one
(the service restarted with it), so it is a warning, never a refusal, as a ``command`` runner's
missing program is (``core.runners.command.preflight``):

- ``variable_not_set``: the variable is unset or blank in the service's environment, as the
  runner (``core.runners.openai``) and the channel (``core.notify.email``) read it.

Only whether it is set is said, never its value.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import Any

WarningItem = dict[str, str]


def variable_warnings(
    runner: Mapping[str, Any],
    notify: Sequence[Mapping[str, Any]],
    environ: Mapping[str, str] | None = None,
) -> list[WarningItem]:
    """The warnings of validated ``runner`` and ``notify`` configs whose variables are not
    set in ``environ`` (default: the service's environment), the runner's first."""
    env = os.environ if environ is None else environ
    found: list[WarningItem] = []
    key = runner.get("api_key_env") if runner.get("type") == "openai" else None
    if isinstance(key, str) and not env.get(key, "").strip():
        found.append(
            _warning(
                key,
                "every run fails until it is set where the service runs, or name a stored "
                "secret in api_key_secret instead",
                "runner.api_key_env",
            )
        )
    for index, channel in enumerate(notify):
        smtp = channel.get("smtp_url_env") if channel.get("type") == "email" else None
        if isinstance(smtp, str) and not env.get(smtp, "").strip():
            found.append(
                _warning(
                    smtp,
                    "every delivery to this channel fails until it is set where the service "
                    "runs, or name a stored secret in smtp_url_secret instead",
                    f"notify.{index}.smtp_url_env",
                )
            )
    return found


def _warning(name: str, consequence: str, field: str) -> WarningItem:
    message = f"{name} is not set in the service's environment: {consequence}"
    return {"code": "variable_not_set", "message": message, "field": field}
