"""``CommandRunnerType``: the ``command`` runner's configuration, validated and built.

It owns the two forms of the configuration (an ``argv``, or an agent the operator declared
with its ``params``), the checks of ``env`` (strings, or references to the owner's stored
secrets) and ``kill_grace_seconds``, and building a ``CommandRunner`` from a stored
configuration, a declared agent's argv resolved again at each attempt.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from agentcron.core import policy
from agentcron.core.errors import InvalidSchedule
from agentcron.core.runners.base import Runner
from agentcron.core.runners.command.runner import CommandRunner
from agentcron.core.secrets.references import check_reference

KILL_GRACE_SECONDS = 5.0
FIELDS = frozenset({"type", "argv", "agent", "params", "env", "kill_grace_seconds"})
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


class CommandRunnerType:
    """``{"type": "command", "argv": [str, ...], "env": {str: str | {"secret": NAME}}?}``, or
    an agent the operator declared in place of ``argv``: ``{"type": "command", "agent": NAME,
    "params": {str: str}?, "env": ...}`` (``core.policy``; its argv is the operator's template,
    filled with ``params``, and resolved again at each attempt)."""

    name = "command"

    def validate(self, config: Mapping[str, Any]) -> dict[str, Any]:
        unknown = set(config) - FIELDS
        if unknown:
            field = sorted(unknown)[0]
            raise InvalidSchedule(f"unknown field {field!r}", field=f"runner.{field}")
        normalised: dict[str, Any] = {"type": self.name}
        if "agent" in config:
            normalised.update(_agent_form(config))
        else:
            if "params" in config:
                raise InvalidSchedule("params go with an agent", field="runner.params")
            normalised["argv"] = _checked_argv(config.get("argv"))
        env = config.get("env", {})
        if not isinstance(env, dict):
            raise InvalidSchedule("env must be an object of strings", field="runner.env")
        normalised_env: dict[str, str | dict[str, str]] = {}
        for key, value in env.items():
            if not _ENV_NAME.match(key):
                raise InvalidSchedule(
                    "env names must be identifiers and values strings", field=f"runner.env.{key}"
                )
            if isinstance(value, str):
                normalised_env[key] = value
            elif isinstance(value, dict):
                # The owner's stored secret, resolved by the engine at each attempt.
                normalised_env[key] = check_reference(value, f"runner.env.{key}")
            else:
                raise InvalidSchedule(
                    'env values are strings or secret references {"secret": "NAME"}',
                    field=f"runner.env.{key}",
                )
        grace = config.get("kill_grace_seconds", KILL_GRACE_SECONDS)
        if isinstance(grace, bool) or not isinstance(grace, int | float) or not 0 < grace <= 300:
            raise InvalidSchedule(
                "kill_grace_seconds must be a number in (0, 300]",
                field="runner.kill_grace_seconds",
            )
        if env:
            normalised["env"] = normalised_env
        if "kill_grace_seconds" in config:
            normalised["kill_grace_seconds"] = grace
        return normalised

    def build(self, config: Mapping[str, Any]) -> Runner:
        argv: list[str] = list(config.get("argv", ()))
        env = dict(config.get("env", {}))
        if "agent" in config:
            agent = policy.current().agent(str(config["agent"]))
            argv = agent.command(config.get("params", {}))
            env = {**agent.env, **env}
        return CommandRunner(
            list(argv), env, float(config.get("kill_grace_seconds", KILL_GRACE_SECONDS))
        )


def _checked_argv(argv: object) -> list[str]:
    if not isinstance(argv, list) or not argv:
        raise InvalidSchedule("argv must be a non-empty list of strings", field="runner.argv")
    if len(argv) > 1000:
        raise InvalidSchedule("argv has more than 1000 items", field="runner.argv")
    for index, item in enumerate(argv):
        if not isinstance(item, str) or (index == 0 and not item):
            raise InvalidSchedule("must be a non-empty string", field=f"runner.argv.{index}")
    return list(argv)


def _agent_form(config: Mapping[str, Any]) -> dict[str, Any]:
    """``agent`` and ``params`` of a declared agent, checked against its declaration."""
    if "argv" in config:
        raise InvalidSchedule("give either argv or agent, not both", field="runner.argv")
    name = config["agent"]
    agents = policy.current().agents
    if not isinstance(name, str) or name not in agents:
        declared = ", ".join(sorted(agents)) or "none (AGENTCRON_AGENTS_FILE)"
        raise InvalidSchedule(
            f"no agent {name!r} is declared; declared: {declared}", "runner.agent"
        )
    params = agents[name].check_params(config.get("params"), "runner.params")
    return {"agent": name, **({"params": params} if params else {})}
