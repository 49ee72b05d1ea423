"""The dashboard's pages and actions. Like the API's handlers, each only calls ``core``.

Pages are GETs; actions are form POSTs answered with a redirect (303) back to a page, so a
reload never repeats an action. Two fragments feed the page script: the live preview of a
trigger and the run history the schedule page polls.
"""

from __future__ import annotations

from collections.abc import Callable, Coroutine
from typing import Annotated, Any
from urllib.parse import quote, urlencode, urlsplit

from fastapi import APIRouter, Depends, Query, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response
from fastapi.routing import APIRoute
from pydantic import ValidationError

from agentcron.core import triggers
from agentcron.core.clock import utcnow
from agentcron.core.errors import (
    AgentcronError,
    InvalidSchedule,
    NotFound,
    ScheduleCapacityExceeded,
)
from agentcron.core.keys import Principal, authenticate
from agentcron.core.runs import RunService, run_view
from agentcron.core.schedules.plans import preview, upcoming
from agentcron.core.schedules.service import ScheduleService
from agentcron.core.schedules.views import schedule_view
from agentcron.core.specs import ScheduleCreate, ScheduleUpdate
from agentcron.core.storage.database import Database
from agentcron.web.api.errors import status_for
from agentcron.web.dashboard.forms import (
    FORM_ERROR,
    MODES,
    NEW_DEFAULTS,
    OVERLAPS,
    FormInvalid,
    ScheduleForm,
    invalid_schedule_errors,
    validation_errors,
)
from agentcron.web.dashboard.session import (
    COOKIE,
    Forbidden,
    FormTooLarge,
    SignInRequired,
    ViewerDep,
    check_origin,
    local_path,
    read_form,
    sign_in,
    sign_out,
)
from agentcron.web.dashboard.views import ZONES, render, zone_of

SCHEDULES_PER_PAGE = 50
RUNS_PER_PAGE = 25
UPCOMING = 10
PREVIEW_COUNT = 5
# What a redirect's ?done= says; a fixed table, so a link cannot put words on the page.
NOTICES = {
    "created": "Schedule created.",
    "updated": "Schedule saved.",
    "unchanged": "Nothing changed.",
    "paused": "Schedule paused: no new scheduled runs until it is resumed.",
    "resumed": "Schedule resumed from its next due time.",
    "deleted": "Schedule deleted; its pending runs were cancelled.",
    "run": "Run queued: it appears in the history below.",
    "replayed": "Replay queued: it appears in the history below.",
    "cancelled": "Cancel requested.",
    "signed_out": "Signed out.",
}


class DashboardRoute(APIRoute):
    """A route whose errors are pages: sign-in redirects, 404 pages, error messages.

    The app's own handlers answer JSON (the API's error body); a person clicking around the
    dashboard should get a page instead, so these errors are turned into pages here.
    """

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        handler = super().get_route_handler()

        async def page_errors(request: Request) -> Response:
            try:
                return await handler(request)
            except SignInRequired:
                if request.url.path.startswith("/ui/"):
                    # The page script reloads, which lands on the sign-in page.
                    return HTMLResponse("sign in again", status_code=401)
                target = request.url.path + (f"?{request.url.query}" if request.url.query else "")
                return RedirectResponse(f"/login?next={quote(target, safe='')}", 303)
            except Forbidden:
                return _error(request, 403, "This form did not come from a page of this site.")
            except FormTooLarge:
                return _error(request, 413, "The form is too large.")
            except NotFound:
                return _error(request, 404, "Not found: it does not exist or is not yours.")
            except AgentcronError as exc:
                return _error(request, status_for(exc), exc.message)

        return page_errors


router = APIRouter(route_class=DashboardRoute, dependencies=[Depends(check_origin)])


def _error(request: Request, status: int, message: str) -> HTMLResponse:
    return render(request, "error.html", status, status=status, message=message)


def _schedules(request: Request) -> ScheduleService:
    service: ScheduleService = request.app.state.schedules
    return service


def _runs(request: Request) -> RunService:
    runs: RunService = request.app.state.runs
    return runs


def _back(posted: dict[str, str], default: str, done: str) -> RedirectResponse:
    """Back to the page an action was posted from (a local path only), saying what happened."""
    path = urlsplit(local_path(posted.get("back"), default)).path
    return RedirectResponse(f"{path}?{urlencode({'done': done})}", 303)


# -- sign-in ---------------------------------------------------------------------------------


@router.get("/login")
async def login_page(
    request: Request, next: str | None = None, done: str | None = None
) -> Response:
    key = request.cookies.get(COOKIE)
    db: Database = request.app.state.db
    if key and await authenticate(db, key) is not None:
        return RedirectResponse(local_path(next), 303)
    return render(
        request, "login.html", next=local_path(next), error=None, notice=NOTICES.get(done or "")
    )


