"""What the operator lets tenants run: the execution policy.

A *tenant* is the owner of an ordinary (not admin) API key whose owner is not in
``AGENTCRON_TRUSTED_OWNERS`` (default ``local``, the owner ``make run`` and ``agentcron
example`` use on a single-user machine). Admin keys and trusted owners keep every runner the
service has. For a tenant a schedule is refused with ``InvalidSchedule`` (422, naming the field
and saying what the operator allows) unless:

- its runner type is in ``AGENTCRON_TENANT_RUNNERS`` (default ``openai``); a ``command`` with
  an ``argv`` of its own is a shell on the service's host, so it needs ``command`` listed there;
- or it is a ``command`` naming an *agent* the operator declared (``AGENTCRON_AGENTS_FILE``):
  ``{"type": "command", "agent": NAME, "params": {...}, "env": {...}}``. The operator's argv
  template is filled with the declared parameters, each checked against its pattern; the
  tenant supplies the prompt, those parameters, and only the environment variables the agent
  lists in ``tenant_env`` (values, or ``{"secret": NAME}`` references to the tenant's secrets);
- every variable of the service it names (``api_key_env`` of ``openai``, ``smtp_url_env`` of an
  email channel) is in ``AGENTCRON_TENANT_ENV``; anything else is the tenant's own secret;
- an ``openai`` ``base_url`` is a public address (the webhooks' private-address guard), unless
  it is one of ``AGENTCRON_TENANT_ENDPOINTS`` or below it (same scheme, host and port, the path
  on a ``/`` boundary: ``core.endpoints``; local model servers stay possible) or
  ``AGENTCRON_ALLOW_PRIVATE_WEBHOOKS`` is set.

The policy is checked when a schedule is saved (create, and each update naming the runner or
the notify channels). The agents file is read once at start; an agent taken off it fails the
runs of schedules that name it (and pauses them), as a vanished ``python`` target does.

Agents file (TOML)::

    [agents.digest]
    description = "Summarise a topic"
    argv = ["python3", "/opt/agents/digest.py", "--topic", "{topic}"]
    env = { MODEL = "gpt-4o-mini" }          # set by the operator, not the tenant
    tenant_env = ["OPENAI_API_KEY"]          # variables a tenant may set (e.g. from a secret)

    [agents.digest.params.topic]
    pattern = "[a-z ]{1,40}"                 # a full match; optional
    default = "world"                        # optional; without it the parameter is required
"""

from __future__ import annotations

import re
import tomllib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from agentcron.core.endpoints import Endpoint, parse_endpoints
from agentcron.core.errors import InvalidSchedule, StartupError, TargetUnavailable
from agentcron.core.notify.ssrf import ALLOW_HINT, literal_host_kind

# A parameter value without a pattern of its own: no leading dash (it could pass as an option
# of the agent's program), printable, bounded.
DEFAULT_PATTERN = r"[A-Za-z0-9_][A-Za-z0-9 _.,:/@+=-]{0,199}"
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,99}")
_PLACEHOLDER = re.compile(r"\{([A-Za-z_][A-Za-z0-9_]*)\}")
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


class PolicyConfigError(StartupError):
    """The operator's policy settings or agents file cannot be used: the service refuses to
    start, saying which setting or key to fix."""


@dataclass(frozen=True)
class AgentParam:
    pattern: re.Pattern[str]
    default: str | None = None


@dataclass(frozen=True)
class Agent:
    """An agent the operator declared: an argv template and what a tenant may fill in."""

    name: str
    argv: tuple[str, ...]
    params: Mapping[str, AgentParam] = field(default_factory=dict)
    env: Mapping[str, str] = field(default_factory=dict)
    tenant_env: frozenset[str] = frozenset()
    description: str = ""

    def command(self, params: Mapping[str, str]) -> list[str]:
        """The argv for ``params`` (already checked by ``check_params``)."""
        values = {name: params.get(name, spec.default) for name, spec in self.params.items()}
        return [_PLACEHOLDER.sub(lambda m: str(values[m.group(1)]), part) for part in self.argv]

    def check_params(self, params: object, field_path: str) -> dict[str, str]:
        """The parameters as given, each a full match of its pattern; ``InvalidSchedule``
        naming ``<field_path>.<name>`` otherwise."""
        if params is None:
            params = {}
        if not isinstance(params, dict):
            raise InvalidSchedule("params must be an object of strings", field=field_path)
        for name in params:
            if name not in self.params:
                allowed = ", ".join(sorted(self.params)) or "none"
                raise InvalidSchedule(
                    f"agent {self.name!r} has no parameter {name!r} (it takes: {allowed})",
                    field=f"{field_path}.{name}",
                )
        checked: dict[str, str] = {}
        for name, spec in self.params.items():
            value = params.get(name)
            if value is None:
                if spec.default is None:
                    raise InvalidSchedule(
                        f"agent {self.name!r} needs the parameter {name!r}",
                        field=f"{field_path}.{name}",
                    )
                continue
            if not isinstance(value, str) or not spec.pattern.fullmatch(value):
                raise InvalidSchedule(
                    f"must be a string matching {spec.pattern.pattern!r}",
                    field=f"{field_path}.{name}",
                )
            checked[name] = value
        return checked


