"""The dashboard (issue 7) through its routes, in-process, on SQLite and PostgreSQL.

Sign-in with an API key kept in a cookie; owners see only their own schedules, as through the
API; every action of the pages goes through the same ``core`` calls; bad form input comes back
with the message at its field and nothing written; posts from another site are refused.

What issue 17 added for a newcomer: the trigger in words (its JSON on demand), argv as a shell
reads it, times labelled with offsets, milliseconds, a long pause note cut in the list, and the
form's fields for every setting, with the preview honouring them.
"""

from __future__ import annotations

import html
import re
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi import FastAPI
from sqlalchemy import update

from agentcron.core.keys import revoke_key
from agentcron.core.ledger.sql import SqlRunStore
from agentcron.core.schedules.views import schedule_view
from agentcron.core.specs import ScheduleCreate
from agentcron.core.storage.database import Database
from agentcron.core.storage.models import Run, Schedule
from agentcron.web.dashboard.forms import ScheduleForm
from agentcron.web.dashboard.session import COOKIE, MAX_FORM_BYTES
from tests.conftest import app_client, issue_key
from tests.integration.test_runs_api import runs_of_a_restart

ORIGIN = "http://agentcron"
FORM: dict[str, str] = {
    "name": "digest",
    "prompt": "Summarise the news.",
    "trigger_kind": "cron",
    "cron": "0 8 * * 1-5",
    "timezone": "Asia/Shanghai",
    "every_seconds": "",
    "at": "",
    "runner_kind": "command",
    "argv": "sh\n-c\necho hello\n",
    "runner_json": "",
    "notify": "",
    "enabled": "on",
    "mode": "isolated",
    "overlap": "",
    "timeout_seconds": "600",
    "max_attempts": "2",
}


@asynccontextmanager
async def browser(app: FastAPI, key: str | None = None) -> AsyncIterator[httpx.AsyncClient]:
    """A client that behaves like a browser on a dashboard page: it keeps cookies and sends
    this site's Origin on posts; signed in with ``key`` when one is given."""
    async with app_client(app, None) as http:  # at ORIGIN
        http.headers["Origin"] = ORIGIN
        if key is not None:
            response = await http.post("/login", data={"key": key, "next": "/"})
            assert response.status_code == 303, response.text
        yield http


HOURLY = {"name": "alice's digest", "prompt": "p", "trigger": {"every_seconds": 3600}}


async def make_schedule(app: FastAPI, owner: str, **overrides: Any) -> Schedule:
    spec = {**HOURLY, "runner": {"type": "command", "argv": ["true"]}, **overrides}
    return await app.state.schedules.create(ScheduleCreate.model_validate(spec), owner)


def schedule_id(response: httpx.Response) -> str:
    match = re.fullmatch(r"/schedules/([0-9a-f-]{36})\?done=\w+", response.headers["location"])
    assert match, response.headers.get("location")
    return match.group(1)


def field_error(html: str, field: str) -> str:
    """The message shown under the input ``field`` (the form's error paragraph)."""
    match = re.search(rf'<p class="field-error" id="error-{field}">([^<]*)</p>', html)
    assert match, f"no error shown at {field}"
    return match.group(1)


# -- sign-in ---------------------------------------------------------------------------------


