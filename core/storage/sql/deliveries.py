"""Statements on deliveries: the rows ``core.notify.delivery`` reads, and the delivery leases
of finished runs (``Run.deliver_until``, ``Run.deliverer``) the run ledger renews, ends and
takes over (``core.ledger.deliveries``)."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from datetime import datetime

from sqlalchemy import ColumnElement, Select, Update, and_, or_, select, true, update

from agentcron.core.storage.models import Delivery, Run
from agentcron.core.storage.sql.liveness import liveness_held
from agentcron.core.transitions import delivering


def delivery_of(run_id: uuid.UUID, index: int) -> Select[Delivery]:
    """The delivery of run ``run_id`` to its channel ``index`` (unique)."""
    return select(Delivery).where(Delivery.run_id == run_id, Delivery.index == index)


def deliveries_of(run_ids: Sequence[uuid.UUID]) -> Select[Delivery]:
    """The deliveries of the runs ``run_ids``, by run and channel index; unlocked."""
    return (
        select(Delivery)
        .where(Delivery.run_id.in_(run_ids))
        .order_by(Delivery.run_id, Delivery.index)
    )


def renew_deliveries(ids: Sequence[uuid.UUID], until: datetime) -> Update:
    """Extend the delivery leases of runs this process is delivering. One already cleared
    (its deliveries are done) stays cleared."""
    return (
        update(Run)
        .where(Run.id.in_(ids), Run.deliver_until.is_not(None))
        .values(deliver_until=until)
    )


def end_deliveries(ids: Sequence[uuid.UUID]) -> Update:
    """Nothing left to deliver for these runs: every channel is delivered or failed for good."""
    return update(Run).where(Run.id.in_(ids)).values(**delivering(None, None))


def predecessor_deliveries(owner: str, multi_process: bool) -> ColumnElement[bool]:
    """The deliveries a restarted engine ``owner`` takes over at its first look (the
    ``predecessors`` of ``take_over_deliveries``): with several processes on the database
    (``multi_process``, PostgreSQL) those under this very id, else (SQLite, one engine) every
    one left."""
    return Run.deliverer == owner if multi_process else true()


def take_over_deliveries(
    now: datetime,
    owner: str,
    until: datetime,
    limit: int,
    dead: Sequence[str] = (),
    predecessors: ColumnElement[bool] | None = None,
    *,
    schema: str | None,
) -> Update:
    """Lease to ``owner`` up to ``limit`` finished runs whose deliveries nobody is making,
    oldest first; returns the runs. Taken: those whose delivery lease ran out (their deliverer
    died or was stopped), those of the ``dead`` deliverers whose liveness lock nobody holds
    (checked again here, as the claim does), and those matched by ``predecessors`` (a restarted
    engine's first look); ``schema`` as for ``sql.leases.claimable_runs``. The rows are locked
    with ``SKIP LOCKED``, so two replicas recovering at once take different runs (on SQLite the
    write transaction serialises them)."""
    taken = [Run.deliver_until < now]
    if dead:
        taken.append(and_(Run.deliverer.in_(list(dead)), ~liveness_held(Run.deliverer, schema)))
    if predecessors is not None:
        taken.append(predecessors)
    orphaned = (
        select(Run.id)
        .where(Run.deliver_until.is_not(None), or_(*taken))
        .order_by(Run.deliver_until)
        .limit(limit)
        .with_for_update(skip_locked=True)
    )
    return (
        update(Run)
        .where(Run.id.in_(orphaned.scalar_subquery()))
        .values(**delivering(until, owner))
        .returning(Run)
        .execution_options(synchronize_session=False)
    )
