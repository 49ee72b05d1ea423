"""Deliveries survive the death of the process making them (both databases).

A finished run with a channel that applies to its status carries a delivery lease,
``runs.deliver_until``, written in the transaction that records the outcome; the process
delivering renews it and clears it when done. A lease that runs out is taken over by any loop,
which makes the missing and pending deliveries with the same webhook-id (``<run id>.<index>``).
The SIGKILL version, with real processes, is
``tests/faults/test_crash_points.py::test_sigkill_during_delivery_is_delivered_by_the_survivor``.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
import structlog
from sqlalchemy import update

from agentcron.core.notify import register_notifier
from agentcron.core.notify.base import DeliveryRequest
from agentcron.core.runners.fake import FakeRunnerType
from agentcron.core.storage.database import Database
from agentcron.core.storage.models import Delivery, Run
from tests.integration.engine_kit import (
    HOURLY,
    LEASE,
    Engine,
    MakeEngine,
    deliveries_of,
    fetch_run,
    spec,
    wait_for,
    wait_status,
)
from tests.integration.test_webhook import Receiver

ON_SUCCESS = [{"type": "file", "path": "ok.jsonl"}]  # notify_on defaults to ["succeeded"]


def released(db: Database, run_id: uuid.UUID) -> Callable[[], Awaitable[bool]]:
    """A check for ``wait_for``: the run's delivery lease is cleared."""

    async def check() -> bool:
        return (await fetch_run(db, run_id)).deliver_until is None

    return check


async def statuses(db: Database, run_id: uuid.UUID) -> list[str]:
    return [row.status for row in await deliveries_of(db, run_id)]


# -- the loop hands the delivery lease back once delivered -------------------------------


async def test_the_loop_clears_deliver_until_once_delivered(
    engine: Engine, fake: FakeRunnerType
) -> None:
    schedule = await engine.create(spec(fake.config(), HOURLY, notify=ON_SUCCESS))
    run = await wait_status(engine.db, (await engine.run_now(schedule.id)).id, "succeeded")

    async def done() -> bool:
        delivered = await statuses(engine.db, run.id) == ["delivered"]
        return delivered and await released(engine.db, run.id)()

    await wait_for(done, 5, "delivered and the lease cleared")


# -- a dead deliverer's deliveries are made by a loop, once -------------------------------


async def as_if_the_deliverer_died(db: Database, run_id: uuid.UUID, row: str | None) -> None:
    """The run as a process leaves it when killed after recording the outcome: succeeded,
    its delivery lease run out, and (``row``) no delivery row yet, or one
    ``pending`` after one transient failure, or ``failed`` for good."""
    now = datetime.now(UTC)
    ended = {"status": "succeeded", "output": "five bullets", "attempt": 1, "started_at": now}
    released = {"finished_at": now, "lease_owner": None, "lease_expires_at": None}
    lapsed = {"deliver_until": now - timedelta(seconds=1)}
    async with db.session() as session:
        await session.execute(update(Run).where(Run.id == run_id).values(ended | released | lapsed))
        if row is not None:
            said: dict[str, Any] = {"channel": "webhook", "target": "(as recorded)"}
            said |= {"status": row, "attempts": 1, "error": "ConnectError: refused"}
            times = {"created_at": now, "updated_at": now}
            session.add(Delivery(id=uuid.uuid4(), run_id=run_id, index=0, **said, **times))


