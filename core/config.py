"""Settings, read once from ``AGENTCRON_*`` environment variables (pydantic-settings)."""

from __future__ import annotations

import os
import re
import socket
import uuid
from functools import lru_cache
from pathlib import Path
from typing import Literal

from pydantic import Field, SecretStr, ValidationInfo, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
# A schema name that means the same quoted or not (lower case, no keyword quoting needed in a
# search_path), short enough that the wake-up channel named after it fits PostgreSQL's 63
# bytes (core.storage.scope), and outside the pg_ names PostgreSQL keeps for itself.
SCHEMA_NAME = re.compile(r"^[a-z_][a-z0-9_]{0,42}$")
# The URL schemes people paste (from `psql`, a cloud console, Heroku-style DATABASE_URLs) name
# no driver, so SQLAlchemy would pick a synchronous one this project does not install
# (psycopg) or none at all ("postgres"): they mean the async drivers agentcron ships with.
_ASYNC_DRIVERS = {
    "postgresql": "postgresql+asyncpg",
    "postgres": "postgresql+asyncpg",
    "sqlite": "sqlite+aiosqlite",
}


def normalize_database_url(url: str) -> str:
    """``url`` with its scheme made explicit for the async drivers: ``postgresql://`` and
    ``postgres://`` become ``postgresql+asyncpg://``, ``sqlite://`` ``sqlite+aiosqlite://``.
    Anything else (an explicit driver included) is returned unchanged."""
    scheme, separator, rest = url.partition("://")
    driver = _ASYNC_DRIVERS.get(scheme.lower()) if separator else None
    # Only the scheme is rewritten, as text: parsing and re-rendering the URL could re-quote
    # a password's special characters.
    return f"{driver}://{rest}" if driver else url


def _default_instance_id() -> str:
    # Unique per process start: a restarted process must not mistake its predecessor's
    # leases for its own.
    return f"{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:8]}"


class Settings(BaseSettings):
    """The service configuration. Every field maps to ``AGENTCRON_<FIELD>`` in the environment."""

    model_config = SettingsConfigDict(env_prefix="AGENTCRON_", extra="ignore")

    database_url: str = "sqlite+aiosqlite:///./var/agentcron.db"
    # PostgreSQL: the schema agentcron's tables (and its migration stamp) live in, so that a
    # host's database with tables of the same names can hold them too. Unset: the
    # connection's search_path, as before the setting existed.
    database_schema: str | None = None
    disable_scheduler: bool = False
    scheduler_tick_seconds: float = Field(default=10.0, gt=0, le=3600)
    scheduler_concurrency: int = Field(default=4, ge=1, le=1000)
    data_dir: Path = Path("./var")
    allow_private_webhooks: bool = False
    log_format: Literal["console", "json"] | None = None
    log_level: Literal["DEBUG", "INFO", "WARNING", "ERROR"] = "INFO"
    # "summary": a run that went well is counted in a runs_summary line every 10 s, not logged
    # on its own; "each": every run's run_started and run_finished lines (web.engine.runlines).
    log_runs: Literal["summary", "each"] = "summary"
    max_active_schedules: int = Field(default=100_000, ge=1)
    lease_seconds: float = Field(default=30.0, gt=0)
    # PostgreSQL: each engine holds an advisory lock on a session of its own, so a dead one is
    # noticed in about 2 s instead of a lease (core.storage.liveness). Off: leases only.
    liveness: bool = True
    drain_timeout_seconds: float = Field(default=30.0, ge=0)
    # Run ledger retention (core.retention): finished runs older than retention_days are
    # pruned, except each schedule's newest retention_keep_last runs and its latest run.
    retention_days: int = Field(default=30, ge=1, le=36_500)
    retention_keep_last: int = Field(default=100, ge=1, le=1_000_000)
    retention_interval_seconds: float = Field(default=3600.0, gt=0, le=86_400 * 7)
    database_timeout_seconds: float = Field(default=10.0, gt=0, le=3600)
    # PostgreSQL: past this skew between this host's clock and the database's, a warning is
    # logged and /readyz says so (the engine itself uses the database's clock either way).
    clock_skew_warn_seconds: float = Field(default=2.0, gt=0)
    instance_id: str = Field(default_factory=_default_instance_id)
    # What tenants (non-admin keys of untrusted owners) may run: core.policy. Lists are
    # comma-separated names.
    trusted_owners: str = "local"
    tenant_runners: str = "openai"
    tenant_env: str = ""
    tenant_endpoints: str = ""
    agents_file: Path | None = None
    # The operator's key(s) for tenants' stored secrets (core.secrets): comma-separated Fernet
    # keys, the first encrypts and all decrypt. Unset: storing a secret is refused. SecretStr
    # so that printing or logging the settings never shows it.
    secrets_key: SecretStr | None = None
    # Agent processes (core.runners.containment). agent_env: comma-separated names of service
    # variables every agent process inherits (none by default: the service's environment
    # holds its database URL and API keys).
    agent_env: str = ""
    sandbox: Literal["none", "bwrap"] = "none"
    sandbox_network: Literal["host", "none"] = "host"
    sandbox_binary: str = "bwrap"  # a path, or a name looked up on PATH
    # Comma-separated absolute paths the sandbox also hides (a directory shows empty, a file
    # cannot be opened).
    sandbox_hide: str = ""

    @field_validator("database_url")
    @classmethod
    def _async_driver(cls, value: str) -> str:
        return normalize_database_url(value)

    @field_validator("database_schema")
    @classmethod
    def _schema(cls, value: str | None, info: ValidationInfo) -> str | None:
        if not value:
            return None  # AGENTCRON_DATABASE_SCHEMA= (empty) is unset
        if not SCHEMA_NAME.match(value) or value.startswith("pg_"):
            raise ValueError(
                f"{value!r} is not a schema name agentcron takes: 1 to 43 lower-case letters,"
                " digits or _, not starting with a digit or pg_"
            )
        if str(info.data.get("database_url", "")).startswith("sqlite"):
            # Said rather than ignored: a host that sets it expects its tables kept apart,
            # which on SQLite only a file of agentcron's own does.
            raise ValueError(
                "SQLite has no schemas: set database_url (AGENTCRON_DATABASE_URL) to a"
                " database file of agentcron's own instead"
            )
        return value

    @field_validator("agent_env")
    @classmethod
    def _names(cls, value: str) -> str:
        for name in _split(value):
            if not _ENV_NAME.match(name):
                raise ValueError(f"{name!r} is not an environment variable name")
        return value

    @field_validator("sandbox_hide")
    @classmethod
    def _absolute(cls, value: str) -> str:
        for entry in _split(value):
            if not Path(entry).is_absolute():
                raise ValueError(f"{entry!r} is not an absolute path")
        return value

    @property
    def agent_env_names(self) -> tuple[str, ...]:
        """``agent_env`` as a tuple of names."""
        return tuple(_split(self.agent_env))

    @property
    def sandbox_hide_paths(self) -> tuple[Path, ...]:
        """``sandbox_hide`` as a tuple of absolute paths."""
        return tuple(Path(entry) for entry in _split(self.sandbox_hide))


def _split(value: str) -> list[str]:
    return [entry.strip() for entry in value.split(",") if entry.strip()]


@lru_cache(maxsize=1)
def get_settings() -> Settings:
    """The process-wide settings, read from the environment on first use."""
    return Settings()