async def test_pages_need_sign_in_and_a_key_signs_in_and_out(live_app: FastAPI) -> None:
    key = await issue_key(live_app, "alice")
    async with browser(live_app) as http:
        for path in ("/", "/schedules/new", f"/schedules/{uuid.uuid4()}"):
            response = await http.get(path)
            assert response.status_code == 303
            assert response.headers["location"].startswith("/login?next=%2F")
        assert (await http.get("/ui/schedules/x/runs")).status_code == 401

        page = await http.get("/login")
        assert page.status_code == 200 and 'name="key"' in page.text
        response = await http.post("/login", data={"key": key, "next": "/schedules/new"})
        assert response.status_code == 303
        assert response.headers["location"] == "/schedules/new"
        cookie = response.headers["set-cookie"]
        assert f"{COOKIE}=" in cookie and "HttpOnly" in cookie and "Path=/" in cookie
        assert "samesite=strict" in cookie.lower()
        assert "secure" not in cookie.lower()  # plain http here; https adds Secure

        home = await http.get("/")
        assert home.status_code == 200
        assert "Signed in as <strong>alice</strong>" in home.text
        assert home.headers["cache-control"] == "no-store"
        # Signed in already: the sign-in page sends the viewer on.
        assert (await http.get("/login")).status_code == 303

        response = await http.post("/logout")
        assert response.status_code == 303
        assert (await http.get("/")).status_code == 303
        # The line `make run` prints, pasted whole, signs in too.
        response = await http.post("/login", data={"key": f"export AGENTCRON_KEY={key}\n"})
        assert response.status_code == 303
        assert (await http.get("/")).status_code == 200

        # A revoked key loses the dashboard at once.
        await revoke_key(live_app.state.db, key.split("_")[1])
        assert (await http.get("/")).status_code == 303
        assert (await http.post("/login", data={"key": key})).status_code == 401


async def test_a_bad_key_does_not_sign_in_and_a_good_one_goes_only_to_this_site(
    live_app: FastAPI,
) -> None:
    async with browser(live_app) as http:
        for bad in ("", "nonsense", "ac_0123456789ab_" + "A" * 43):
            response = await http.post("/login", data={"key": bad})
            assert response.status_code == 401, bad
            assert "set-cookie" not in response.headers
            assert 'class="field-error"' in response.text
            assert (await http.get("/")).status_code == 303
    key = await issue_key(live_app, "alice")
    for target in ("//evil.example/", "https://evil.example/", "/\\evil", "x"):
        async with browser(live_app) as http:
            response = await http.post("/login", data={"key": key, "next": target})
            assert response.headers["location"] == "/", target


# -- owners ----------------------------------------------------------------------------------


async def test_another_owners_schedule_and_runs_are_not_found(live_app: FastAPI) -> None:
    alice = await issue_key(live_app, "alice")
    bob = await issue_key(live_app, "bob")
    root = await issue_key(live_app, "root", admin=True)
    schedule = await make_schedule(live_app, "alice")
    run = await live_app.state.runs.run_now(schedule.id, "alice")
    before = await live_app.state.schedules.get(schedule.id, None)

    async with browser(live_app, bob) as http:
        home = await http.get("/")
        assert "alice&#39;s digest" not in home.text and "No schedules yet" in home.text
        sid = schedule.id
        for path in (f"/schedules/{sid}", f"/schedules/{sid}/edit", f"/ui/schedules/{sid}/runs"):
            response = await http.get(path)
            assert response.status_code == 404, path
            assert "not yours" in response.text
        posts = [f"/schedules/{sid}/{verb}" for verb in ("run", "pause", "resume", "delete")]
        posts += [f"/schedules/{sid}/edit", f"/runs/{run.id}/replay", f"/runs/{run.id}/cancel"]
        for path in posts:
            response = await http.post(path, data={**FORM, "name": "taken over"})
            assert response.status_code == 404, path
    after = await live_app.state.schedules.get(schedule.id, None)
    assert (after.name, after.enabled, after.deleted_at) == (before.name, True, None)
    assert (await live_app.state.runs.get_run(run.id, None))[0].status == "pending"
    assert await live_app.state.runs.count_runs(schedule.id) == {"pending": 1}

    async with browser(live_app, alice) as http:
        assert (await http.get(f"/schedules/{schedule.id}")).status_code == 200
    async with browser(live_app, root) as http:
        page = await http.get(f"/schedules/{schedule.id}")
        assert page.status_code == 200 and "<dt>Owner</dt><dd>alice</dd>" in page.text
        # An admin creates as its own owner, as through the API.
        response = await http.post("/schedules/new", data=FORM)
        created = await live_app.state.schedules.get(schedule_id(response), None)
        assert created.owner == "root"


# -- the form --------------------------------------------------------------------------------


