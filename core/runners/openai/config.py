"""``OpenAIRunnerType``: the ``openai`` runner's configuration, validated and built.

It owns the keys described in ``core.runners.openai`` and their limits: the base URL (absolute
http or https, no credentials, no query), the model, exactly one of ``api_key_env`` and
``api_key_secret``, the optional ``system``, ``temperature``, ``max_tokens`` and
``private_endpoints``, and building an ``OpenAIRunner`` from a configuration it accepted.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from typing import Any
from urllib.parse import urlsplit

from agentcron.core.errors import InvalidSchedule
from agentcron.core.runners.base import Runner
from agentcron.core.runners.openai.runner import OpenAIRunner
from agentcron.core.secrets.references import check_name

FIELDS = frozenset(
    {
        "type",
        "base_url",
        "model",
        "api_key_env",
        "api_key_secret",
        "system",
        "temperature",
        "max_tokens",
        "private_endpoints",
    }
)
URL_LIMIT = 2048
MODEL_LIMIT = 256
SYSTEM_LIMIT = 100_000
MAX_TOKENS_LIMIT = 200_000
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def _invalid(message: str, key: str) -> InvalidSchedule:
    return InvalidSchedule(message, field=f"runner.{key}")


def _check_base_url(value: object) -> str:
    """The base URL without a trailing slash; ``InvalidSchedule`` unless absolute http(s)."""
    if not isinstance(value, str) or not value:
        raise _invalid("base_url is required (an http or https URL)", "base_url")
    if len(value) > URL_LIMIT or not value.isprintable() or any(c.isspace() for c in value):
        raise _invalid(
            f"base_url must be a URL of at most {URL_LIMIT} printable characters", "base_url"
        )
    try:
        parts = urlsplit(value)
        parts.port  # noqa: B018 - parsing the port validates it
    except ValueError:
        raise _invalid("base_url is not a valid URL", "base_url") from None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise _invalid("base_url must be an absolute http or https URL", "base_url")
    if parts.username is not None or parts.password is not None:
        raise _invalid(
            "base_url must not carry credentials; name the key in api_key_env or api_key_secret",
            "base_url",
        )
    if parts.query or parts.fragment:
        raise _invalid("base_url must not have a query or a fragment", "base_url")
    return value.rstrip("/")


class OpenAIRunnerType:
    """The ``openai`` runner type; see ``core.runners.openai`` for the configuration."""

    name = "openai"

    def validate(self, config: Mapping[str, Any]) -> dict[str, Any]:
        """Return the normalised configuration (``base_url`` without a trailing slash).

        Raises ``InvalidSchedule`` naming ``runner.<key>`` for an unknown key, a missing
        required key (``base_url``, ``model``, one of ``api_key_env`` and ``api_key_secret``), a
        wrong type or a value out of range. The key's variable need not be set yet: that is
        checked at each run (the secret's existence is checked by the schedule service).
        """
        unknown = set(config) - FIELDS
        if unknown:
            key = sorted(unknown)[0]
            raise _invalid(f"unknown field {key!r}", key)
        normalised: dict[str, Any] = {
            "type": self.name,
            "base_url": _check_base_url(config.get("base_url")),
        }
        model = config.get("model")
        if not isinstance(model, str) or not model.strip() or len(model) > MODEL_LIMIT:
            raise _invalid(
                f"model is required (a non-empty string of at most {MODEL_LIMIT} characters)",
                "model",
            )
        normalised["model"] = model
        if "api_key_env" in config and "api_key_secret" in config:
            raise _invalid("give api_key_env or api_key_secret, not both", "api_key_secret")
        if "api_key_secret" in config:
            normalised["api_key_secret"] = check_name(
                config["api_key_secret"], "runner.api_key_secret"
            )
        else:
            env = config.get("api_key_env")
            if not isinstance(env, str) or not _ENV_NAME.match(env):
                raise _invalid(
                    "api_key_env (the environment variable holding the key) or api_key_secret "
                    "(the name of a stored secret) is required",
                    "api_key_env",
                )
            normalised["api_key_env"] = env
        if "system" in config:
            system = config["system"]
            if not isinstance(system, str) or len(system) > SYSTEM_LIMIT:
                raise _invalid(
                    f"system must be a string of at most {SYSTEM_LIMIT} characters", "system"
                )
            normalised["system"] = system
        if "temperature" in config:
            temperature = config["temperature"]
            if (
                isinstance(temperature, bool)
                or not isinstance(temperature, int | float)
                or not math.isfinite(temperature)
                or not 0 <= temperature <= 2
            ):
                raise _invalid("temperature must be a number in [0, 2]", "temperature")
            normalised["temperature"] = float(temperature)
        if "max_tokens" in config:
            max_tokens = config["max_tokens"]
            if (
                isinstance(max_tokens, bool)
                or not isinstance(max_tokens, int)
                or not 1 <= max_tokens <= MAX_TOKENS_LIMIT
            ):
                raise _invalid(
                    f"max_tokens must be an integer in [1, {MAX_TOKENS_LIMIT}]", "max_tokens"
                )
            normalised["max_tokens"] = max_tokens
        if "private_endpoints" in config:
            # False: the host must resolve to public addresses only, checked at each attempt
            # (the tenants' guard, core.policy; the webhooks' rule, core.notify.ssrf).
            if not isinstance(config["private_endpoints"], bool):
                raise _invalid("private_endpoints must be true or false", "private_endpoints")
            normalised["private_endpoints"] = config["private_endpoints"]
        return normalised

    def build(self, config: Mapping[str, Any]) -> Runner:
        """A runner for a configuration that ``validate`` accepted."""
        return OpenAIRunner(
            base_url=str(config["base_url"]),
            model=str(config["model"]),
            api_key_env=config.get("api_key_env"),
            api_key_secret=config.get("api_key_secret"),
            system=config.get("system"),
            temperature=config.get("temperature"),
            max_tokens=config.get("max_tokens"),
            private_endpoints=config.get("private_endpoints"),
        )
