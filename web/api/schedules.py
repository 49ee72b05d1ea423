"""Schedule endpoints of docs/api.md. Handlers only translate HTTP to ``core`` calls."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Body, Query, Response, status

from agentcron.core.clock import utcnow
from agentcron.core.expectations import describe, validate_expectations
from agentcron.core.runs import run_view
from agentcron.core.schedules.plans import check_preview_after, preview
from agentcron.core.schedules.views import schedule_view
from agentcron.core.specs import (
    BackfillRequest,
    OccurrenceRequest,
    PageRequest,
    PauseRequest,
    PreviewRequest,
    ResumeRequest,
    ScheduleCreate,
    ScheduleUpdate,
)
from agentcron.web.api.deps import AuthDep, OwnerDep, PrincipalDep, SchedulesDep
from agentcron.web.api.schemas import (
    BackfillOut,
    ErrorOut,
    PreviewOut,
    ResumePlanOut,
    RunOut,
    ScheduleOut,
    SchedulePage,
)

ERRORS: dict[int | str, dict[str, Any]] = {
    code: {"model": ErrorOut} for code in (400, 401, 404, 409, 422, 503)
}
router = APIRouter(
    prefix="/api/v1/schedules", tags=["schedules"], responses=ERRORS, dependencies=[AuthDep]
)


@router.post("", status_code=status.HTTP_201_CREATED)
async def create_schedule(
    spec: ScheduleCreate, schedules: SchedulesDep, principal: PrincipalDep
) -> ScheduleOut:
    # Owned by the key's owner, admin or not: an admin key sees everything but acts as someone.
    trusted = schedules.context.policy.trusts(principal.owner, admin=principal.admin)
    schedule = await schedules.create(spec, principal.owner, trusted=trusted)
    return ScheduleOut.model_validate(schedule_view(schedule))


@router.get("")
async def list_schedules(
    schedules: SchedulesDep, owner: OwnerDep, query: Annotated[PageRequest, Query()]
) -> SchedulePage:
    page = await schedules.list(owner, query.limit, query.cursor)
    items = [ScheduleOut.model_validate(schedule_view(s)) for s in page.items]
    return SchedulePage(items=items, next_cursor=page.next_cursor)


# Registered before "/{schedule_id}/...": "by-key/runs" must never read as a schedule id.
@router.put(
    "/by-key/{key}",
    responses={200: {"model": ScheduleOut, "description": "replaced (same id, same runs)"}},
    status_code=status.HTTP_201_CREATED,
)
async def apply_schedule(
    key: str,
    spec: ScheduleCreate,
    schedules: SchedulesDep,
    principal: PrincipalDep,
    response: Response,
) -> ScheduleOut:
    """Create the schedule kept under the caller's ``key`` (201), or replace every field of
    it (200, same id and run history). Fields left out take their defaults."""
    trusted = schedules.context.policy.trusts(principal.owner, admin=principal.admin)
    applied = await schedules.apply(principal.owner, key, spec, trusted=trusted)
    if not applied.created:
        response.status_code = status.HTTP_200_OK
    return ScheduleOut.model_validate(schedule_view(applied.schedule))


@router.get("/by-key/{key}")
async def get_schedule_by_key(
    key: str, schedules: SchedulesDep, principal: PrincipalDep
) -> ScheduleOut:
    return ScheduleOut.model_validate(
        schedule_view(await schedules.get_by_key(principal.owner, key))
    )


@router.delete("/by-key/{key}", status_code=status.HTTP_204_NO_CONTENT)
async def delete_schedule_by_key(
    key: str, schedules: SchedulesDep, principal: PrincipalDep
) -> Response:
    await schedules.delete_by_key(principal.owner, key)
    return Response(status_code=status.HTTP_204_NO_CONTENT)


@router.post("/preview")
async def preview_trigger(request: PreviewRequest) -> PreviewOut:
    result = preview(request.trigger, request.count, check_preview_after(request.after), utcnow())
    expect = validate_expectations(request.expect)
    words = describe(expect) if expect is not None else None
    return PreviewOut(description=result.description, next=result.next, expect=words)


@router.get("/{schedule_id}")
async def get_schedule(schedule_id: str, schedules: SchedulesDep, owner: OwnerDep) -> ScheduleOut:
    return ScheduleOut.model_validate(schedule_view(await schedules.get(schedule_id, owner)))


@router.patch("/{schedule_id}")
async def update_schedule(
    schedule_id: str, patch: ScheduleUpdate, schedules: SchedulesDep, principal: PrincipalDep
) -> ScheduleOut:
    trusted = schedules.context.policy.trusts(principal.owner, admin=principal.admin)
    schedule = await schedules.update(schedule_id, patch, principal.scope, trusted=trusted)
    return ScheduleOut.model_validate(schedule_view(schedule))


@router.delete("/{schedule_id}", status_code=status.HTTP_204_NO_CONTENT)
async def delete_schedule(schedule_id: str, schedules: SchedulesDep, owner: OwnerDep) -> Response:
    await schedules.delete(schedule_id, owner)
    return Response(status_code=status.HTTP_204_NO_CONTENT)


@router.post("/{schedule_id}/pause")
async def pause_schedule(
    schedule_id: str,
    schedules: SchedulesDep,
    owner: OwnerDep,
    body: Annotated[PauseRequest | None, Body()] = None,
) -> ScheduleOut:
    note = body.note if body is not None else None
    return ScheduleOut.model_validate(
        schedule_view(await schedules.pause(schedule_id, note, owner))
    )


@router.post("/{schedule_id}/resume")
async def resume_schedule(
    schedule_id: str,
    schedules: SchedulesDep,
    owner: OwnerDep,
    principal: PrincipalDep,
    body: Annotated[ResumeRequest | None, Body()] = None,
) -> ScheduleOut | ResumePlanOut:
    """Re-enable. ``catchup`` says what happens to the due times the pause covered; with
    ``dry_run`` the answer is the plan (``ResumePlanOut``) and nothing changes."""
    body = body or ResumeRequest()
    if body.dry_run:
        plan = await schedules.plan_resume(schedule_id, owner, body.catchup)
        return ResumePlanOut(
            catchup=plan.catchup,
            run=plan.run,
            skipped=plan.skipped.count,
            skipped_first=plan.skipped.first,
            skipped_last=plan.skipped.last,
        )
    schedule = await schedules.resume(schedule_id, owner, body.catchup, by=principal.owner)
    return ScheduleOut.model_validate(schedule_view(schedule))


@router.post(
    "/{schedule_id}/backfill",
    status_code=status.HTTP_202_ACCEPTED,
    responses={200: {"model": BackfillOut, "description": "dry_run: the due times, none queued"}},
)
async def backfill_schedule(
    schedule_id: str,
    body: BackfillRequest,
    schedules: SchedulesDep,
    owner: OwnerDep,
    principal: PrincipalDep,
    response: Response,
) -> BackfillOut:
    """Queue one run per past due time in ``[start, end)`` that has not run (see README):
    202. A ``dry_run`` queues nothing, so it answers 200, like any read."""
    plan = await schedules.backfill(schedule_id, body, owner, by=principal.owner)
    if body.dry_run:
        response.status_code = status.HTTP_200_OK
    return BackfillOut(
        dry_run=body.dry_run, overlap=plan.overlap, due_times=plan.due_times, kept=plan.kept
    )


@router.post("/{schedule_id}/skip")
async def skip_occurrence(
    schedule_id: str,
    body: OccurrenceRequest,
    schedules: SchedulesDep,
    owner: OwnerDep,
    principal: PrincipalDep,
) -> RunOut:
    """Skip one upcoming due time (and only it): returns its ``skipped`` run row."""
    run = await schedules.skip_occurrence(schedule_id, body.due_at, owner, by=principal.owner)
    return RunOut.model_validate(run_view(run))


@router.post("/{schedule_id}/unskip", status_code=status.HTTP_204_NO_CONTENT)
async def unskip_occurrence(
    schedule_id: str, body: OccurrenceRequest, schedules: SchedulesDep, owner: OwnerDep
) -> Response:
    """Undo a skip while the due time is still ahead (204 whether or not it was skipped)."""
    await schedules.unskip_occurrence(schedule_id, body.due_at, owner)
    return Response(status_code=status.HTTP_204_NO_CONTENT)
