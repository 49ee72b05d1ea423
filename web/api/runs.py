"""Run endpoints of docs/api.md: run now, history, get, replay, cancel."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query, status

from agentcron.core.runs import run_view
from agentcron.core.specs import RunFilter
from agentcron.web.api.deps import AuthDep, OwnerDep, PrincipalDep, RunsDep
from agentcron.web.api.schedules import ERRORS
from agentcron.web.api.schemas import RunOut, RunPage

router = APIRouter(prefix="/api/v1/runs", tags=["runs"], responses=ERRORS, dependencies=[AuthDep])
schedule_runs = APIRouter(
    prefix="/api/v1/schedules", tags=["runs"], responses=ERRORS, dependencies=[AuthDep]
)


@schedule_runs.post("/{schedule_id}/run", status_code=status.HTTP_202_ACCEPTED)
async def run_now(
    schedule_id: str, runs: RunsDep, owner: OwnerDep, principal: PrincipalDep
) -> RunOut:
    """Queue a manual run; returns once its record is saved. The timetable does not move."""
    run = await runs.run_now(schedule_id, owner, by=principal.owner)
    return RunOut.model_validate(run_view(run))


@schedule_runs.get("/{schedule_id}/runs")
async def list_runs(
    schedule_id: str,
    runs: RunsDep,
    owner: OwnerDep,
    query: Annotated[RunFilter, Query()],
) -> RunPage:
    """Runs of a schedule, newest first, across every trigger, or those the filters keep."""
    page = await runs.list_runs(
        schedule_id,
        owner,
        query.limit,
        query.cursor,
        status=query.status,
        trigger=query.trigger,
        origin=query.origin,
        skipped=query.skipped,
    )
    items = [RunOut.model_validate(run_view(run, deliveries)) for run, deliveries in page.items]
    return RunPage(items=items, next_cursor=page.next_cursor)


@router.get("/{run_id}")
async def get_run(run_id: str, runs: RunsDep, owner: OwnerDep) -> RunOut:
    run, deliveries = await runs.get_run(run_id, owner)
    return RunOut.model_validate(run_view(run, deliveries))


@router.post("/{run_id}/replay", status_code=status.HTTP_202_ACCEPTED)
async def replay_run(
    run_id: str, runs: RunsDep, owner: OwnerDep, principal: PrincipalDep
) -> RunOut:
    """Queue a re-run of the saved payload of ``run_id``; the new run points back to it."""
    run = await runs.replay(run_id, owner, by=principal.owner)
    return RunOut.model_validate(run_view(run))


@router.post("/{run_id}/cancel", status_code=status.HTTP_202_ACCEPTED)
async def cancel_run(run_id: str, runs: RunsDep, owner: OwnerDep) -> RunOut:
    """Cancel a pending run, or stop a running one cooperatively (409 if already finished)."""
    return RunOut.model_validate(run_view(await runs.cancel(run_id, owner)))
