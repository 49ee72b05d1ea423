"""How the dashboard writes times, durations and a trigger's notes (``web.dashboard.views``);
that its pages show them: tests/integration/test_dashboard.py."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

from agentcron.core.triggers import offset_label
from agentcron.web.dashboard.views import duration, trigger_notes


def test_times_are_labelled_with_an_offset_and_short_runs_in_milliseconds() -> None:
    moment = datetime(2026, 12, 1, 1, 0, tzinfo=UTC)
    assert offset_label(moment.astimezone(ZoneInfo("Asia/Shanghai"))) == "+08:00"  # not "CST"
    assert offset_label(moment.astimezone(ZoneInfo("Europe/Berlin"))) == "+01:00"
    assert offset_label(moment.astimezone(ZoneInfo("America/St_Johns"))) == "-03:30"
    assert offset_label(moment.astimezone(ZoneInfo("Asia/Kathmandu"))) == "+05:45"
    assert offset_label(moment.astimezone(ZoneInfo("UTC"))) == "UTC"
    assert duration(moment, moment + timedelta(milliseconds=16)) == "16 ms"
    assert duration(moment, moment + timedelta(microseconds=400)) == "0 ms"
    assert duration(moment, moment + timedelta(milliseconds=999.7)) == "1.0 s"
    assert duration(moment, moment + timedelta(seconds=1.24)) == "1.2 s"
    assert duration(moment, moment + timedelta(seconds=184)) == "3 min 4 s"


def test_a_triggers_notes_say_its_dst_policies_in_words_and_not_its_defaults() -> None:
    trigger = {"cron": "0 9 * * *", "timezone": "Asia/Shanghai", "dst_gap": "skip"}
    notes = trigger_notes({**trigger, "dst_repeat": "both"}, "Asia/Shanghai")
    assert notes == [
        "a time the clocks skip does not run that day",
        "a time the clocks repeat runs in both passes",
    ]
    assert trigger_notes({"cron": "0 9 * * *"}, "UTC") == []