# Each: the inputs changed, the field the message is shown at, and what it says. Which cron
# expressions and zones are refused is tested in tests/unit/test_triggers.py: one of each here.
BAD_FORM: list[tuple[dict[str, str], str, str]] = [
    ({"cron": "0 8 * *"}, "cron", "cron has 5 fields"),
    ({"timezone": "Mars/Olympus"}, "timezone", "unknown timezone"),
    ({"trigger_kind": "every", "every_seconds": "ten"}, "every_seconds", "whole number"),
    ({"trigger_kind": "every", "every_seconds": "0"}, "every_seconds", "out of range"),
    ({"trigger_kind": "at", "at": "2001-01-01T00:00:00+00:00"}, "at", "past"),
    # Plain words at the field, not pydantic's "String should have at least 1 character".
    ({"name": ""}, "name", "Name cannot be empty."),
    ({"timeout_seconds": "-1"}, "timeout_seconds", "Timeout must be at least 1."),
    ({"end_at": "2001-01-01T00:00:00+00:00"}, "end_at", "has passed"),
    ({"start_at": "soon"}, "start_at", "not an ISO-8601 datetime"),
    ({"dst_gap": "sometimes"}, "dst_gap", "dst_gap must be"),
    ({"max_runs": "0"}, "max_runs", "Max runs must be at least 1."),
    ({"jitter_seconds": "a bit"}, "jitter_seconds", "whole number"),
    ({"pause_after_failures": "0"}, "pause_after_failures", "at least 1"),
    ({"retention_days": "0"}, "retention_days", "Keep runs (days) must be at least 1."),
    ({"catchup_window_seconds": "-5"}, "catchup_window_seconds", "at least 0"),
    ({"argv": ""}, "runner", "argv"),
    ({"runner_kind": "json", "runner_json": "{nope"}, "runner", "not valid JSON"),
    ({"runner_kind": "json", "runner_json": '{"type": "teleport"}'}, "runner", "teleport"),
    ({"notify": '[{"type": "webhook", "url": "ftp://x"}]'}, "notify", "notify"),
]


async def test_bad_input_is_shown_at_its_field_and_nothing_is_written(
    live_app: FastAPI, subtests: pytest.Subtests
) -> None:
    async with browser(live_app, await issue_key(live_app, "alice")) as http:
        for changes, field, message in BAD_FORM:
            with subtests.test(field=field, message=message):
                response = await http.post("/schedules/new", data={**FORM, **changes})
                assert response.status_code == 422
                assert message in field_error(response.text, field)
                assert 'aria-invalid="true"' in response.text
                # What the user typed comes back as it was.
                for name in ("name", "cron", "timezone", "every_seconds", "at"):
                    typed = changes.get(name, FORM[name])
                    if typed:
                        assert f'value="{typed}"' in response.text
    assert (await live_app.state.schedules.list(None)).items == []


