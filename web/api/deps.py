"""Dependencies shared by the routers (``Annotated`` aliases, as in the FastAPI template)."""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Request

from core.scheduler import Ledger
from core.schedules import ScheduleService
from web.scheduler import SchedulerLoop

# Until API keys arrive (reliability/security issue), every caller acts as this one owner.
LOCAL_OWNER = "local"


def get_schedules(request: Request) -> ScheduleService:
    service: ScheduleService = request.app.state.schedules
    return service


def get_ledger(request: Request) -> Ledger:
    ledger: Ledger = request.app.state.ledger
    return ledger


def get_engine(request: Request) -> SchedulerLoop | None:
    engine: SchedulerLoop | None = request.app.state.loop
    return engine


def get_owner() -> str | None:
    return LOCAL_OWNER


SchedulesDep = Annotated[ScheduleService, Depends(get_schedules)]
LedgerDep = Annotated[Ledger, Depends(get_ledger)]
EngineDep = Annotated[SchedulerLoop | None, Depends(get_engine)]
OwnerDep = Annotated[str | None, Depends(get_owner)]