def _split(value: str) -> frozenset[str]:
    return frozenset(part.strip() for part in value.split(",") if part.strip())


@dataclass(frozen=True)
class ExecutionPolicy:
    """The operator's rules for tenants (see the module docstring)."""

    trusted_owners: frozenset[str] = frozenset({"local"})
    tenant_runners: frozenset[str] = frozenset({"openai"})
    tenant_env: frozenset[str] = frozenset()
    tenant_endpoints: tuple[Endpoint, ...] = ()
    agents: Mapping[str, Agent] = field(default_factory=dict)
    allow_private: bool = False

    @classmethod
    def from_settings(cls, settings: Any) -> ExecutionPolicy:
        """The policy of ``core.config.Settings``; ``PolicyConfigError`` for a bad one."""
        try:
            endpoints = parse_endpoints(settings.tenant_endpoints)
        except ValueError as exc:
            raise PolicyConfigError(
                f"AGENTCRON_TENANT_ENDPOINTS: {exc} (give http or https URLs such as "
                "http://127.0.0.1:11434/v1, separated by commas)"
            ) from None
        path = settings.agents_file
        return cls(
            trusted_owners=_split(settings.trusted_owners),
            tenant_runners=_split(settings.tenant_runners),
            tenant_env=_split(settings.tenant_env),
            tenant_endpoints=endpoints,
            agents=load_agents(Path(path)) if path else {},
            allow_private=settings.allow_private_webhooks,
        )

    def trusts(self, owner: str, *, admin: bool) -> bool:
        """Whether a key of ``owner`` (admin or not) keeps every runner of the service."""
        return admin or owner in self.trusted_owners

    def allowed(self) -> str:
        """What a tenant may run, in words, for error messages."""
        runners = ", ".join(sorted(self.tenant_runners)) or "none"
        agents = ", ".join(sorted(self.agents)) or "none"
        return (
            f"the operator allows the runner types: {runners}; and the agents: {agents} "
            '(as {"type": "command", "agent": NAME})'
        )

    def agent(self, name: str) -> Agent:
        """The declared agent ``name``; ``TargetUnavailable`` if the operator removed it."""
        try:
            return self.agents[name]
        except KeyError:
            raise TargetUnavailable(f"the agent {name!r} is no longer declared") from None

    def check_tenant(
        self, runner: Mapping[str, Any] | None, notify: Sequence[Mapping[str, Any]] | None
    ) -> dict[str, Any] | None:
        """Refuse what a tenant may not run (``InvalidSchedule`` naming the field) and return
        the runner to store (an ``openai`` one confined to public addresses). ``runner`` and
        ``notify`` are normalised configurations; None skips that part (unchanged)."""
        stored = self._check_runner(runner) if runner is not None else None
        for index, channel in enumerate(notify or ()):
            env = channel.get("smtp_url_env")
            if env is not None and env not in self.tenant_env:
                raise InvalidSchedule(
                    f"names the service's variable {env!r}, which this key may not read; "
                    f"{self._env_hint()}",
                    field=f"notify.{index}.smtp_url_env",
                )
        return stored

    def _check_runner(self, runner: Mapping[str, Any]) -> dict[str, Any]:
        kind = runner.get("type")
        if kind == "command" and "agent" in runner:
            agent = self.agents[runner["agent"]]  # validate_runner checked it exists
            for name in runner.get("env") or {}:
                if name not in agent.tenant_env:
                    allowed = ", ".join(sorted(agent.tenant_env)) or "none"
                    raise InvalidSchedule(
                        f"the agent {agent.name!r} lets this key set only: {allowed}",
                        field=f"runner.env.{name}",
                    )
            return dict(runner)
        if kind not in self.tenant_runners:
            where = "runner.argv" if kind == "command" else "runner.type"
            what = "a command of its own" if kind == "command" else f"the runner type {kind!r}"
            raise InvalidSchedule(f"this key may not run {what}; {self.allowed()}", field=where)
        env = runner.get("api_key_env")
        if env is not None and env not in self.tenant_env:
            raise InvalidSchedule(
                f"names the service's variable {env!r}, which this key may not read; "
                f"{self._env_hint()}",
                field="runner.api_key_env",
            )
        base_url = runner.get("base_url")
        if kind == "openai" and isinstance(base_url, str):
            return {**runner, "private_endpoints": self._check_endpoint(base_url)}
        return dict(runner)

    def _env_hint(self) -> str:
        names = ", ".join(sorted(self.tenant_env)) or "none"
        return (
            f"the operator allows these variables: {names} (AGENTCRON_TENANT_ENV); "
            "store a secret of your own and reference it instead"
        )

    def _check_endpoint(self, base_url: str) -> bool:
        """Whether a tenant's ``base_url`` may be private (an endpoint the operator allows);
        ``InvalidSchedule`` for a non-public literal host otherwise. A name is resolved and
        judged at each attempt instead (it may resolve differently later)."""
        if self.allow_private or any(e.admits(base_url) for e in self.tenant_endpoints):
            return True
        kind = literal_host_kind(urlsplit(base_url).hostname or "")
        if kind is not None:
            raise InvalidSchedule(
                f"base_url points at a {kind} address, which this key may not reach; the "
                "operator can allow an endpoint with AGENTCRON_TENANT_ENDPOINTS, or " + ALLOW_HINT,
                field="runner.base_url",
            )
        return False


