"""Dependencies shared by the routers (``Annotated`` aliases, as in the FastAPI template)."""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Request

from core.schedules import ScheduleService

# Until API keys arrive (reliability/security issue), every caller acts as this one owner.
LOCAL_OWNER = "local"


def get_schedules(request: Request) -> ScheduleService:
    service: ScheduleService = request.app.state.schedules
    return service


def get_owner() -> str | None:
    return LOCAL_OWNER


SchedulesDep = Annotated[ScheduleService, Depends(get_schedules)]
OwnerDep = Annotated[str | None, Depends(get_owner)]