@pytest.mark.parametrize(
    ("row", "sent", "final", "attempts"),
    [(None, 1, "delivered", 1), ("pending", 1, "delivered", 2), ("failed", 0, "failed", 1)],
    ids=["no-row", "pending-row", "failed-row"],
)
async def test_a_dead_deliverers_delivery_is_made_once_by_another_loop(
    make_engine: MakeEngine,
    fake: FakeRunnerType,
    receiver: Receiver,
    secret: str,
    row: str | None,
    sent: int,
    final: str,
    attempts: int,
) -> None:
    notify = [{"type": "webhook", "url": receiver.url(), "secret": secret}]
    # The schedule and run are made without a loop; then the deliverer "dies" (never runs).
    first = make_engine("engine-dead", start=False, allow_private=True)
    schedule = await first.create(spec(fake.config(), HOURLY, notify=notify))
    queued = await first.run_now(schedule.id)
    await as_if_the_deliverer_died(first.db, queued.id, row)

    # Two survivors look at once: the lease lets only one of them take the deliveries.
    with structlog.testing.capture_logs() as logs:
        survivors = [make_engine(name, allow_private=True) for name in ("engine-b", "engine-c")]

        await wait_for(released(first.db, queued.id), 10, "the deliveries taken over and done")
        # Give a second delivery every chance to happen: several lease lengths.
        await asyncio.sleep(LEASE * 1.5)
        for survivor in survivors:
            await survivor.loop.stop()

    webhook_ids = [request.headers["webhook-id"] for request in receiver.requests]
    assert webhook_ids == [f"{queued.id}.0"] * sent
    assert all(request.verify_error is None for request in receiver.requests)
    if sent:
        body = receiver.requests[0].payload
        assert body["run"]["id"] == str(queued.id) and body["run"]["status"] == "succeeded"
        assert body["run"]["output"] == "five bullets"
    (delivery,) = await deliveries_of(first.db, queued.id)
    assert (delivery.status, delivery.attempts) == (final, attempts)
    recovered = [entry for entry in logs if entry["event"] == "deliveries_recovered"]
    assert sum(entry["runs"] for entry in recovered) == 1
    assert (await fetch_run(first.db, queued.id)).status == "succeeded"  # untouched


# -- a delivery cut short by shutdown ------------------------------------------------------


@dataclass
class Gate:
    """A channel type whose first delivery never ends (the process is stopped meanwhile);
    later ones succeed. Records the webhook-id style id of each delivery."""

    name: str = "gate"
    ids: list[str] = field(default_factory=list)

    def validate(
        self, channel: Mapping[str, Any], field: str, *, allow_private: bool
    ) -> dict[str, Any]:
        return dict(channel)

    def target(self, channel: Mapping[str, Any]) -> str:
        return "gate"

    async def deliver(self, request: DeliveryRequest) -> None:
        self.ids.append(request.delivery_id)
        if len(self.ids) == 1:
            await asyncio.Event().wait()  # until cancelled


async def test_a_delivery_cut_short_by_shutdown_is_made_after_by_another_engine(
    make_engine: MakeEngine, fake: FakeRunnerType, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("agentcron.web.engine.loop.HARD_STOP_GRACE", 0.2)
    gate = Gate()
    register_notifier(gate)
    first = make_engine("engine-a", drain_timeout=0.2)
    schedule = await first.create(spec(fake.config(), HOURLY, notify=[{"type": "gate"}]))
    queued = await first.run_now(schedule.id)

    await wait_for(lambda: asyncio.sleep(0, bool(gate.ids)), 5, "the first delivery to start")
    # Held past a lease length by the heartbeat, not taken over while the delivery goes on.
    await asyncio.sleep(LEASE * 1.5)
    assert (await fetch_run(first.db, queued.id)).deliver_until is not None
    assert len(gate.ids) == 1
    await first.loop.stop()  # the drain times out: the delivery is abandoned, its lease kept
    assert (await fetch_run(first.db, queued.id)).deliver_until is not None
    assert await statuses(first.db, queued.id) == ["pending"]

    make_engine("engine-b")

    async def delivered() -> bool:
        return await statuses(first.db, queued.id) == ["delivered"]

    await wait_for(delivered, LEASE * 5, "the other engine to deliver")
    assert gate.ids == [f"{queued.id}.0"] * 2

    # The delivery's row is written first, the run's lease cleared by the next statement: wait
    # for that one too rather than read between the two (it raced on a loaded CI).
    await wait_for(released(first.db, queued.id), 5, "the delivery lease to be cleared")
