"""Where agent processes run: the environment they start with.

An agent is another owner's code from the service's point of view, so nothing of the service's
own state reaches it by default: its environment is built from nothing
(``agent_environment``), never copied from the service's (which holds the database URL and
API keys).

This module knows nothing of runs or schedules: ``Containment`` is the operator's choice,
made once at start (``containment_from_settings``) and handed to every attempt on
``RunRequest.containment``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from core.config import Settings

# What an agent gets when the service itself has no PATH (a bare systemd unit, say).
DEFAULT_PATH = "/usr/local/bin:/usr/bin:/bin"
DEFAULT_LANG = "C.UTF-8"


def agent_environment(
    service_env: Mapping[str, str],
    *,
    home: Path,
    tmpdir: str,
    passthrough: Iterable[str] = (),
) -> dict[str, str]:
    """The environment every agent process starts from, before its run's metadata and its
    runner config's ``env`` are added.

    Only ``PATH`` (the service's, or ``DEFAULT_PATH``), ``HOME``, ``LANG`` (the service's, or
    ``C.UTF-8``), ``LC_ALL`` and ``TZ`` (when the service has them), ``TMPDIR``, and the
    variables the operator names in ``passthrough`` (``AGENTCRON_AGENT_ENV``; one the service
    does not have is left out). Nothing else of ``service_env`` is read.
    """
    env = {
        "PATH": service_env.get("PATH") or DEFAULT_PATH,
        # The task's directory, not the service user's home: that one holds the service's own
        # configuration (~/.pgpass, cloud credentials, shell history), and tools write their
        # caches and dotfiles under $HOME, which should land with the task's other files.
        "HOME": str(home),
        "LANG": service_env.get("LANG") or DEFAULT_LANG,
        "TMPDIR": tmpdir,
    }
    for name in ("LC_ALL", "TZ"):
        if service_env.get(name):
            env[name] = service_env[name]
    for name in passthrough:
        if name in service_env:
            env[name] = service_env[name]
    return env


@dataclass(frozen=True)
class Containment:
    """What the operator decided for every agent process: the service variables passed
    through (``AGENTCRON_AGENT_ENV``)."""

    agent_env: tuple[str, ...] = ()


def containment_from_settings(settings: Settings) -> Containment:
    """The containment ``settings`` ask for."""
    return Containment(agent_env=settings.agent_env_names)


__all__ = ["DEFAULT_PATH", "Containment", "agent_environment", "containment_from_settings"]