def load_agents(path: Path) -> dict[str, Agent]:
    """The agents declared in the TOML file at ``path``; ``PolicyConfigError`` naming the
    file and the key for anything unusable."""
    where = f"AGENTCRON_AGENTS_FILE {path}"
    try:
        document = tomllib.loads(path.read_text())
    except (OSError, UnicodeDecodeError) as exc:
        raise PolicyConfigError(f"{where}: cannot be read ({exc})") from exc
    except tomllib.TOMLDecodeError as exc:
        raise PolicyConfigError(f"{where}: not valid TOML ({exc})") from exc
    declared = document.get("agents", {})
    if not isinstance(declared, dict):
        raise PolicyConfigError(f"{where}: [agents] must be a table")
    return {name: _agent(name, spec, where) for name, spec in declared.items()}


def _agent(name: str, spec: Any, where: str) -> Agent:
    at = f"{where}: agents.{name}"
    if not _NAME.fullmatch(name):
        raise PolicyConfigError(f"{at}: a name is letters, digits, '.', '_' or '-'")
    if not isinstance(spec, dict):
        raise PolicyConfigError(f"{at}: must be a table")
    unknown = set(spec) - {"argv", "params", "env", "tenant_env", "description"}
    if unknown:
        raise PolicyConfigError(f"{at}: unknown key {sorted(unknown)[0]!r}")
    argv = spec.get("argv")
    if not isinstance(argv, list) or not argv or not all(isinstance(a, str) for a in argv):
        raise PolicyConfigError(f"{at}.argv: must be a non-empty list of strings")
    params: dict[str, AgentParam] = {}
    for pname, pspec in (spec.get("params") or {}).items():
        if not isinstance(pspec, dict) or set(pspec) - {"pattern", "default"}:
            raise PolicyConfigError(f"{at}.params.{pname}: keys are pattern and default")
        try:
            pattern = re.compile(str(pspec.get("pattern", DEFAULT_PATTERN)))
        except re.error as exc:
            raise PolicyConfigError(f"{at}.params.{pname}.pattern: {exc}") from exc
        default = pspec.get("default")
        if default is not None and not isinstance(default, str):
            raise PolicyConfigError(f"{at}.params.{pname}.default: must be a string")
        params[pname] = AgentParam(pattern, default)
    for part in argv:
        for placeholder in _PLACEHOLDER.findall(part):
            if placeholder not in params:
                raise PolicyConfigError(f"{at}.argv: {{{placeholder}}} is not a declared param")
    env = spec.get("env") or {}
    if not isinstance(env, dict) or not all(
        isinstance(k, str) and _ENV_NAME.fullmatch(k) and isinstance(v, str) for k, v in env.items()
    ):
        raise PolicyConfigError(f"{at}.env: must map variable names to strings")
    tenant_env = spec.get("tenant_env") or []
    if not isinstance(tenant_env, list) or not all(
        isinstance(n, str) and _ENV_NAME.fullmatch(n) for n in tenant_env
    ):
        raise PolicyConfigError(f"{at}.tenant_env: must be a list of variable names")
    return Agent(
        name=name,
        argv=tuple(argv),
        params=params,
        env=dict(env),
        tenant_env=frozenset(tenant_env),
        description=str(spec.get("description", "")),
    )


_current: ExecutionPolicy | None = None


def configure(policy: ExecutionPolicy) -> None:
    """Make ``policy`` the process's (the app does at start; the command runner reads the
    declared agents from it)."""
    global _current
    _current = policy


def current() -> ExecutionPolicy:
    """The process's policy: the configured one, else the one of ``AGENTCRON_*`` settings."""
    global _current
    if _current is None:
        from agentcron.core.config import get_settings

        _current = ExecutionPolicy.from_settings(get_settings())
    return _current
