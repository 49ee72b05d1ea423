"""Statements on deliveries: the rows ``core.notify.delivery`` reads."""

from __future__ import annotations

import uuid

from sqlalchemy import Select, select

from agentcron.core.storage.models import Delivery


def delivery_of(run_id: uuid.UUID, index: int) -> Select[Delivery]:
    """The delivery of run ``run_id`` to its channel ``index`` (unique)."""
    return select(Delivery).where(Delivery.run_id == run_id, Delivery.index == index)
