"""How the dashboard writes times and durations (``core.triggers.offset_label``,
``web.dashboard.views.duration``); the pages that show them: tests/integration/test_dashboard.py."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

from agentcron.core.triggers import offset_label
from agentcron.web.dashboard.views import duration


def test_times_are_labelled_with_an_offset_and_short_runs_in_milliseconds() -> None:
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
