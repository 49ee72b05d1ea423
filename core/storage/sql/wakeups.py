"""Statements on wake-ups: the loop's idle look (when the claim could next find work, and who
else holds runs or deliveries: ``core.ledger.sql.SqlRunStore.next_wakeup``), and the NOTIFY
that wakes the other replicas (``core.storage.wakeups``). Neither takes a lock."""

from __future__ import annotations

from typing import Any

from sqlalchemy import Select, func, select

from agentcron.core.states import ACTIVE, RunStatus
from agentcron.core.storage.models import Run, Schedule
from agentcron.core.storage.sql.liveness import liveness_held


def next_wakeup(owner: str | None, schema: str | None) -> Select[*tuple[Any, ...]]:
    """The earliest instant at which the claim could find work: a schedule's ``next_run``, a
    queued run becoming available, or a lease running out; and, apart, the earliest delivery
    lease (``deliver_until``) to run out. Leases of ``owner`` count too: one that lapses here
    (its attempt died with the database out of reach) is taken back by this very instance,
    even with no other replica and nothing else due. Leases of runs and deliveries in hand are
    renewed long before they run out, so they never wake the loop.

    With ``owner`` (liveness on, PostgreSQL) two more columns: how many other owners hold
    active runs or are making deliveries, and which of them hold no liveness lock (an array,
    NULL for none, looked for among the locks of ``schema``'s installation). The distinct
    owners come first, so pg_locks is read once per owner, not once per run."""
    first_due = (
        select(func.min(Schedule.next_run))
        .where(Schedule.enabled.is_(True), Schedule.deleted_at.is_(None))
        .scalar_subquery()
    )
    first_queued = (
        select(func.min(Run.available_at))
        .where(Run.status == RunStatus.PENDING.value, Run.lease_owner.is_(None))
        .scalar_subquery()
    )
    first_expiry = (
        select(func.min(Run.lease_expires_at))
        .where(Run.status.in_(ACTIVE), Run.lease_owner.is_not(None))
        .scalar_subquery()
    )
    # The deliver_until index (of owed deliveries alone, on PostgreSQL) makes this a look at
    # its first entry; the condition, which min() implies anyway, lets the planner use it.
    first_delivery = (
        select(func.min(Run.deliver_until)).where(Run.deliver_until.is_not(None)).scalar_subquery()
    )
    if owner is None:
        return select(first_due, first_queued, first_expiry, first_delivery)
    # Owners of active runs, and engines making deliveries (the deliver_until index finds
    # those rows); UNION, not UNION ALL: one row per owner.
    others = (
        select(Run.lease_owner.label("owner"))
        .where(Run.status.in_(ACTIVE), Run.lease_owner.is_not(None), Run.lease_owner != owner)
        .union(
            select(Run.deliverer).where(
                Run.deliver_until.is_not(None),
                Run.deliverer.is_not(None),
                Run.deliverer != owner,
            )
        )
        .cte("others")
    )
    watched = select(func.count()).select_from(others).scalar_subquery()
    lockless = (
        select(func.array_agg(others.c.owner))
        .where(~liveness_held(others.c.owner, schema))
        .scalar_subquery()
    )
    return select(first_due, first_queued, first_expiry, first_delivery, watched, lockless).add_cte(
        others
    )


def notify(channel: str) -> Select[Any]:
    """Send an empty NOTIFY on ``channel`` when the transaction commits (PostgreSQL only:
    ``pg_notify``); NOTIFY serialises the commits that send it."""
    return select(func.pg_notify(channel, ""))