async def test_create_edit_pause_resume_run_replay_cancel_delete(live_app: FastAPI) -> None:
    # The local owner: the form's own command runner is for trusted owners (core.policy).
    async with browser(live_app, await issue_key(live_app, "local")) as http:
        response = await http.post("/schedules/new", data=FORM)
        assert response.status_code == 303
        id = schedule_id(response)
        created = await live_app.state.schedules.get(id, "local")
        assert created.trigger == {"cron": "0 8 * * 1-5", "timezone": "Asia/Shanghai"}
        assert created.runner == {"type": "command", "argv": ["sh", "-c", "echo hello"]}
        assert (created.timeout_seconds, created.max_attempts, created.overlap) == (600, 2, "allow")
        page = await http.get(response.headers["location"])
        assert "Schedule created." in page.text
        assert page.text.count('data-zone="Asia/Shanghai"') >= 10  # next run + 10 due times

        # The edit form shows the stored values (that an edit keeps what it does not change:
        # tests/integration/test_edit_keeps_fields.py).
        form = await http.get(f"/schedules/{id}/edit")
        assert 'value="0 8 * * 1-5"' in form.text and "sh\n-c\necho hello</textarea>" in form.text
        every = {**FORM, "trigger_kind": "every", "every_seconds": "600"}
        response = await http.post(f"/schedules/{id}/edit", data=every)
        assert response.headers["location"].endswith("?done=updated")
        grid = (await live_app.state.schedules.get(id, None)).trigger

        response = await http.post(f"/schedules/{id}/edit", data={**every, "cron": "x"})
        assert response.status_code == 303  # the cron input is not the chosen kind
        response = await http.post(f"/schedules/{id}/edit", data={**every, "every_seconds": "-5"})
        assert response.status_code == 422
        assert "out of range" in field_error(response.text, "every_seconds")
        assert (await live_app.state.schedules.get(id, None)).trigger == grid

        response = await http.post(f"/schedules/{id}/pause", data={"back": "/"})
        assert response.headers["location"] == "/?done=paused"
        paused = await live_app.state.schedules.get(id, None)
        assert (paused.enabled, paused.next_run) == (False, None)
        assert "paused" in (await http.get("/")).text
        await http.post(f"/schedules/{id}/resume", data={"back": f"/schedules/{id}"})
        assert (await live_app.state.schedules.get(id, None)).enabled is True

        response = await http.post(f"/schedules/{id}/run", data={"back": f"/schedules/{id}"})
        assert response.headers["location"] == f"/schedules/{id}?done=run"
        [(run, _)] = (await live_app.state.runs.list_runs(id, None)).items
        assert (run.trigger, run.status) == ("manual", "pending")
        fragment = await http.get(f"/ui/schedules/{id}/runs")
        assert f'data-run="{run.id}" data-status="pending"' in fragment.text

        await http.post(f"/runs/{run.id}/cancel", data={"back": f"/schedules/{id}"})
        assert (await live_app.state.runs.get_run(run.id, None))[0].status == "cancelled"
        again = await http.post(f"/runs/{run.id}/cancel")
        assert again.status_code == 409 and "already finished" in again.text

        response = await http.post(f"/runs/{run.id}/replay", data={"back": f"/schedules/{id}"})
        assert response.headers["location"] == f"/schedules/{id}?done=replayed"
        newest = (await live_app.state.runs.list_runs(id, None)).items[0][0]
        assert (newest.trigger, newest.replay_of) == ("replay", run.id)

        response = await http.post(f"/schedules/{id}/delete")
        assert response.headers["location"] == "/?done=deleted"
        assert (await http.get(f"/schedules/{id}")).status_code == 404
        assert (await live_app.state.runs.get_run(newest.id, None))[0].status == "cancelled"


async def test_the_live_preview_describes_the_trigger_or_says_what_is_wrong(
    live_app: FastAPI,
) -> None:
    async with browser(live_app, await issue_key(live_app, "alice")) as http:
        good = await http.post("/ui/preview", data={**FORM, "timezone": "Europe/London"})
        assert good.status_code == 200
        assert "At 08:00, Monday through Friday, Europe/London" in good.text
        assert good.text.count("<time ") == 5
        every = await http.post("/ui/preview", data={"trigger_kind": "every", "every_seconds": "3"})
        assert "Every 3 seconds" in every.text
        bad = await http.post("/ui/preview", data={**FORM, "cron": "61 * * * *"})
        assert bad.status_code == 422
        assert 'data-field="cron"' in bad.text and "<time " not in bad.text
    async with browser(live_app) as http:
        assert (await http.post("/ui/preview", data=FORM)).status_code == 401


# -- hostile requests ------------------------------------------------------------------------


async def test_posts_from_another_site_are_refused(
    live_app: FastAPI, subtests: pytest.Subtests
) -> None:
    key = await issue_key(live_app, "alice")
    schedule = await make_schedule(live_app, "alice")
    async with browser(live_app, key) as http:
        http.headers.pop("Origin")
        for sent in (
            {"Origin": "http://evil.example"},
            {"Origin": "null"},
            {"Origin": "http://agentcron.evil.example"},
            {"Referer": "http://evil.example/page"},
            {},  # neither
        ):
            with subtests.test(headers=sent):
                for path in (f"/schedules/{schedule.id}/pause", f"/schedules/{schedule.id}/delete"):
                    response = await http.post(path, headers=sent)
                    assert response.status_code == 403, path
                response = await http.post("/schedules/new", data=FORM, headers=sent)
                assert response.status_code == 403
                login = await http.post("/login", data={"key": key}, headers=sent)
                assert login.status_code == 403
        # The same post from a page of this site (Referer, as some browsers send alone) works.
        same = {"Referer": f"{ORIGIN}/schedules/{schedule.id}"}
        response = await http.post(f"/schedules/{schedule.id}/pause", headers=same)
        assert response.status_code == 303
    stored = await live_app.state.schedules.get(schedule.id, None)
    assert stored.deleted_at is None and not stored.enabled
    assert len((await live_app.state.schedules.list(None)).items) == 1


