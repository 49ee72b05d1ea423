"""Whether this process traces its runs in OpenTelemetry, decided once from the environment.

Tracing is on when the standard OpenTelemetry environment asks for an exporter
(``OTEL_EXPORTER_OTLP_ENDPOINT`` or ``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`` is set, or
``OTEL_TRACES_EXPORTER`` is ``otlp`` or ``console``) and is not turned off
(``OTEL_SDK_DISABLED=true``, ``OTEL_TRACES_EXPORTER=none``). It needs the ``otel`` extra; the
spans themselves are made in ``core.otel``, which is imported only when tracing is on, so
without that environment no OpenTelemetry package is imported at all.

An environment that asks for traces without the extra installed is said in one warning line and
the engine runs untraced: the variables are often set for the host's own process, and a host
that did not ask agentcron for traces must not be refused its start over them.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Iterator, Mapping
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Protocol

from agentcron.core.extras import have, missing
from agentcron.core.logging import get_logger

if TYPE_CHECKING:
    from agentcron.core.otel import Tracing

log = get_logger("agentcron.tracing")

ENDPOINTS = ("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_EXPORTER_OTLP_ENDPOINT")
EXPORTERS = ("otlp", "console")


class Traced(Protocol):
    """One channel's delivery of a run as its span: the headers that carry the span's context
    to the receiver, and its end."""

    @property
    def headers(self) -> Mapping[str, str]: ...

    def ended(self, status: str, attempts: int, error: str | None) -> None: ...


class _Untraced:
    headers: Mapping[str, str] = {}

    def ended(self, status: str, attempts: int, error: str | None) -> None:
        pass


# The span of a run's delivery to the channel of this type and index.
DeliverySpans = Callable[[str, int], AbstractContextManager[Traced]]


@contextlib.contextmanager
def untraced(channel: str, index: int) -> Iterator[Traced]:
    """The ``DeliverySpans`` of a process that does not trace."""
    yield _Untraced()


def wanted(env: Mapping[str, str]) -> bool:
    """Whether ``env`` asks for traces to be exported."""
    if env.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return False
    exporter = env.get("OTEL_TRACES_EXPORTER", "").strip().lower()
    if exporter == "none":
        return False
    return exporter in EXPORTERS or any(env.get(name) for name in ENDPOINTS)


def from_environment(env: Mapping[str, str] | None = None) -> Tracing | None:
    """The tracing ``env`` (default: this process's) asks for, or None: no traces."""
    env = os.environ if env is None else env
    if not wanted(env):
        return None
    if not have("otel"):
        log.warning("extra_missing", reason=missing("otel", "tracing (OTEL_* environment)"))
        return None
    from agentcron.core.otel import Tracing

    return Tracing.from_environment(env)


__all__ = ["DeliverySpans", "Traced", "from_environment", "untraced", "wanted"]
