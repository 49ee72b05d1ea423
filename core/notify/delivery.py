"""Deterministic delivery: the engine, not the agent, sends a finished run to its channels.

Each applicable channel (its ``notify_on`` lists the run's status) gets a ``deliveries`` row,
attempted with the shared ``RetryPolicy``; every attempt is counted on the row. A failed
delivery is recorded on the delivery and never changes the run's status. Who delivers, and who
takes over when that process dies, is the engine's business (``Run.deliver_until``).

Channels that refer to the owner's stored secrets get their values resolved once per
``deliver_run`` (one query, ``core.secrets.resolution.load``); a channel whose secret cannot be read
(deleted since, or not decryptable) fails at once, permanently, naming it. Every resolved value
is redacted from the delivery errors that are recorded and logged.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from agentcron.core.clock import Clock, utcnow
from agentcron.core.errors import RunPermanentError
from agentcron.core.logging import get_logger
from agentcron.core.notify import notifier as find_notifier
from agentcron.core.notify.base import DeliveryRequest
from agentcron.core.retry import RetryPolicy
from agentcron.core.secrets.keyring import Keyring
from agentcron.core.secrets.redaction import redact
from agentcron.core.secrets.resolution import Resolution, load, referenced_secrets
from agentcron.core.states import RunReason
from agentcron.core.storage.database import Database
from agentcron.core.storage.models import Delivery, Run, Schedule
from agentcron.core.storage.sql.deliveries import delivery_of
from agentcron.core.storage.wakeups import announce_change
from agentcron.core.tracing import DeliverySpans, untraced
from agentcron.core.transitions import apply, paused

log = get_logger(__name__)

DEFAULT_POLICY = RetryPolicy(max_attempts=3, base=1.0, cap=30.0)
DEFAULT_NOTIFY_ON = ("succeeded",)
TRIPPED = RunReason.CIRCUIT_BREAKER.value  # reason of the failed run that paused its schedule


def delivery_body(run_view: Mapping[str, Any], schedule_id: uuid.UUID, name: str) -> dict[str, Any]:
    """The documented payload: ``{"type": "run.finished", "schedule": {...}, "run": Run}``."""
    return {
        "type": "run.finished",
        "schedule": {"id": str(schedule_id), "name": name},
        "run": dict(run_view),
    }


def applicable_channels(
    notify: Sequence[Mapping[str, Any]], status: str, reason: str | None = None
) -> list[tuple[int, Mapping[str, Any]]]:
    """The channels (index, channel) a run finished with ``status`` is delivered to: those whose
    ``notify_on`` (default ``["succeeded"]``) lists it, or every channel for the run that
    tripped its schedule's circuit breaker (the pause must reach someone). The one rule,
    shared by delivery and by the ledger, which records whether a finished run has deliveries
    to make."""
    if reason == TRIPPED:
        return list(enumerate(notify))
    return [
        (index, channel)
        for index, channel in enumerate(notify)
        if status in channel.get("notify_on", DEFAULT_NOTIFY_ON)
    ]


async def deliver_run(
    db: Database,
    run: Run,
    run_view: Mapping[str, Any],
    workdir: Path,
    *,
    policy: RetryPolicy = DEFAULT_POLICY,
    clock: Clock = utcnow,
    allow_private: bool = False,
    keyring: Keyring | None = None,
    spans: DeliverySpans = untraced,
) -> list[tuple[str, str]]:
    """Deliver a finished run to each of its channels; record every attempt. Returns
    (channel type, final status) of each delivery made now (for the engine's metrics).

    Idempotent per (run, channel index), so a delivery interrupted by a crash can be made
    again by anyone (``DeliveryStore.take_over``): a channel whose row is ``delivered`` or
    ``failed`` (its attempts exhausted, or a permanent error) is left alone; a ``pending`` row
    is reused and its attempts keep counting; a missing one is created. The webhook-id is
    ``<run id>.<index>`` every time, so a receiver can de-duplicate a repeat. ``keyring``
    decrypts the stored secrets the channels refer to (``AGENTCRON_SECRETS_KEY``). ``spans``
    makes each channel's span (``core.tracing``), whose context its request carries.
    """
    channels = applicable_channels(run.payload.get("notify") or (), run.status, run.reason)
    if not channels:
        return []
    missing = sorted(
        {str(c.get("type")) for _, c in channels if find_notifier(str(c.get("type"))) is None}
    )
    if missing:
        await _pause_orphan(
            db, run.schedule_id, f"notify channel type {', '.join(missing)} is not installed", clock
        )
    async with db.session(write=False) as session:
        schedule = await session.get(Schedule, run.schedule_id)
    name = schedule.name if schedule is not None else str(run.payload.get("name", ""))
    body = delivery_body(run_view, run.schedule_id, name)
    if run.reason == TRIPPED and schedule is not None:
        body["schedule"].update(paused=not schedule.enabled, paused_note=schedule.paused_note)
    names = referenced_secrets(None, [channel for _, channel in channels])
    secrets = (
        await load(db, None, names, keyring=keyring, schedule_id=run.schedule_id)
        if names
        else Resolution()
    )
    made = await asyncio.gather(
        *(
            _deliver_one(
                db,
                run.id,
                index,
                channel,
                body,
                workdir,
                policy,
                clock,
                allow_private,
                secrets,
                spans,
            )
            for index, channel in channels
        )
    )
    return [outcome for outcome in made if outcome is not None]


async def _deliver_one(
    db: Database,
    run_id: uuid.UUID,
    index: int,
    channel: Mapping[str, Any],
    body: Mapping[str, Any],
    workdir: Path,
    policy: RetryPolicy,
    clock: Clock,
    allow_private: bool,
    secrets: Resolution,
    spans: DeliverySpans,
) -> tuple[str, str] | None:
    kind = str(channel.get("type"))
    notifier = find_notifier(kind)
    target = notifier.target(channel) if notifier is not None else kind
    now = clock()
    async with db.session() as session:
        existing = (await session.execute(delivery_of(run_id, index))).scalar_one_or_none()
        if existing is not None and existing.status in ("delivered", "failed"):
            return None  # done for good; only missing and pending deliveries are (re)made
        if existing is None:
            existing = Delivery(
                id=uuid.uuid4(),
                run_id=run_id,
                index=index,
                channel=kind,
                target=target,
                status="pending",
                attempts=0,
                created_at=now,
                updated_at=now,
            )
            session.add(existing)
        delivery_id = existing.id
        # A delivery taken over after a crash goes on counting, so its attempts stay bounded
        # by the policy (the next one is always made: the interrupted one may not have).
        attempt = existing.attempts
    names = referenced_secrets(None, [channel])
    values = {name: secrets.values[name] for name in names if name in secrets.values}
    unreadable = sorted(name for name in names if name in secrets.problems)
    with spans(kind, index) as span:
        request = DeliveryRequest(
            f"{run_id}.{index}", channel, body, workdir, allow_private, values, span.headers
        )
        while True:
            attempt += 1
            status, error = "delivered", None
            try:
                if notifier is None:
                    raise RunPermanentError(f"no notifier for channel type {kind!r} is installed")
                if unreadable:  # a copy: the problem may be shared by several channels
                    raise RunPermanentError(secrets.problems[unreadable[0]].message)
                await notifier.deliver(request)
            except RunPermanentError as exc:
                status, error = "failed", exc.message
            except Exception as exc:  # transient by contract: retried while attempts remain
                status, error = "failed", f"{type(exc).__name__}: {exc}"
                error = redact(error, values)
                if policy.should_retry(attempt):
                    await _record(db, delivery_id, "pending", attempt, error, clock)
                    await asyncio.sleep(policy.delay(attempt))
                    continue
            # A receiver or server that echoes a value must not get it into the record or the log.
            error = redact(error, values)
            await _record(db, delivery_id, status, attempt, error, clock)
            if status == "failed":
                log.warning(
                    "delivery_failed", run_id=str(run_id), channel=kind, index=index, error=error
                )
            span.ended(status, attempt, error)
            return kind, status


async def _pause_orphan(db: Database, schedule_id: uuid.UUID, reason: str, clock: Clock) -> None:
    """Pause a schedule whose channel can no longer work, saying why, instead of failing that
    delivery at every due time (the run itself keeps its status)."""
    now = clock()
    async with db.session() as session:
        schedule = await session.get(Schedule, schedule_id, with_for_update=True)
        if schedule is None or not schedule.enabled:
            return
        apply(schedule, paused(now, f"paused by agentcron: {reason}"))
        await announce_change(db, session)
    log.error("schedule_paused", schedule_id=str(schedule_id), reason=reason)


async def _record(
    db: Database,
    delivery_id: uuid.UUID,
    status: str,
    attempts: int,
    error: str | None,
    clock: Clock,
) -> None:
    async with db.session() as session:
        delivery = await session.get(Delivery, delivery_id)
        if delivery is not None:
            delivery.status = status
            delivery.attempts = attempts
            delivery.error = error
            delivery.updated_at = clock()


__all__ = ["applicable_channels", "deliver_run", "delivery_body"]