async def test_names_are_escaped(live_app: FastAPI) -> None:
    evil = '<script>alert("x")</script>'
    schedule = await make_schedule(live_app, "alice", name=evil, prompt=evil)
    await live_app.state.runs.run_now(schedule.id, "alice")
    async with browser(live_app, await issue_key(live_app, "alice")) as http:
        for path in ("/", f"/schedules/{schedule.id}", f"/schedules/{schedule.id}/edit"):
            page = await http.get(path)
            assert evil not in page.text, path
            assert "&lt;script&gt;alert(&#34;x&#34;)&lt;/script&gt;" in page.text, path
        response = await http.post("/schedules/new", data={**FORM, "name": evil, "cron": "x"})
        assert response.status_code == 422 and evil not in response.text


async def test_a_huge_form_is_refused(live_app: FastAPI) -> None:
    async with browser(live_app, await issue_key(live_app, "alice")) as http:
        body = {**FORM, "prompt": "x" * (MAX_FORM_BYTES + 1)}
        assert (await http.post("/schedules/new", data=body)).status_code == 413
        many = "&".join(f"f{i}=1" for i in range(500))
        encoded = {"Content-Type": "application/x-www-form-urlencoded"}
        response = await http.post("/schedules/new", content=many, headers=encoded)
        assert response.status_code == 413
    assert (await live_app.state.schedules.list(None)).items == []


async def test_the_openapi_document_has_no_dashboard_paths(live_app: FastAPI) -> None:
    async with browser(live_app) as http:
        paths = set((await http.get("/openapi.json")).json()["paths"])
        assert (await http.get("/static/dashboard.js")).status_code == 200
    # Nor /mcp, /login, /ui, /static or /runs.
    assert all(path.startswith("/api/v1/") for path in paths - {"/healthz", "/readyz"}), paths


async def test_the_schedule_page_shows_its_runs_warnings_and_guard_rails(live_app: FastAPI) -> None:
    # Skipped rows say why; runs say who asked for them (issue 8). A handler's JSON object is
    # the run's result, not its output: shown beside it, escaped. A short run's duration is in
    # milliseconds.
    trigger = {"cron": "30 2 * * *", "timezone": "America/New_York"}
    rails = {"pause_after_failures": 3, "max_runs": 10, "jitter_seconds": 30}
    schedule = await make_schedule(live_app, "alice", trigger=trigger, **rails)
    assert schedule.warnings and schedule.next_run  # 02:30 falls in New York's spring gap
    run = await live_app.state.runs.run_now(schedule.id, "alice", by="alice")
    skipped = await live_app.state.schedules.skip_occurrence(
        schedule.id, schedule.next_run.isoformat(), "alice", by="bob"
    )
    result = {"session_id": "<b>s-81</b>"}
    ended = {"started_at": run.created_at, "finished_at": run.created_at + timedelta(seconds=0.016)}
    async with live_app.state.db.session() as session:
        done = update(Run).where(Run.id == run.id)
        await session.execute(done.values(status="succeeded", result=result, **ended))
    async with browser(live_app, await issue_key(live_app, "alice")) as http:
        page = (await http.get(f"/schedules/{schedule.id}")).text
    assert 'data-code="dst_gap"' in page and "does not occur in America/New_York" in page
    assert "pauses after 3 failures in a row" in page
    assert "0 of at most 10 due times taken" in page and "up to 30 s late" in page
    assert "occurrence skipped" in page and f'data-run="{skipped.id}"' in page
    assert "by bob" in page and "by alice" in page
    assert ">16 ms</span>" in page and "0.0 s" not in page
    assert "<b>s-81</b>" not in page
    row = html.unescape(page.split(f'data-run="{run.id}"')[1].split("</tr>")[0])
    assert '<summary>result {"session_id": "<b>s-81</b>"}</summary>' in row
    assert '<pre class="output">{\n  "session_id": "<b>s-81</b>"\n}</pre>' in row  # unfolded


