"""The optional parts of agentcron and the extras that install them.

``pip install agentcron`` is what a host that embeds the engine needs (the engine, the library
API, the HTTP API it mounts, SQLite and PostgreSQL). The rest comes with an extra, named in
``pyproject.toml`` as here: ``agentcron[server]`` for ``agentcron serve``, its dashboard and
the command line, ``[mcp]``, ``[email]``, ``[secrets]``, ``[metrics]``, ``[expect]`` (JSON
Schema expectations), ``[otel]`` (traces of runs) and ``[all]``.

Every place that uses an optional package asks ``have(extra)`` first (or ``require``), and
imports the package only then, inside the function that needs it: ``import agentcron`` and the
engine load none of them, and a feature whose extra is missing says so in one line naming the
extra, at save (a schedule's field) or at start (the service), never with an ImportError.
"""

from __future__ import annotations

import functools
import importlib.util

from agentcron.core.errors import StartupError

# Each extra and the top-level modules it installs (as pyproject.toml's optional dependencies).
EXTRAS: dict[str, tuple[str, ...]] = {
    "server": ("uvicorn", "typer", "rich", "jinja2"),
    "mcp": ("mcp",),
    "email": ("aiosmtplib",),
    "secrets": ("cryptography",),
    "metrics": ("prometheus_client",),
    "expect": ("jsonschema",),
    "otel": ("opentelemetry.sdk", "opentelemetry.exporter.otlp.proto.http"),
}


class ExtraMissing(StartupError):
    """A feature was asked for whose extra is not installed; the message names the extra and
    the pip command that installs it."""

    def __init__(self, extra: str, feature: str) -> None:
        super().__init__(missing(extra, feature))
        self.extra = extra


@functools.cache
def have(extra: str) -> bool:
    """Whether every package of ``extra`` is installed (found, not imported)."""
    return all(importlib.util.find_spec(module) is not None for module in EXTRAS[extra])


def missing(extra: str, feature: str) -> str:
    """The one line said when ``feature`` is used without ``extra``."""
    if extra not in EXTRAS:
        raise KeyError(extra)
    return f"{feature} needs the {extra} extra: pip install 'agentcron[{extra}]'"


def require(extra: str, feature: str) -> None:
    """Raise ``ExtraMissing`` (a ``StartupError``) naming ``extra`` unless it is installed."""
    if not have(extra):
        raise ExtraMissing(extra, feature)
