"""The dashboard items of issue 17, through its routes on SQLite and PostgreSQL: the trigger in
words (its JSON on demand), argv as a shell reads it, times labelled with offsets, milliseconds,
a long pause note cut in the list, and the form's fields for the settings it lacked, with the
preview honouring them (a 16 ms run and paging through the history: tests/integration/
test_dashboard.py)."""

from __future__ import annotations

import html
import re
from datetime import timedelta

from fastapi import FastAPI

from agentcron.core.triggers import offset_label
from agentcron.web.dashboard.views import duration
from tests.conftest import issue_key
from tests.integration.test_dashboard import (
    FORM,
    browser,
    make_schedule,
    schedule_id,
    service,
)

SHELL = ["sh", "-c", "echo agent got: $(cat)"]


async def test_the_schedule_page_says_the_trigger_in_words_and_argv_as_typed(
    live_app: FastAPI,
) -> None:
    key = await issue_key(live_app, "alice")
    schedule = await make_schedule(
        live_app,
        "alice",
        trigger={
            "cron": "0 9 * * 1-5",
            "timezone": "Asia/Shanghai",
            "end_at": "2099-01-01T00:00:00+08:00",
            "dst_gap": "skip",
        },
        runner={"type": "command", "argv": SHELL},
    )
    async with browser(live_app, key) as http:
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


def test_times_are_labelled_with_an_offset_and_short_runs_in_milliseconds() -> None:
    from datetime import UTC, datetime
    from zoneinfo import ZoneInfo

    moment = datetime(2026, 12, 1, 1, 0, tzinfo=UTC)
    assert offset_label(moment.astimezone(ZoneInfo("Asia/Shanghai"))) == "+08:00"
    assert offset_label(moment.astimezone(ZoneInfo("Europe/Berlin"))) == "+01:00"
    assert offset_label(moment.astimezone(ZoneInfo("America/St_Johns"))) == "-03:30"
    assert offset_label(moment.astimezone(ZoneInfo("Asia/Kathmandu"))) == "+05:45"
    assert offset_label(moment.astimezone(ZoneInfo("UTC"))) == "UTC"
    assert duration(moment, moment + timedelta(milliseconds=16)) == "16 ms"
    assert duration(moment, moment + timedelta(microseconds=400)) == "0 ms"
    assert duration(moment, moment + timedelta(milliseconds=999.7)) == "1.0 s"
    assert duration(moment, moment + timedelta(seconds=1.24)) == "1.2 s"
    assert duration(moment, moment + timedelta(seconds=184)) == "3 min 4 s"


async def test_a_long_pause_note_is_cut_in_the_list_and_whole_on_its_page(
    live_app: FastAPI,
) -> None:
    key = await issue_key(live_app, "alice")
    schedule = await make_schedule(live_app, "alice")
    note = "paused by agentcron after 3 failed runs in a row; last error: " + "x" * 600
    await service(live_app).pause(schedule.id, note, "alice")
    async with browser(live_app, key) as http:
        listed = (await http.get("/")).text
        page = (await http.get(f"/schedules/{schedule.id}")).text
    cut = re.search(r'<div class="muted small paused-note" title="([^"]*)">([^<]*)</div>', listed)
    assert cut, listed
    assert html.unescape(cut.group(1)) == note  # the whole note on hover
    assert len(cut.group(2)) <= 80 and cut.group(2).endswith("...")
    assert note in html.unescape(page)  # and whole on the schedule's page


async def test_the_form_sets_every_setting_and_the_preview_honours_them(
    live_app: FastAPI,
) -> None:
    key = await issue_key(live_app, "local")  # trusted: may run a command of its own
    fields = {
        **FORM,
        "trigger_kind": "cron",
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
        assert times == [
            "2030-01-01T08:00:00Z",
            "2030-01-02T08:00:00Z",
            "2030-01-03T08:00:00Z",
        ]
        assert "Then the timetable ends: at most 3 due times" in preview.text
        past_end = await http.post("/ui/preview", data={**fields, "end_at": "2001-01-01T00:00Z"})
        assert past_end.status_code == 422 and 'data-field="end_at"' in past_end.text

        created = await http.post("/schedules/new", data=fields)
        assert created.status_code == 303, created.text
        stored = await service(live_app).get(schedule_id(created), None)
        assert stored.trigger == {
            "cron": "0 9 * * *",
            "timezone": "Europe/Paris",
            "dst_gap": "skip",
            "dst_repeat": "both",
            "start_at": "2029-12-31T23:00:00+00:00",
            "end_at": "2030-01-30T23:00:00+00:00",
        }
        assert (stored.max_runs, stored.catchup, stored.catchup_window_seconds) == (
            3,
            "latest",
            600,
        )
        assert (stored.jitter_seconds, stored.pause_after_failures, stored.retention_days) == (
            30,
            4,
            7,
        )

        # Blanking the optional ones sets them back to none (that the edit page shows them:
        # tests/integration/test_edit_keeps_fields.py).
        cleared = {
            **fields,
            "end_at": "",
            "dst_gap": "",
            "max_runs": "",
            "jitter_seconds": "",
            "retention_days": "",
        }
        saved = await http.post(f"/schedules/{stored.id}/edit", data=cleared)
        assert saved.status_code == 303, saved.text
        after = await service(live_app).get(stored.id, None)
        assert "end_at" not in after.trigger and "dst_gap" not in after.trigger
        assert after.trigger["dst_repeat"] == "both"
        assert (after.max_runs, after.jitter_seconds, after.retention_days) == (None, None, None)
        assert after.pause_after_failures == 4