async def test_a_batch_of_runs_pages_in_due_time_order(
    live_app: FastAPI, client: httpx.AsyncClient, db: Database, tmp_path: Path
) -> None:
    """Issue 38: the run history of a schedule whose runs a claim wrote at once after a
    restart is in the API's order on every page, and in the live fragment; every run is
    reached by paging, each once."""
    schedule_id, expected = await runs_of_a_restart(client, db, tmp_path)
    seen: list[str] = []
    pages = 0
    async with browser(live_app, await issue_key(live_app, "local")) as http:
        fragment = (await http.get(f"/ui/schedules/{schedule_id}/runs")).text
        assert re.findall(r'data-run="([^"]+)"', fragment) == expected[:25]
        path: str | None = f"/schedules/{schedule_id}"
        while path is not None:
            page = (await http.get(path)).text
            pages += 1
            seen += re.findall(r'<tr class="run" data-run="([0-9a-f-]{36})"', page)
            older = re.search(r'<a href="([^"]+)">Older runs →</a>', page)
            path = html.unescape(older.group(1)) if older else None
            assert ("← Newest runs" in page) == (pages > 1)
    assert pages == 5  # 25 + 25 + 25 + 25 + 1
    assert seen == expected


# -- where the timetable ends ----------------------------------------------------------------


def upcoming_card(page: str) -> str:
    """The schedule page's card of next due times."""
    match = re.search(r"<h2>[^<]*due time[^<]*</h2>(.*?)</section>", page, re.S | re.I)
    assert match, "no card of next due times"
    return match.group(1)


def due_times(fragment: str) -> list[str]:
    """The due times listed (not the times a note names)."""
    return re.findall(r'<li><time datetime="([^"]+)"', fragment)


def utc(moment: datetime) -> str:
    return moment.astimezone(UTC).isoformat().replace("+00:00", "Z")


async def test_the_next_due_times_stop_where_the_timetable_ends(
    live_app: FastAPI, db: Database, tmp_path: Path
) -> None:
    """Issue 38: the card of next due times lists only those max_runs and end_at leave, says
    where the timetable ends, and once nothing is left says it ended (the list and the page
    say "ended", not "enabled"); the edit form's preview counts the due times already taken."""
    engine = SqlRunStore(db, owner="engine", lease_seconds=30, data_dir=tmp_path)
    hour = timedelta(hours=1)
    capped = await make_schedule(live_app, "alice", max_runs=3, misfire_grace_seconds=86_400)
    assert capped.next_run is not None
    first = capped.next_run
    until = {"every_seconds": 3600, "end_at": (first + 2.5 * hour).isoformat()}
    ending = await make_schedule(live_app, "alice", trigger=until, misfire_grace_seconds=86_400)
    async with browser(live_app, await issue_key(live_app, "alice")) as http:
        # end_at leaves three due times.
        card = upcoming_card((await http.get(f"/schedules/{ending.id}")).text)
        # Its own grid: made a moment after the capped one, it may start a second later.
        assert ending.next_run is not None
        assert due_times(card) == [utc(ending.next_run + k * hour) for k in range(3)]
        assert "Then the timetable ends: no due time after" in card

        # Two of the three due times taken: one is left.
        await engine.claim_due_jobs(first + hour, 500)
        card = upcoming_card((await http.get(f"/schedules/{capped.id}")).text)
        assert due_times(card) == [utc(first + 2 * hour)]
        assert "Then the timetable ends: at most 3 due times (max runs), 2 of them taken." in card
        form = (await http.get(f"/schedules/{capped.id}/edit")).text
        assert f'data-preview="/ui/preview?schedule={capped.id}"' in form
        typed = {"trigger_kind": "every", "every_seconds": "3600", "max_runs": "3"}
        edit = await http.post(f"/ui/preview?schedule={capped.id}", data=typed)
        assert len(due_times(edit.text)) == 1 and "(max runs), 2 of them taken" in edit.text

        # Every due time taken, or past the end: the timetable ended.
        await engine.claim_due_jobs(first + 3 * hour, 500)
        for schedule, why in (
            (capped, "at most 3 due times (max runs), 3 of them taken"),
            (ending, "no due time after"),
        ):
            page = (await http.get(f"/schedules/{schedule.id}")).text
            card = upcoming_card(page)
            assert due_times(card) == [] and "The timetable has ended: " + why in card, card
            assert '<span class="pill ended">ended</span>' in page
            assert '<span class="pill on">enabled</span>' not in page
        listed = (await http.get("/")).text
        assert listed.count('<span class="pill ended">ended</span>') == 2