@router.post("/login")
async def login(request: Request) -> Response:
    posted = await read_form(request)
    target = local_path(posted.get("next"))
    # Pasting the whole line `make run` printed (export AGENTCRON_KEY=ac_...) works too: a key
    # never contains "=" or quotes.
    key = posted.get("key", "").rsplit("=", 1)[-1].strip().strip("'\"")
    db: Database = request.app.state.db
    if not key or await authenticate(db, key) is None:
        # One message for unknown, malformed and revoked keys, as the API gives.
        error = "This key is not valid (unknown or revoked)." if key else "Paste an API key."
        return render(request, "login.html", 401, next=target, error=error)
    response = RedirectResponse(target, 303)
    sign_in(response, request, key)
    return response


@router.post("/logout")
async def logout(request: Request) -> Response:
    response = RedirectResponse("/login?done=signed_out", 303)
    sign_out(response, request)
    return response


# -- schedules -------------------------------------------------------------------------------


@router.get("/")
async def schedules_page(
    request: Request,
    viewer: ViewerDep,
    cursor: Annotated[str | None, Query(max_length=500)] = None,
    done: str | None = None,
) -> Response:
    page = await _schedules(request).list(viewer.scope, SCHEDULES_PER_PAGE, cursor)
    return render(
        request,
        "schedules.html",
        viewer=viewer,
        schedules=[schedule_view(schedule) for schedule in page.items],
        next_cursor=page.next_cursor,
        notice=NOTICES.get(done or ""),
    )


def _form_page(
    viewer: Principal, form: ScheduleForm, schedule: dict[str, Any] | None
) -> dict[str, Any]:
    return {
        "viewer": viewer,
        "form": form,
        "schedule": schedule,
        "zones": ZONES,
        "modes": MODES,
        "overlaps": OVERLAPS,
        "form_error": FORM_ERROR,
    }


@router.get("/schedules/new")
async def new_schedule_page(request: Request, viewer: ViewerDep) -> Response:
    form = ScheduleForm(dict(NEW_DEFAULTS))
    return render(request, "form.html", **_form_page(viewer, form, None))


@router.post("/schedules/new")
async def create_schedule(request: Request, viewer: ViewerDep) -> Response:
    form = ScheduleForm.from_post(await read_form(request), NEW_DEFAULTS)
    try:
        spec = ScheduleCreate.model_validate(form.body())
        # Owned by the viewer's owner, admin or not, as through the API.
        service = _schedules(request)
        trusted = service.context.policy.trusts(viewer.owner, admin=viewer.admin)
        schedule = await service.create(spec, viewer.owner, trusted=trusted)
    except (FormInvalid, ValidationError, InvalidSchedule, ScheduleCapacityExceeded) as exc:
        form.errors = _form_errors(exc)
        return render(request, "form.html", 422, **_form_page(viewer, form, None))
    return RedirectResponse(f"/schedules/{schedule.id}?done=created", 303)


def _form_errors(exc: Exception) -> dict[str, str]:
    if isinstance(exc, FormInvalid):
        return exc.errors
    if isinstance(exc, ValidationError):
        return validation_errors(exc)
    if isinstance(exc, InvalidSchedule):
        return invalid_schedule_errors(exc.field, exc.message)
    assert isinstance(exc, AgentcronError)
    return {FORM_ERROR: exc.message}


@router.get("/schedules/{schedule_id}")
async def schedule_page(
    request: Request,
    schedule_id: str,
    viewer: ViewerDep,
    runs_cursor: Annotated[str | None, Query(max_length=500)] = None,
    done: str | None = None,
) -> Response:
    schedule = await _schedules(request).get(schedule_id, viewer.scope)
    view = schedule_view(schedule)
    trigger = triggers.trigger_from_dict(schedule.trigger)
    runs = await _runs(request).list_runs(schedule.id, viewer.scope, RUNS_PER_PAGE, runs_cursor)
    return render(
        request,
        "schedule.html",
        viewer=viewer,
        schedule=view,
        zone=zone_of(view["trigger"]),
        upcoming=upcoming(schedule, utcnow(), UPCOMING),
        end_at=getattr(trigger, "end_at", None),
        runs=[run_view(run, deliveries) for run, deliveries in runs.items],
        runs_cursor=runs_cursor,
        next_runs_cursor=runs.next_cursor,
        notice=NOTICES.get(done or ""),
    )


@router.get("/schedules/{schedule_id}/edit")
async def edit_schedule_page(request: Request, schedule_id: str, viewer: ViewerDep) -> Response:
    view = schedule_view(await _schedules(request).get(schedule_id, viewer.scope))
    form = ScheduleForm.from_view(view)
    return render(request, "form.html", **_form_page(viewer, form, view))


