"""The schedule half of the service layer: create, read, list, update, pause, resume, delete.

Every write validates first and computes ``next_run`` before anything reaches the database, so
bad input never leaves a row behind. ``next_run`` is always recomputed from *now* when the
timetable or the enabled state changes, which is why a due time missed while paused is never
run late.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from sqlalchemy import delete, func, or_, select, update
from sqlalchemy.ext.asyncio import AsyncSession

from core import triggers
from core.clock import Clock, utcnow
from core.errors import Conflict, InvalidSchedule, NotFound, ScheduleCapacityExceeded
from core.logging import get_logger
from core.notify import keep_masked_secrets, masked_channels, validate_channels
from core.pagination import Page, check_limit, decode_cursor, encode_cursor
from core.policy import ExecutionPolicy
from core.policy import current as current_policy
from core.runners import validate_runner
from core.secrets import check_references
from core.specs import (
    BackfillRequest,
    ScheduleCreate,
    ScheduleUpdate,
    reject_nul,
    reject_oversized,
)
from core.storage import Database, Run, Schedule
from core.storage import queries as q
from core.storage.wakeups import announce_change
from core.timeline import (
    Gap,
    find_gap,
    gap_rows,
    last_fire_before,
    queue_under_way,
    queued_rows,
)
from core.transitions import apply, paused
from core.warnings import schedule_warnings

log = get_logger(__name__)

# Fields whose change makes an update recompute the schedule's warnings.
WARNING_INPUTS = frozenset({"trigger", "timeout_seconds", "overlap"})


def parse_id(value: str | uuid.UUID, kind: str = "schedule") -> uuid.UUID:
    """An id from a path or a caller; anything that is not a UUID is simply not found."""
    if isinstance(value, uuid.UUID):
        return value
    try:
        return uuid.UUID(value)
    except (ValueError, AttributeError, TypeError):
        raise NotFound(kind, str(value)) from None


def schedule_view(schedule: Schedule) -> dict[str, Any]:
    """The public shape of a schedule (docs/api.md): secrets masked, description in words."""
    trigger = triggers.trigger_from_dict(schedule.trigger)
    return {
        "id": schedule.id,
        "owner": schedule.owner,
        "name": schedule.name,
        "prompt": schedule.prompt,
        "trigger": schedule.trigger,
        "enabled": schedule.enabled,
        "mode": schedule.mode,
        "overlap": schedule.overlap,
        "catchup": schedule.catchup,
        "catchup_window_seconds": schedule.catchup_window_seconds,
        "misfire_grace_seconds": schedule.misfire_grace_seconds,
        "timeout_seconds": schedule.timeout_seconds,
        "max_attempts": schedule.max_attempts,
        "runner": schedule.runner,
        "notify": masked_channels(schedule.notify),
        "next_run": schedule.next_run,
        "description": triggers.describe(trigger),
        "paused_at": schedule.paused_at,
        "paused_note": schedule.paused_note,
        "last_run_at": schedule.last_run_at,
        "last_status": schedule.last_status,
        "last_error": schedule.last_error,
        "last_run_id": schedule.last_run_id,
        "consecutive_failures": schedule.consecutive_failures,
        "retention_days": schedule.retention_days,
        "pause_after_failures": schedule.pause_after_failures,
        "max_runs": schedule.max_runs,
        "scheduled_runs": schedule.scheduled_runs or 0,
        "jitter_seconds": schedule.jitter_seconds,
        "warnings": schedule.warnings or [],
        "created_at": schedule.created_at,
        "updated_at": schedule.updated_at,
    }


async def load_schedule(
    session: AsyncSession, schedule_id: str | uuid.UUID, owner: str | None, *, lock: bool = False
) -> Schedule:
    """The undeleted schedule visible to ``owner`` (None: any owner), optionally row-locked;
    ``NotFound`` otherwise (another owner's schedule is not found, never forbidden)."""
    id = parse_id(schedule_id)
    query = select(Schedule).where(Schedule.id == id, Schedule.deleted_at.is_(None))
    if owner is not None:
        query = query.where(Schedule.owner == owner)
    if lock:
        query = query.with_for_update()
    schedule = (await session.execute(query)).scalar_one_or_none()
    if schedule is None:
        raise NotFound("schedule", str(schedule_id))
    return schedule


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
    return Preview(triggers.describe(trigger), triggers.preview(trigger, start, count))


def _exhausted(schedule: Schedule) -> bool:
    """Its ``max_runs`` due times have all been taken: the timetable is over."""
    return schedule.max_runs is not None and (schedule.scheduled_runs or 0) >= schedule.max_runs


def _warnings(
    trigger: triggers.Trigger, overlap: str, timeout_seconds: int, now: datetime
) -> list[dict[str, str]]:
    """``schedule_warnings``, which must never cost a user the write: a failure there is a
    bug to log, and the schedule is saved without warnings."""
    try:
        return schedule_warnings(trigger, overlap=overlap, timeout_seconds=timeout_seconds, now=now)
    except Exception:
        log.exception("schedule_warnings_failed", trigger=triggers.trigger_to_dict(trigger))
        return []


def _next_run(trigger: triggers.Trigger, now: datetime) -> datetime | None:
    due = triggers.next_fire(trigger, now)
    return None if due is None else due.astimezone(UTC)


class ScheduleService:
    """Schedule CRUD over one database.

    ``owner=None`` means an administrator (sees everything); otherwise a schedule of another
    owner is ``NotFound``, never "forbidden". ``on_change`` is called after every committed
    change to a timetable so the local loop can re-plan its sleep; on PostgreSQL the same
    transaction also sends a NOTIFY on ``agentcron_schedules`` for other replicas.
    """

    def __init__(
        self,
        db: Database,
        *,
        max_active: int = 100_000,
        clock: Clock = utcnow,
        on_change: Callable[[], None] | None = None,
        allow_private: bool = False,
        policy: ExecutionPolicy | None = None,
    ) -> None:
        self.db = db
        # What tenants may run (core.policy); checked for callers that are not trusted.
        self.policy = policy or current_policy()
        self.max_active = max_active
        # AGENTCRON_ALLOW_PRIVATE_WEBHOOKS: notify targets on loopback/private networks.
        self.allow_private = allow_private
        self.clock = clock
        self.on_change = on_change

    async def _announce(self, session: AsyncSession) -> None:
        await announce_change(self.db, session)

    def _changed(self) -> None:
        if self.on_change is not None:
            self.on_change()

    async def create(self, spec: ScheduleCreate, owner: str, *, trusted: bool = True) -> Schedule:
        """Validate ``spec`` and store a new schedule with its first ``next_run`` and its
        warnings (``core.warnings``: things worth knowing, never a reason to refuse).
        ``trusted`` false applies the tenant rules of the execution policy (``core.policy``).

        Raises ``InvalidSchedule`` (naming the field) for bad input, a reference to a secret
        ``owner`` has not stored included, and ``ScheduleCapacityExceeded`` when the
        active-schedule limit is reached; nothing is written in either case.
        """
        now = self.clock()
        for name in ("trigger", "runner"):
            reject_nul(getattr(spec, name), name)
            reject_oversized(getattr(spec, name), name)
        reject_nul(spec.notify, "notify")
        reject_oversized(spec.notify, "notify")
        trigger = triggers.parse_trigger(spec.trigger, now)
        runner = validate_runner(spec.runner)
        notify = validate_channels(spec.notify, allow_private=self.allow_private)
        if not trusted:
            runner = self.policy.check_tenant(runner, notify) or runner
        overlap = spec.overlap or ("skip" if spec.mode == "persistent" else "allow")
        schedule = Schedule(
            id=uuid.uuid4(),
            owner=owner,
            name=spec.name,
            prompt=spec.prompt,
            trigger=triggers.trigger_to_dict(trigger),
            enabled=spec.enabled,
            mode=spec.mode,
            overlap=overlap,
            catchup=spec.catchup,
            catchup_window_seconds=spec.catchup_window_seconds,
            misfire_grace_seconds=spec.misfire_grace_seconds,
            timeout_seconds=spec.timeout_seconds,
            max_attempts=spec.max_attempts,
            runner=runner,
            notify=notify,
            retention_days=spec.retention_days,
            pause_after_failures=spec.pause_after_failures,
            max_runs=spec.max_runs,
            scheduled_runs=0,
            jitter_seconds=spec.jitter_seconds,
            warnings=_warnings(trigger, overlap, spec.timeout_seconds, now),
            next_run=_next_run(trigger, now) if spec.enabled else None,
            paused_at=None if spec.enabled else now,
            consecutive_failures=0,
            created_at=now,
            updated_at=now,
        )
        async with self.db.session() as session:
            # Every secret the configs refer to must be one the owner has stored.
            await check_references(session, owner, runner, notify)
            if spec.enabled:
                await self._check_capacity(session)
            session.add(schedule)
            await self._announce(session)
        self._changed()
        return schedule

    async def _check_capacity(self, session: AsyncSession) -> None:
        active = await session.scalar(
            select(func.count())
            .select_from(Schedule)
            .where(Schedule.enabled.is_(True), Schedule.deleted_at.is_(None))
        )
        if (active or 0) >= self.max_active:
            raise ScheduleCapacityExceeded(
                f"at most {self.max_active} active schedules (AGENTCRON_MAX_ACTIVE_SCHEDULES)"
            )

    async def get(self, schedule_id: str | uuid.UUID, owner: str | None) -> Schedule:
        """The schedule, or ``NotFound``."""
        async with self.db.session(write=False) as session:
            return await load_schedule(session, schedule_id, owner)

    async def list(
        self, owner: str | None, limit: int = 50, cursor: str | None = None
    ) -> Page[Schedule]:
        """Schedules newest created first (ties by id), ``limit`` per page."""
        check_limit(limit)
        query = select(Schedule).where(Schedule.deleted_at.is_(None))
        if owner is not None:
            query = query.where(Schedule.owner == owner)
        if cursor is not None:
            created, id = decode_cursor(cursor)
            query = query.where(
                or_(
                    Schedule.created_at < created,
                    (Schedule.created_at == created) & (Schedule.id < id),
                )
            )
        query = query.order_by(Schedule.created_at.desc(), Schedule.id.desc()).limit(limit + 1)
        async with self.db.session(write=False) as session:
            rows = list((await session.execute(query)).scalars())
        more = len(rows) > limit
        rows = rows[:limit]
        next_cursor = encode_cursor(rows[-1].created_at, rows[-1].id) if more else None
        return Page(rows, next_cursor)

    async def update(
        self,
        schedule_id: str | uuid.UUID,
        patch: ScheduleUpdate,
        owner: str | None,
        *,
        trusted: bool = True,
    ) -> Schedule:
        """Replace each named field; recompute ``next_run`` if the timetable or state changed,
        and the warnings if the trigger, ``timeout_seconds`` or ``overlap`` did. ``trusted``
        false checks a changed runner or notify list against the tenant rules."""
        changes = patch.changes()
        now = self.clock()
        async with self.db.session() as session:
            schedule = await load_schedule(session, schedule_id, owner, lock=True)
            timetable_changed = False
            if "trigger" in changes:
                reject_nul(changes["trigger"], "trigger")
                reject_oversized(changes["trigger"], "trigger")
                trigger = triggers.parse_trigger(changes["trigger"], now)
                changes["trigger"] = triggers.trigger_to_dict(trigger)
                timetable_changed = True
            if "runner" in changes:
                reject_nul(changes["runner"], "runner")
                reject_oversized(changes["runner"], "runner")
                changes["runner"] = validate_runner(changes["runner"])
                if not trusted:
                    changes["runner"] = self.policy.check_tenant(changes["runner"], None)
            if "notify" in changes:
                reject_nul(changes["notify"], "notify")
                reject_oversized(changes["notify"], "notify")
                merged = keep_masked_secrets(changes["notify"], schedule.notify)
                changes["notify"] = validate_channels(merged, allow_private=self.allow_private)
                if not trusted:
                    self.policy.check_tenant(None, changes["notify"])
            # The schedule's owner's secrets (an admin may edit another owner's schedule); only
            # what this update changes, so a rename never fails on a secret deleted since.
            await check_references(
                session, schedule.owner, changes.get("runner"), changes.get("notify")
            )
            if "enabled" in changes and changes["enabled"] != schedule.enabled:
                timetable_changed = True
                if changes["enabled"]:
                    await self._check_capacity(session)
                    await self._account_pause(session, schedule, now)
                    schedule.paused_at, schedule.paused_note = None, None
                else:
                    schedule.paused_at = now
            timetable_changed = timetable_changed or "max_runs" in changes
            for name, value in changes.items():
                setattr(schedule, name, value)
            if WARNING_INPUTS & changes.keys():
                schedule.warnings = _warnings(
                    triggers.trigger_from_dict(schedule.trigger),
                    schedule.overlap,
                    schedule.timeout_seconds,
                    now,
                )
            if timetable_changed:
                schedule.next_run = (
                    _next_run(triggers.trigger_from_dict(schedule.trigger), now)
                    if schedule.enabled and not _exhausted(schedule)
                    else None
                )
            schedule.updated_at = now
            await self._announce(session)
        self._changed()
        return schedule

    async def pause(
        self, schedule_id: str | uuid.UUID, note: str | None, owner: str | None
    ) -> Schedule:
        """Stop new scheduled runs: clears ``next_run``; runs already started finish."""
        now = self.clock()
        async with self.db.session() as session:
            schedule = await load_schedule(session, schedule_id, owner, lock=True)
            apply(schedule, paused(now, note, since=schedule.paused_at))
            await self._announce(session)
        self._changed()
        return schedule

    async def resume(
        self,
        schedule_id: str | uuid.UUID,
        owner: str | None,
        catchup: str = "skip",
        *,
        by: str | None = None,
    ) -> Schedule:
        """Re-enable; the next due time is the first one strictly after now. The due times
        the pause covered are accounted for by ``catchup`` (see ``resume_plan``): ``skip``
        writes them all as ``paused`` rows; ``latest`` queues the latest one and skips the
        rest; ``all`` queues every one (at most RESUME_ALL_CAP), one at a time, oldest first."""
        now = self.clock()
        async with self.db.session() as session:
            schedule = await load_schedule(session, schedule_id, owner, lock=True)
            if not schedule.enabled:
                await self._check_capacity(session)
                plan = resume_plan(schedule, now, catchup)
                await self._write_resume(session, schedule, plan, now, by)
            schedule.enabled = True
            schedule.paused_at = None
            schedule.paused_note = None
            schedule.next_run = (
                None
                if _exhausted(schedule)
                else _next_run(triggers.trigger_from_dict(schedule.trigger), now)
            )
            schedule.updated_at = now
            await self._announce(session)
        self._changed()
        return schedule

    async def plan_resume(
        self, schedule_id: str | uuid.UUID, owner: str | None, catchup: str = "skip"
    ) -> ResumePlan:
        """What ``resume`` with ``catchup`` would do now, without doing it (a dry run)."""
        async with self.db.session(write=False) as session:
            schedule = await load_schedule(session, schedule_id, owner)
        if schedule.enabled:
            return ResumePlan(catchup, [], Gap([]))
        return resume_plan(schedule, self.clock(), catchup)

    async def _write_resume(
        self,
        session: AsyncSession,
        schedule: Schedule,
        plan: ResumePlan,
        now: datetime,
        by: str | None,
    ) -> None:
        dialect = self.db.capabilities.dialect
        if plan.skipped:
            rows = gap_rows(schedule, plan.skipped, "paused", now)
            await session.execute(q.insert_runs(dialect), rows)
        if plan.run:
            busy = bool(await session.scalar(queue_under_way(schedule.id)))
            rows = queued_rows(schedule, plan.run, "catchup", now, by=by, head_free=not busy)
            await session.execute(q.insert_runs(dialect), rows)

    async def _account_pause(
        self, session: AsyncSession, schedule: Schedule, now: datetime
    ) -> None:
        """Write the due times the pause covered as ``skipped`` runs with reason ``paused``
        (bounded, see ``core.timeline``), on the timetable as it was while paused."""
        await self._write_resume(session, schedule, resume_plan(schedule, now, "skip"), now, None)

    async def backfill(
        self,
        schedule_id: str | uuid.UUID,
        spec: BackfillRequest,
        owner: str | None,
        *,
        by: str | None = None,
    ) -> BackfillPlan:
        """Queue one run per past due time in ``[start, end)`` that has not run: no row yet, or
        a row that accounts for a due time that did not run (missed, paused, coalesced,
        overlap), which the new run replaces. Due times that ran, are running, or were skipped
        on purpose (``occurrence_skipped``) are left alone, so backfilling a range twice runs
        nothing twice. One at a time, oldest first, unless ``overlap`` is ``allow``. With
        ``dry_run`` nothing is written."""
        now = self.clock()
        start, end = _backfill_range(spec, now)
        async with self.db.session(write=not spec.dry_run) as session:
            schedule = await load_schedule(session, schedule_id, owner, lock=not spec.dry_run)
            trigger = triggers.trigger_from_dict(schedule.trigger)
            due_times = _due_times_between(trigger, start, end)
            existing = {
                run.due_at: run
                for run in await session.scalars(
                    select(Run).where(
                        Run.schedule_id == schedule.id, Run.due_at >= start, Run.due_at < end
                    )
                )
            }
            redo = [
                run
                for run in existing.values()
                if run.status == "skipped" and run.reason in REDOABLE
            ]
            wanted = sorted(
                [due for due in due_times if due not in existing]
                + [run.due_at for run in redo if run.due_at is not None]
            )
            plan = BackfillPlan(
                due_times=wanted, kept=len(due_times) - len(wanted), overlap=spec.overlap
            )
            if spec.dry_run or not wanted:
                return plan
            await _trim_summaries(self.db, session, schedule, trigger, start, end, redo)
            for run in redo:
                await session.delete(run)
            await session.flush()
            busy = bool(await session.scalar(queue_under_way(schedule.id)))
            rows = queued_rows(
                schedule,
                wanted,
                "backfill",
                now,
                by=by,
                one_at_a_time=spec.overlap == "buffer_all",
                head_free=not busy,
            )
            await session.execute(q.insert_runs(self.db.capabilities.dialect), rows)
            await self._announce(session)
        self._changed()
        return plan

    async def skip_occurrence(
        self, schedule_id: str | uuid.UUID, due_at: str, owner: str | None, by: str | None = None
    ) -> Run:
        """Skip one upcoming due time: its row is written now, ``skipped`` with reason
        ``occurrence_skipped``, and the claim's ON CONFLICT DO NOTHING then never runs it.
        Idempotent; ``Conflict`` if that due time already has a run of another kind."""
        now = self.clock()
        async with self.db.session() as session:
            schedule = await load_schedule(session, schedule_id, owner)
            due = _upcoming_due_time(schedule, due_at, now)
            row = gap_rows(schedule, Gap([due]), "occurrence_skipped", now)[0]
            row["started_by"] = by
            await session.execute(q.insert_runs(self.db.capabilities.dialect), [row])
            run = await session.scalar(
                select(Run).where(Run.schedule_id == schedule.id, Run.due_at == due)
            )
            assert run is not None
            if (run.status, run.reason) != ("skipped", "occurrence_skipped"):
                raise Conflict(f"the due time {due.isoformat()} already has a {run.status} run")
        return run

    async def unskip_occurrence(
        self, schedule_id: str | uuid.UUID, due_at: str, owner: str | None
    ) -> bool:
        """Undo ``skip_occurrence`` while the due time is still ahead; False when it was not
        skipped (nothing to undo)."""
        now = self.clock()
        async with self.db.session() as session:
            schedule = await load_schedule(session, schedule_id, owner)
            due = _upcoming_due_time(schedule, due_at, now)
            result = await session.execute(
                delete(Run).where(
                    Run.schedule_id == schedule.id,
                    Run.due_at == due,
                    Run.status == "skipped",
                    Run.reason == "occurrence_skipped",
                )
            )
            undone = bool(getattr(result, "rowcount", 0))
        return undone

    async def delete(self, schedule_id: str | uuid.UUID, owner: str | None) -> None:
        """Delete a schedule: it stops at once and its pending and running runs are cancelled.

        The row is kept (marked deleted) so its runs stay readable by run id.
        """
        now = self.clock()
        async with self.db.session() as session:
            schedule = await load_schedule(session, schedule_id, owner, lock=True)
            schedule.deleted_at = now
            schedule.enabled = False
            schedule.next_run = None
            schedule.updated_at = now
            await session.execute(
                update(Run)
                .where(Run.schedule_id == schedule.id, Run.status == "pending")
                .values(status="cancelled", reason="schedule_deleted", finished_at=now)
            )
            await session.execute(
                update(Run)
                .where(Run.schedule_id == schedule.id, Run.status == "running")
                .values(cancel_requested=True)
            )
            await self._announce(session)
        self._changed()


RESUME_ALL_CAP = 100  # due times catch-up ``all`` queues at most; more is a backfill's job
MAX_BACKFILL = 1000  # due times one backfill request may queue
# Rows that say a due time did not run, which a backfill may replace with a run.
REDOABLE = ("missed", "paused", "coalesced", "overlap")


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
        due_times = _due_times_between(trigger, since, now, cap=RESUME_ALL_CAP, field="catchup")
        return ResumePlan(catchup, due_times, Gap([]))
    return ResumePlan(catchup, [], find_gap(trigger, since, now))


@dataclass(frozen=True)
class BackfillPlan:
    """The due times a backfill queues (or would), and how many in its range it kept."""

    due_times: list[datetime]
    kept: int
    overlap: str


def _due_times_between(
    trigger: triggers.Trigger,
    start: datetime,
    end: datetime,
    *,
    cap: int = MAX_BACKFILL,
    field: str = "end",
) -> list[datetime]:
    """Every due time in ``[start, end)``; ``InvalidSchedule`` naming ``field`` past ``cap``."""
    found: list[datetime] = []
    due = triggers.next_fire(trigger, start - timedelta(microseconds=1))
    while due is not None and due.astimezone(UTC) < end:
        if len(found) == cap:
            raise InvalidSchedule(
                f"more than {cap} due times in that range; ask for a shorter one", field=field
            )
        found.append(due.astimezone(UTC))
        due = triggers.next_fire(trigger, due)
    return found


def _backfill_range(spec: BackfillRequest, now: datetime) -> tuple[datetime, datetime]:
    start = _instant(spec.start, "start")
    end = _instant(spec.end, "end")
    if end <= start:
        raise InvalidSchedule("end must be after start", field="end")
    if end > now:
        raise InvalidSchedule(
            "end must not be in the future: upcoming due times run on the timetable", field="end"
        )
    return start, end


async def _trim_summaries(
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
    before = await session.scalars(
        select(Run).where(
            Run.schedule_id == schedule.id,
            Run.due_at < start,
            Run.covers_until >= start,
            Run.status == "skipped",
        )
    )
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
                await session.execute(q.insert_runs(db.capabilities.dialect), rows)


def _instant(value: str, field: str, *, min_year: int = 1) -> datetime:
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


def _upcoming_due_time(schedule: Schedule, due_at: str, now: datetime) -> datetime:
    """``due_at`` parsed, checked to be a due time of ``schedule`` and still ahead."""
    due = _instant(due_at, "due_at")
    if due <= now:
        raise InvalidSchedule("due_at has passed: only an upcoming due time", field="due_at")
    trigger = triggers.trigger_from_dict(schedule.trigger)
    found = triggers.next_fire(trigger, due - timedelta(microseconds=1))
    if found is None or found.astimezone(UTC) != due:
        following = "none" if found is None else found.isoformat()
        raise InvalidSchedule(
            f"{due_at} is not a due time of this schedule (the next one from there: {following})",
            field="due_at",
        )
    return due


def check_preview_after(after: str | None) -> datetime | None:
    """Parse the optional ``after`` of a preview request (must carry an offset)."""
    if after is None:
        return None
    # Due times are searched in local time on either side of `after`: keep a year of margin
    # from the start of representable time (the end is handled: no due time is found).
    return _instant(after, "after", min_year=2)