async def test_the_interval_hint_says_when_the_first_run_comes(live_app: FastAPI) -> None:
    """Issue 38: a new interval counts from saving, but an edit keeps the grid of the stored
    start (the form shows it under Not before), and the hint says so."""
    # Every hour on a grid that began 17 minutes ago (as if created then).
    start = (datetime.now(UTC) - timedelta(minutes=17)).replace(microsecond=0)
    trigger = {"every_seconds": 3600, "start_at": start.isoformat()}
    stored = await make_schedule(live_app, "alice", trigger=trigger)
    async with browser(live_app, await issue_key(live_app, "alice")) as http:
        new = (await http.get("/schedules/new")).text
        assert "The first run is one interval after saving" in new
        edit = (await http.get(f"/schedules/{stored.id}/edit")).text
        assert "after saving" not in edit
        assert "The runs keep their grid, counted from Not before" in edit
        # As it says: every half hour instead, still on the grid of the stored start.
        form = ScheduleForm.from_view(schedule_view(stored)).values
        half = {**form, "every_seconds": "1800"}
        saved = await http.post(f"/schedules/{stored.id}/edit", data=half)
        assert saved.status_code == 303, saved.text
        after = await live_app.state.schedules.get(stored.id, None)
        assert after.next_run is not None
        assert (after.next_run - start) % timedelta(seconds=1800) == timedelta(0)
        # Not before blanked: counted from saving, the first run one interval later.
        blank = {**half, "start_at": ""}
        saved = await http.post(f"/schedules/{stored.id}/edit", data=blank)
        assert saved.status_code == 303, saved.text
    recounted = await live_app.state.schedules.get(stored.id, None)
    saved_at = datetime.fromisoformat(recounted.trigger["start_at"])
    assert saved_at >= start + timedelta(minutes=17)
    assert recounted.next_run == saved_at + timedelta(seconds=1800)


# -- for a newcomer (issue 17) ---------------------------------------------------------------


async def test_the_schedule_page_says_the_trigger_in_words_and_argv_as_typed(
    live_app: FastAPI,
) -> None:
    trigger = {"cron": "0 9 * * 1-5", "timezone": "Asia/Shanghai", "dst_gap": "skip"}
    trigger["end_at"] = "2099-01-01T00:00:00+08:00"
    runner = {"type": "command", "argv": ["sh", "-c", "echo agent got: $(cat)"]}
    schedule = await make_schedule(live_app, "alice", trigger=trigger, runner=runner)
    async with browser(live_app, await issue_key(live_app, "alice")) as http:
        page = (await http.get(f"/schedules/{schedule.id}")).text
    words = re.search(r'<dd class="trigger-words">(.*?)</dd>', page, re.S)
    assert words, page
    assert words.group(1).startswith("At 09:00, Monday through Friday, Asia/Shanghai")
    assert "not after" in words.group(1) and "2099-01-01 00:00:00 +08:00" in words.group(1)
    assert "a time the clocks skip does not run that day" in words.group(1)
    # The JSON only on demand, folded.
    assert re.search(r"<details class=\"as-json\"><summary>as JSON</summary><code>\{", page)
    # argv quoted as a shell needs it, as the CLI shows it.
    argv = re.search(r'<code class="argv">(.*?)</code>', page)
    assert argv and html.unescape(argv.group(1)) == "sh -c 'echo agent got: $(cat)'"
    # Times in Shanghai carry their offset, never the ambiguous "CST".
    assert "+08:00</time>" in page and "CST" not in page