@router.post("/schedules/{schedule_id}/edit")
async def edit_schedule(request: Request, schedule_id: str, viewer: ViewerDep) -> Response:
    service = _schedules(request)
    view = schedule_view(await service.get(schedule_id, viewer.scope))
    form = ScheduleForm.from_post(await read_form(request), ScheduleForm.from_view(view).values)
    try:
        patch = form.changes(view, service.context.clock())
        if not patch:
            return RedirectResponse(f"/schedules/{view['id']}?done=unchanged", 303)
        trusted = service.context.policy.trusts(viewer.owner, admin=viewer.admin)
        await service.update(
            view["id"], ScheduleUpdate.model_validate(patch), viewer.scope, trusted=trusted
        )
    except (FormInvalid, ValidationError, InvalidSchedule, ScheduleCapacityExceeded) as exc:
        form.errors = _form_errors(exc)
        return render(request, "form.html", 422, **_form_page(viewer, form, view))
    return RedirectResponse(f"/schedules/{view['id']}?done=updated", 303)


@router.post("/schedules/{schedule_id}/run")
async def run_now(request: Request, schedule_id: str, viewer: ViewerDep) -> Response:
    posted = await read_form(request)
    run = await _runs(request).run_now(schedule_id, viewer.scope, by=viewer.owner)
    return _back(posted, f"/schedules/{run.schedule_id}", "run")


@router.post("/schedules/{schedule_id}/pause")
async def pause(request: Request, schedule_id: str, viewer: ViewerDep) -> Response:
    posted = await read_form(request)
    note = posted.get("note", "").strip() or None
    schedule = await _schedules(request).pause(schedule_id, note, viewer.scope)
    return _back(posted, f"/schedules/{schedule.id}", "paused")


@router.post("/schedules/{schedule_id}/resume")
async def resume(request: Request, schedule_id: str, viewer: ViewerDep) -> Response:
    posted = await read_form(request)
    schedule = await _schedules(request).resume(schedule_id, viewer.scope, by=viewer.owner)
    return _back(posted, f"/schedules/{schedule.id}", "resumed")


@router.post("/schedules/{schedule_id}/delete")
async def delete(request: Request, schedule_id: str, viewer: ViewerDep) -> Response:
    await read_form(request)
    await _schedules(request).delete(schedule_id, viewer.scope)
    # Never back to the deleted schedule's page: it is gone.
    return RedirectResponse("/?done=deleted", 303)


# -- runs ------------------------------------------------------------------------------------


@router.post("/runs/{run_id}/replay")
async def replay(request: Request, run_id: str, viewer: ViewerDep) -> Response:
    posted = await read_form(request)
    run = await _runs(request).replay(run_id, viewer.scope, by=viewer.owner)
    return _back(posted, f"/schedules/{run.schedule_id}", "replayed")


@router.post("/runs/{run_id}/cancel")
async def cancel(request: Request, run_id: str, viewer: ViewerDep) -> Response:
    posted = await read_form(request)
    run = await _runs(request).cancel(run_id, viewer.scope)
    return _back(posted, f"/schedules/{run.schedule_id}", "cancelled")


# -- fragments for the page script -----------------------------------------------------------


@router.get("/ui/schedules/{schedule_id}/runs")
async def runs_fragment(request: Request, schedule_id: str, viewer: ViewerDep) -> Response:
    schedule = await _schedules(request).get(schedule_id, viewer.scope)
    runs = await _runs(request).list_runs(schedule.id, viewer.scope, RUNS_PER_PAGE)
    view = schedule_view(schedule)
    return render(
        request,
        "_runs.html",
        schedule=view,
        zone=zone_of(view["trigger"]),
        runs=[run_view(run, deliveries) for run, deliveries in runs.items],
    )


@router.post("/ui/preview")
async def preview_fragment(
    request: Request,
    viewer: ViewerDep,
    schedule: Annotated[str | None, Query(max_length=100)] = None,
) -> Response:
    """The trigger of the posted form in words and its next due times, or why it is wrong.
    ``schedule``: the form edits this stored schedule, whose due times already taken count
    against max runs."""
    form = ScheduleForm.from_post(await read_form(request))
    taken = 0
    if schedule is not None:
        taken = (await _schedules(request).get(schedule, viewer.scope)).scheduled_runs or 0
    try:
        trigger = form.trigger()
        max_runs = form.max_runs()
        result = preview(trigger, PREVIEW_COUNT, None, utcnow())
    except (FormInvalid, InvalidSchedule) as exc:
        errors = _form_errors(exc)
        field, message = next(iter(errors.items()))
        return render(request, "_preview.html", 422, error=message, field=field, result=None)
    # max_runs ends the timetable: no due time past the last one it allows is shown.
    left = None if max_runs is None else max(0, max_runs - taken)
    return render(
        request,
        "_preview.html",
        error=None,
        field=None,
        result=result,
        due=result.next if left is None else result.next[:left],
        left=left,
        max_runs=max_runs,
        taken=taken,
        zone=zone_of(trigger),
    )
