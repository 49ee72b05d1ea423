"""Pure plans behind the schedule verbs: previews, due times, resume and backfill plans."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta, tzinfo
from itertools import islice
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

from sqlalchemy.ext.asyncio import AsyncSession

from agentcron.core import triggers
from agentcron.core.errors import InvalidSchedule
from agentcron.core.logging import get_logger
from agentcron.core.runners.command.preflight import command_warnings
from agentcron.core.schedules.variables import variable_warnings
from agentcron.core.specs import (
    BackfillRequest,
    reject_nul,
)
from agentcron.core.states import RunReason
from agentcron.core.storage.database import Database
from agentcron.core.storage.models import Run, Schedule
from agentcron.core.storage.sql.timeline import insert_runs, summaries_across
from agentcron.core.timeline import (
    Gap,
    find_gap,
    gap_rows,
    last_fire_before,
)
from agentcron.core.triggers.warnings import schedule_warnings

log = get_logger(__name__)


@dataclass(frozen=True)
class Preview:
    """A trigger in words and its next due times."""

    description: str
    next: list[datetime]


def preview(
    trigger_data: dict[str, Any], count: int, after: datetime | None, now: datetime
) -> Preview:
    """Describe ``trigger_data`` and list up to ``count`` due times strictly after ``after``."""
    reject_nul(trigger_data, "trigger")
    trigger = triggers.parse_trigger(trigger_data, now)
    start = after if after is not None else now
    # Shown as the trigger's own clock reads them: a cron trigger's zone, with its offset.
    due = [triggers.in_zone(trigger, at) for at in triggers.preview(trigger, start, count)]
    return Preview(triggers.describe(trigger), due)


def exhausted(schedule: Schedule) -> bool:
    """Its ``max_runs`` due times have all been taken: the timetable is over."""
    return schedule.max_runs is not None and (schedule.scheduled_runs or 0) >= schedule.max_runs


@dataclass(frozen=True)
class Upcoming:
    """The due times a stored schedule's timetable still holds, and where it stops.

    ``end`` says why ``due`` holds fewer than were asked for: ``max_runs`` (it allows no more),
    ``end_at`` (none after it), ``once`` (a one-shot's only time), ``none`` (nothing is due any
    more, for another reason: the engine took it off the timetable); None when the list is
    full. ``ended``: nothing is left at all."""

    due: list[datetime]
    end: str | None

    @property
    def ended(self) -> bool:
        return not self.due


def upcoming(schedule: Schedule, now: datetime, count: int) -> Upcoming:
    """Up to ``count`` due times of ``schedule``: from its ``next_run`` on (from ``now`` while
    it is paused, as a resume would), no more than its ``max_runs`` leaves and none after its
    ``end_at``. An enabled schedule without a ``next_run`` has none: the engine runs no more of
    its timetable (a fired one-shot, the last due time taken or past the end)."""
    trigger = triggers.trigger_from_dict(schedule.trigger)
    left = None
    if schedule.max_runs is not None:
        left = max(0, schedule.max_runs - (schedule.scheduled_runs or 0))
    wanted = count if left is None else min(count, left)
    due: list[datetime] = []
    if not schedule.enabled:
        due = triggers.preview(trigger, now, wanted)
    elif schedule.next_run is not None:
        due = triggers.preview(trigger, schedule.next_run - timedelta(microseconds=1), wanted)
    if len(due) == left:
        return Upcoming(due, "max_runs")
    if len(due) == count:
        return Upcoming(due, None)
    if isinstance(trigger, triggers.OneShotTrigger):
        return Upcoming(due, "once")
    return Upcoming(due, "none" if trigger.end_at is None else "end_at")


def safe_warnings(
    trigger: triggers.Trigger,
    overlap: str,
    timeout_seconds: int,
    now: datetime,
    *,
    runner: Mapping[str, Any] | None = None,
    workdir: Path | None = None,
    notify: Sequence[Mapping[str, Any]] = (),
) -> list[dict[str, str]]:
    """``schedule_warnings``, then the ``runner``'s (``command_warnings``: a program not
    found, judged from ``workdir``, where its runs start), then the variables the runner and
    the ``notify`` channels name that the service's environment lacks (``variable_warnings``).
    None must ever cost a user the write: a failure there is a bug to log, and the schedule is
    saved without those warnings."""
    found: list[dict[str, str]] = []
    try:
        found += schedule_warnings(
            trigger, overlap=overlap, timeout_seconds=timeout_seconds, now=now
        )
    except Exception:
        log.exception("schedule_warnings_failed", trigger=triggers.trigger_to_dict(trigger))
    if runner is not None:
        try:
            found += command_warnings(runner, workdir)
        except Exception:
            log.exception("command_warnings_failed", runner_type=runner.get("type"))
        try:
            found += variable_warnings(runner, notify)
        except Exception:
            log.exception("variable_warnings_failed", runner_type=runner.get("type"))
    return found


def next_run_after(trigger: triggers.Trigger, now: datetime) -> datetime | None:
    return triggers.next_fire(trigger, now)


RESUME_ALL_CAP = 100  # due times catch-up ``all`` queues at most; more is a backfill's job
MAX_BACKFILL = 1000  # due times one backfill request may queue
# Rows that say a due time did not run, which a backfill may replace with a run.
REDOABLE = (RunReason.MISSED, RunReason.PAUSED, RunReason.COALESCED, RunReason.OVERLAP)


@dataclass(frozen=True)
class ResumePlan:
    """What a resume does with the due times its pause covered: ``run`` queued (catch-up
    runs), ``skipped`` written as ``paused`` rows."""

    catchup: str
    run: list[datetime]
    skipped: Gap


def resume_plan(schedule: Schedule, now: datetime, catchup: str) -> ResumePlan:
    """The resume plan of a paused ``schedule`` at ``now`` (pure)."""
    if schedule.paused_at is None or schedule.deleted_at is not None:
        return ResumePlan(catchup, [], Gap([]))
    trigger = triggers.trigger_from_dict(schedule.trigger)
    since = schedule.paused_at
    if catchup == "latest":
        latest = last_fire_before(trigger, now, since)
        if latest is None:
            return ResumePlan(catchup, [], Gap([]))
        return ResumePlan(catchup, [latest], find_gap(trigger, since, latest))
    if catchup == "all":
        due_times = due_times_between(trigger, since, now, cap=RESUME_ALL_CAP, field="catchup")
        return ResumePlan(catchup, due_times, Gap([]))
    return ResumePlan(catchup, [], find_gap(trigger, since, now))


@dataclass(frozen=True)
class BackfillPlan:
    """The due times a backfill queues (or would), and how many in its range it kept."""

    due_times: list[datetime]
    kept: int
    overlap: str


def due_times_between(
    trigger: triggers.Trigger,
    start: datetime,
    end: datetime,
    *,
    cap: int = MAX_BACKFILL,
    field: str = "end",
) -> list[datetime]:
    """Every due time in ``[start, end)``; ``InvalidSchedule`` naming ``field`` past ``cap``."""
    found = list(
        islice(triggers.fire_times(trigger, start - timedelta(microseconds=1), end), cap + 1)
    )
    if len(found) > cap:
        raise InvalidSchedule(
            f"more than {cap} due times in that range; ask for a shorter one", field=field
        )
    return found


def backfill_range(spec: BackfillRequest, now: datetime) -> tuple[datetime, datetime]:
    start = parse_instant(spec.start, "start")
    end = parse_instant(spec.end, "end")
    if end <= start:
        raise InvalidSchedule("end must be after start", field="end")
    if end > now:
        raise InvalidSchedule(
            "end must not be in the future: upcoming due times run on the timetable", field="end"
        )
    return start, end


async def trim_summaries(
    db: Database,
    session: AsyncSession,
    schedule: Schedule,
    trigger: triggers.Trigger,
    start: datetime,
    end: datetime,
    redo: list[Run],
) -> None:
    """Keep gap summary rows true around a backfilled range: one that began before ``start``
    now ends before it, and what a trimmed or replaced summary covered after ``end`` gets rows
    of its own (bounded like any gap)."""
    before = await session.scalars(summaries_across(schedule.id, start))
    tails: list[tuple[Run, datetime]] = []  # a summary row, and the last due time it covered
    for run in before:
        if run.covers_until is not None:
            tails.append((run, run.covers_until))
        run.covers_until = last_fire_before(trigger, start, run.due_at or start)
        run.covers = None  # trimmed: its count is no longer known
    tails += [(run, run.covers_until) for run in redo if run.covers_until is not None]
    for run, until in tails:
        # What the summary covered after the range stays accounted for, for the same reason.
        if until >= end and run.reason:
            rest = find_gap(trigger, end, until + timedelta(microseconds=1))
            if rest:
                rows = gap_rows(schedule, rest, run.reason, run.created_at, run.payload)
                await session.execute(insert_runs(db.capabilities.dialect), rows)


def parse_instant(value: str, field: str, *, min_year: int = 1) -> datetime:
    """An ISO 8601 datetime with an offset, in UTC; ``InvalidSchedule`` naming ``field``."""
    try:
        parsed = datetime.fromisoformat(value)
    except ValueError:
        raise InvalidSchedule(f"{field} must be an ISO 8601 datetime", field=field) from None
    if parsed.tzinfo is None:
        raise InvalidSchedule(f"{field} must carry a UTC offset", field=field)
    try:
        moment: datetime | None = parsed.astimezone(UTC)
    except OverflowError:
        moment = None
    if moment is None or moment.year < min_year:
        raise InvalidSchedule(
            f"{field} must lie between the years {min_year} and 9999 in UTC", field=field
        )
    return moment


def upcoming_due_time(schedule: Schedule, due_at: str, now: datetime) -> datetime:
    """``due_at`` parsed, checked to be a due time of ``schedule`` and still ahead.

    A time without a UTC offset (``2026-12-01T09:00``) is read as a person means it: on the
    schedule's own clock (a cron trigger's zone, else UTC). In a repeated autumn hour it may
    name either pass: the one that is a due time is taken (the first, if both are)."""
    trigger = triggers.trigger_from_dict(schedule.trigger)
    zone: tzinfo = ZoneInfo(trigger.timezone) if isinstance(trigger, triggers.CronTrigger) else UTC
    candidates = _local_instants(due_at, zone)
    if all(due <= now for due in candidates):
        raise InvalidSchedule("due_at has passed: only an upcoming due time", field="due_at")
    found: datetime | None = None
    for due in candidates:
        found = triggers.next_fire(trigger, due - timedelta(microseconds=1))
        if found is not None and found == due and due > now:
            return due
    following = "none" if found is None else triggers.in_zone(trigger, found).isoformat()
    read = "" if len(candidates) == 1 and _has_offset(due_at) else f", read in {zone},"
    raise InvalidSchedule(
        f"{due_at}{read} is not a due time of this schedule (the next one from there: {following})",
        field="due_at",
    )


def _has_offset(value: str) -> bool:
    try:
        return datetime.fromisoformat(value).tzinfo is not None
    except ValueError:
        return False


def _local_instants(value: str, zone: tzinfo) -> list[datetime]:
    """The instants (UTC) ``value`` names: one when it carries an offset; read on ``zone``'s
    clock when it has none, both passes of a repeated hour (first pass first)."""
    if _has_offset(value):
        return [parse_instant(value, "due_at")]
    try:
        wall = datetime.fromisoformat(value)
    except ValueError:
        raise InvalidSchedule("due_at must be an ISO 8601 datetime", field="due_at") from None
    found: list[datetime] = []
    for fold in (0, 1):
        try:
            instant = wall.replace(tzinfo=zone, fold=fold).astimezone(UTC)
        except OverflowError:
            raise InvalidSchedule(
                "due_at must lie between the years 1 and 9999 in UTC", field="due_at"
            ) from None
        if instant not in found:
            found.append(instant)
    return found


def check_preview_after(after: str | None) -> datetime | None:
    """Parse the optional ``after`` of a preview request (must carry an offset)."""
    if after is None:
        return None
    # Due times are searched in local time on either side of `after`: keep a year of margin
    # from the start of representable time (the end is handled: no due time is found).
    return parse_instant(after, "after", min_year=2)