async def test_a_long_pause_note_is_cut_in_the_list_and_whole_on_its_page(
    live_app: FastAPI,
) -> None:
    schedule = await make_schedule(live_app, "alice")
    note = "paused by agentcron after 3 failed runs in a row; last error: " + "x" * 600
    await live_app.state.schedules.pause(schedule.id, note, "alice")
    async with browser(live_app, await issue_key(live_app, "alice")) as http:
        listed = (await http.get("/")).text
        page = (await http.get(f"/schedules/{schedule.id}")).text
    cut = re.search(r'<div class="muted small paused-note" title="([^"]*)">([^<]*)</div>', listed)
    assert cut, listed
    assert html.unescape(cut.group(1)) == note  # the whole note on hover
    assert len(cut.group(2)) <= 80 and cut.group(2).endswith("...")
    assert note in html.unescape(page)  # and whole on the schedule's page


# The form's settings beyond the trigger, runner and notify.
SETTINGS = [
    *("max_runs", "catchup", "catchup_window_seconds"),
    *("jitter_seconds", "pause_after_failures", "retention_days"),
]


async def test_the_form_sets_every_setting_and_the_preview_honours_them(live_app: FastAPI) -> None:
    key = await issue_key(live_app, "local")  # trusted: may run a command of its own
    fields = {
        **FORM,  # a cron trigger
        "cron": "0 9 * * *",
        "timezone": "Europe/Paris",
        "start_at": "2030-01-01T00:00:00+01:00",
        "end_at": "2030-01-31T00:00:00+01:00",
        "dst_gap": "skip",
        "dst_repeat": "both",
        "max_runs": "3",
        "catchup": "latest",
        "catchup_window_seconds": "600",
        "jitter_seconds": "30",
        "pause_after_failures": "4",
        "retention_days": "7",
    }
    async with browser(live_app, key) as http:
        preview = await http.post("/ui/preview", data=fields)
        assert preview.status_code == 200, preview.text
        # Not before 2030 (start_at), and three due times only (max_runs).
        times = re.findall(r'<time datetime="([^"]+)"', preview.text)
        assert times == [f"2030-01-0{day}T08:00:00Z" for day in (1, 2, 3)]
        assert "Then the timetable ends: at most 3 due times" in preview.text
        past_end = await http.post("/ui/preview", data={**fields, "end_at": "2001-01-01T00:00Z"})
        assert past_end.status_code == 422 and 'data-field="end_at"' in past_end.text

        created = await http.post("/schedules/new", data=fields)
        assert created.status_code == 303, created.text
        stored = await live_app.state.schedules.get(schedule_id(created), None)
        assert stored.trigger == {
            "cron": "0 9 * * *",
            "timezone": "Europe/Paris",
            "dst_gap": "skip",
            "dst_repeat": "both",
            "start_at": "2029-12-31T23:00:00+00:00",
            "end_at": "2030-01-30T23:00:00+00:00",
        }
        settings = [getattr(stored, name) for name in SETTINGS]
        assert settings == [3, "latest", 600, 30, 4, 7]

        # Blanking the optional ones sets them back to none (that the edit page shows them:
        # tests/integration/test_edit_keeps_fields.py).
        blanked = ("end_at", "dst_gap", "max_runs", "jitter_seconds", "retention_days")
        cleared = {**fields, **dict.fromkeys(blanked, "")}
        saved = await http.post(f"/schedules/{stored.id}/edit", data=cleared)
        assert saved.status_code == 303, saved.text
        after = await live_app.state.schedules.get(stored.id, None)
        assert "end_at" not in after.trigger and "dst_gap" not in after.trigger
        assert after.trigger["dst_repeat"] == "both"
        assert (after.max_runs, after.jitter_seconds, after.retention_days) == (None, None, None)
        assert after.pause_after_failures == 4
