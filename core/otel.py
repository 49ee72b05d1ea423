"""The spans of runs, in OpenTelemetry (the ``otel`` extra; ``core.tracing`` decides whether).

A run is one trace, whose id is the run's id (its 128 bits), so the trace of any run is found
from the id the API, the logs and the agent's ``AGENTCRON_RUN_ID`` show:

- ``agentcron.run``, the trace's root, from the run's due time (or its creation, for a run
  without one) to its end; made when the run ends, by whichever replica records the end. Its
  span id also comes from the run's id, so the spans made before it, on any replica, name it
  as their parent.
- ``agentcron.attempt``, a child of the run's span for every attempt: from the attempt's start
  to its record, with the schedule, owner, attempt, trigger, lateness, runner, status and, where
  the runner knows it, token usage (the GenAI semantic conventions' names) as attributes. Its
  context reaches the agent (``RunRequest.trace``: ``TRACEPARENT`` in a command's environment,
  the ``traceparent`` header of an openai request), so the agent's own spans join the trace.
- ``agentcron.delivery``, a child of the attempt that ended the run for each channel it is
  delivered to (of the run's span when a delivery is taken over after a crash), over all the
  delivery's tries; a webhook's request carries its context.

The provider is this module's own, built from the standard environment (exporter endpoint,
headers, timeout, ``OTEL_SERVICE_NAME``, ``OTEL_RESOURCE_ATTRIBUTES``, ``OTEL_TRACES_SAMPLER``,
``OTEL_BSP_*``), not the global one, so a host that traces its own process keeps its provider
and agentcron's ids stay the run's. Spans are exported from the SDK's batch thread: the event
loop never waits for the collector.
"""

from __future__ import annotations

import contextlib
import contextvars
import uuid
from collections.abc import Iterator, Mapping
from datetime import datetime
from typing import Any

from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import (
    BatchSpanProcessor,
    ConsoleSpanExporter,
    SpanExporter,
)
from opentelemetry.sdk.trace.id_generator import RandomIdGenerator
from opentelemetry.sdk.trace.sampling import Decision
from opentelemetry.trace import NonRecordingSpan, Span, SpanContext, Status, StatusCode, TraceFlags
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from agentcron.core.errors import StartupError
from agentcron.core.runners.base import RunOutcome
from agentcron.core.states import FAILURES, RunStatus
from agentcron.core.storage.models import Run

# The ids the next span takes instead of random ones: set only around a run's own span.
_FIXED: contextvars.ContextVar[tuple[int, int] | None] = contextvars.ContextVar(
    "agentcron_fixed_span_ids", default=None
)
_PROPAGATOR = TraceContextTextMapPropagator()
_UNDELIVERED = ("failed",)


def run_ids(run_id: uuid.UUID) -> tuple[int, int]:
    """The trace id and span id of a run's span: the run's id, and its upper half."""
    return run_id.int, (run_id.int >> 64) or 1


class _RunIds(RandomIdGenerator):
    """Random ids, but for a run's own span, which takes ``_FIXED``."""

    def generate_trace_id(self) -> int:
        fixed = _FIXED.get()
        return fixed[0] if fixed is not None else super().generate_trace_id()

    def generate_span_id(self) -> int:
        fixed = _FIXED.get()
        return fixed[1] if fixed is not None else super().generate_span_id()

    def is_trace_id_random(self) -> bool:
        # Read only for a root span: a run's trace id is a version 4 uuid, not 128 random bits.
        return _FIXED.get() is None


def _nanoseconds(moment: datetime) -> int:
    return int(moment.timestamp() * 1_000_000_000)


def _exporter(env: Mapping[str, str]) -> SpanExporter:
    if env.get("OTEL_TRACES_EXPORTER", "").strip().lower() == "console":
        return ConsoleSpanExporter()
    protocol = (
        env.get("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL")
        or env.get("OTEL_EXPORTER_OTLP_PROTOCOL")
        or "http/protobuf"
    )
    if protocol.strip() != "http/protobuf":
        raise StartupError(
            f"OTEL_EXPORTER_OTLP_PROTOCOL={protocol} is not supported: agentcron exports "
            "traces as http/protobuf (the otel extra's exporter)"
        )
    # Endpoint, headers, timeout and compression from the same environment, read by the SDK.
    return OTLPSpanExporter()


