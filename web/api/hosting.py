"""A host's answers, as agentcron's API reads them (``agentcron.web.host.Engine.router``)."""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI

from agentcron.core.errors import AgentcronError, StartupError
from agentcron.core.keys import Principal, check_owner


class ConfigurationError(StartupError):
    """The engine cannot run as configured (a bad setting, a backend it has no driver for);
    the message names the setting."""


def as_principal(caller: Any) -> Principal:
    """A host's answer as the caller agentcron checks: an owner name is an ordinary
    (non-admin) caller of that owner; a ``Principal`` is taken as it is."""
    if isinstance(caller, Principal):
        return caller
    if isinstance(caller, str):
        try:
            return Principal(owner=check_owner(caller), admin=False)
        except ValueError as exc:
            raise ConfigurationError(f"the host's principal returned {caller!r}: {exc}") from None
    raise ConfigurationError(
        f"the host's principal dependency returned a {type(caller).__name__}: it must return"
        " an owner name (str) or an agentcron Principal"
    )


def install_errors(app: FastAPI) -> None:
    """agentcron's errors as their status codes and bodies (``{"error": {...}}``) in a host's
    app; the host's own errors and validation answers are left as they are."""
    from agentcron.web.api.errors import agentcron_error

    app.add_exception_handler(AgentcronError, agentcron_error)