class Tracing:
    """The spans of this process's runs (see the module's docstring)."""

    def __init__(self, provider: TracerProvider) -> None:
        self.provider = provider
        self.tracer = provider.get_tracer("agentcron")

    @classmethod
    def from_environment(cls, env: Mapping[str, str]) -> Tracing:
        resource = Resource.create({"service.name": "agentcron"})  # OTEL_SERVICE_NAME wins
        provider = TracerProvider(resource=resource, id_generator=_RunIds())
        provider.add_span_processor(BatchSpanProcessor(_exporter(env)))
        return cls(provider)

    def _run_parent(self, run_id: uuid.UUID) -> Context:
        """The context of a run's span, before (or without) the span itself: what its
        attempts and taken-over deliveries name as their parent."""
        trace_id, span_id = run_ids(run_id)
        sampled = self.provider.sampler.should_sample(None, trace_id, "agentcron.run")
        kept = sampled.decision in (Decision.RECORD_AND_SAMPLE,)
        flags = TraceFlags.SAMPLED if kept else TraceFlags.DEFAULT
        parent = SpanContext(trace_id, span_id, is_remote=True, trace_flags=TraceFlags(flags))
        return trace.set_span_in_context(NonRecordingSpan(parent))

    def attempt(self, run: Run, runner: str, started: datetime) -> Span:
        """The span of the attempt of ``run`` starting now (``started`` by the engine's clock,
        for its lateness)."""
        payload = run.payload
        attributes: dict[str, Any] = {
            "agentcron.run.id": str(run.id),
            "agentcron.schedule.id": str(run.schedule_id),
            "agentcron.schedule.name": str(payload.get("name", "")),
            "agentcron.attempt": run.attempt,
            "agentcron.trigger": run.trigger,
            "agentcron.runner": runner,
        }
        if "owner" in payload:
            attributes["agentcron.owner"] = str(payload["owner"])
        if run.due_at is not None:
            attributes["agentcron.run.due_at"] = run.due_at.isoformat()
            attributes["agentcron.run.lateness_seconds"] = max(
                0.0, (started - run.due_at).total_seconds()
            )
        return self.tracer.start_span(
            "agentcron.attempt", context=self._run_parent(run.id), attributes=attributes
        )

    @staticmethod
    def headers(span: Span) -> dict[str, str]:
        """The W3C trace context of ``span`` (``traceparent``, and ``tracestate`` if any)."""
        carrier: dict[str, str] = {}
        _PROPAGATOR.inject(carrier, context=trace.set_span_in_context(span))
        return carrier

    @staticmethod
    def attempt_ended(
        span: Span, status: str, error: str | None, outcome: RunOutcome | None
    ) -> None:
        """End an attempt's span as recorded: ``status`` is the run's status after it (a
        retry's ``pending``), or why nothing was recorded (``released``, ``lease_lost``);
        ``outcome``, the agent's answer if it gave one, says the tokens it used."""
        span.set_attribute("agentcron.run.status", status)
        usage = outcome.usage if outcome is not None else None
        for name, value in (usage or {}).items():
            span.set_attribute(f"gen_ai.usage.{name}", value)
        if error is not None:
            span.set_status(Status(StatusCode.ERROR, error))
        span.end()

    def run_ended(self, run: Run) -> None:
        """The run's span, now that it has ended (``run`` as recorded)."""
        began = run.due_at or run.created_at
        attributes: dict[str, Any] = {
            "agentcron.run.id": str(run.id),
            "agentcron.schedule.id": str(run.schedule_id),
            "agentcron.trigger": run.trigger,
            "agentcron.run.status": run.status,
            "agentcron.attempts": run.attempt,
        }
        if "owner" in run.payload:
            attributes["agentcron.owner"] = str(run.payload["owner"])
        if run.reason:
            attributes["agentcron.run.reason"] = run.reason
        fixed = _FIXED.set(run_ids(run.id))
        try:
            span = self.tracer.start_span(
                "agentcron.run",
                context=Context(),  # a root, whatever the caller's context holds
                attributes=attributes,
                start_time=_nanoseconds(began),
            )
        finally:
            _FIXED.reset(fixed)
        if run.status in FAILURES or run.status == RunStatus.CANCELLED:
            span.set_status(Status(StatusCode.ERROR, run.error or run.status))
        span.end(end_time=_nanoseconds(run.finished_at) if run.finished_at else None)

    @contextlib.contextmanager
    def delivery(
        self, run_id: uuid.UUID, parent: Span | None, channel: str, index: int
    ) -> Iterator[DeliverySpan]:
        """The span of one channel's delivery of a run, under ``parent`` (the attempt that
        ended the run), or the run's span when the delivery was taken over."""
        context = trace.set_span_in_context(parent) if parent else self._run_parent(run_id)
        attributes: dict[str, Any] = {
            "agentcron.run.id": str(run_id),
            "agentcron.delivery.channel": channel,
            "agentcron.delivery.index": index,
        }
        with self.tracer.start_as_current_span(
            "agentcron.delivery", context=context, attributes=attributes
        ) as span:
            yield DeliverySpan(span, self.headers(span))

    def shutdown(self) -> None:
        """Export what is left and stop (at the engine's stop)."""
        self.provider.shutdown()


class DeliverySpan:
    """A delivery's span as the delivery sees it: the headers that carry it, its end."""

    def __init__(self, span: Span, headers: dict[str, str]) -> None:
        self.span, self.headers = span, headers

    def ended(self, status: str, attempts: int, error: str | None) -> None:
        self.span.set_attribute("agentcron.delivery.status", status)
        self.span.set_attribute("agentcron.delivery.attempts", attempts)
        if status in _UNDELIVERED:
            self.span.set_status(Status(StatusCode.ERROR, error or status))


__all__ = ["DeliverySpan", "Tracing", "run_ids"]
