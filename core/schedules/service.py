"""Schedule CRUD: create, read, list, update, delete (with the timetable verbs mixed in)."""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import Any

from sqlalchemy import or_, select, update

from agentcron.core import triggers
from agentcron.core.notify import keep_masked_secrets, validate_channels
from agentcron.core.pagination import Page, check_limit, decode_cursor, encode_cursor
from agentcron.core.runners import validate_runner
from agentcron.core.schedules.plans import (
    exhausted,
    next_run_after,
    safe_warnings,
)
from agentcron.core.schedules.timetable import TimetableVerbs
from agentcron.core.schedules.views import load_schedule
from agentcron.core.secrets import check_references
from agentcron.core.specs import (
    SETTINGS,
    ScheduleCreate,
    ScheduleUpdate,
    reject_nul,
    reject_oversized,
)
from agentcron.core.states import RunReason
from agentcron.core.storage import Run, Schedule
from agentcron.core.storage import queries as q
from agentcron.core.transitions import cancelled
from agentcron.core.triggers.kinds import Trigger

# Fields whose change makes an update recompute the schedule's warnings.
WARNING_INPUTS = frozenset({"trigger", "timeout_seconds", "overlap", "runner", "notify"})


@dataclass(frozen=True)
class Prepared:
    """A spec that passed every check needing no database: the row's settings, and the
    parsed trigger they came from."""

    values: dict[str, Any]
    trigger: Trigger


class ScheduleCrud(TimetableVerbs):
    """Schedule CRUD over one database.

    ``owner=None`` means an administrator (sees everything); otherwise a schedule of another
    owner is ``NotFound``, never "forbidden". ``on_change`` is called after every committed
    change to a timetable so the local loop can re-plan its sleep; on PostgreSQL the same
    transaction also sends a NOTIFY on ``agentcron_schedules`` for other replicas.
    """

    def prepare(self, spec: ScheduleCreate, *, trusted: bool = True) -> Prepared:
        """Every check ``create`` makes that needs no database, and the row's settings in their
        validated forms (the spec's fields, each declared once in ``ScheduleCreate``). Raises
        ``InvalidSchedule`` naming the field."""
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
        values = {name: getattr(spec, name) for name in SETTINGS}
        values.update(
            trigger=triggers.trigger_to_dict(trigger),
            overlap=spec.overlap or ("skip" if spec.mode == "persistent" else "allow"),
            runner=runner,
            notify=notify,
        )
        return Prepared(values, trigger)

    async def create(
        self, spec: ScheduleCreate, owner: str, *, trusted: bool = True, key: str | None = None
    ) -> Schedule:
        """Validate ``spec`` and store a new schedule with its first ``next_run`` and its
        warnings (``core.triggers.warnings``: things worth knowing, never a reason to refuse).
        ``trusted`` false applies the tenant rules of the execution policy (``core.policy``).
        ``key``: the host's own key for it (``apply`` sets it; unique per owner).

        Raises ``InvalidSchedule`` (naming the field) for bad input, a reference to a secret
        ``owner`` has not stored included, and ``ScheduleCapacityExceeded`` when the
        active-schedule limit is reached; nothing is written in either case.
        """
        now = self.clock()
        prepared = self.prepare(spec, trusted=trusted)
        values, trigger = prepared.values, prepared.trigger
        schedule_id = uuid.uuid4()
        warnings = safe_warnings(
            trigger,
            values["overlap"],
            spec.timeout_seconds,
            now,
            runner=values["runner"],
            workdir=self._workdir(owner, schedule_id),
            notify=values["notify"],
        )
        schedule = Schedule(
            **values,
            id=schedule_id,
            owner=owner,
            key=key,
            scheduled_runs=0,
            warnings=warnings,
            next_run=next_run_after(trigger, now) if spec.enabled else None,
            paused_at=None if spec.enabled else now,
            consecutive_failures=0,
            created_at=now,
            updated_at=now,
        )
        async with self.db.session() as session:
            # Every secret the configs refer to must be one the owner has stored.
            await check_references(session, owner, values["runner"], values["notify"])
            if spec.enabled:
                await self._check_capacity(session)
            session.add(schedule)
            await self._announce(session)
        self._changed()
        return schedule

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
        and the warnings if the trigger, ``timeout_seconds``, ``overlap``, the runner or the
        notify channels did.
        ``trusted`` false checks a changed runner or notify list against the tenant rules."""
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
                schedule.warnings = safe_warnings(
                    triggers.trigger_from_dict(schedule.trigger),
                    schedule.overlap,
                    schedule.timeout_seconds,
                    now,
                    runner=schedule.runner,
                    workdir=self._workdir(schedule.owner, schedule.id),
                    notify=schedule.notify,
                )
            if timetable_changed:
                schedule.next_run = (
                    next_run_after(triggers.trigger_from_dict(schedule.trigger), now)
                    if schedule.enabled and not exhausted(schedule)
                    else None
                )
            schedule.updated_at = now
            await self._announce(session)
        self._changed()
        return schedule

    async def delete(self, schedule_id: str | uuid.UUID, owner: str | None) -> None:
        """Delete a schedule: it stops at once and its pending and running runs are cancelled.

        The row is kept (marked deleted) so its runs stay readable by run id. Pending runs
        end ``cancelled`` now, or at their admission if one is under way this instant; a
        running run is asked to stop by its next lease renewal. The deletion holds the
        schedule's row, so it never waits for a run's (``queries.unheld_pending``).
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
                .where(q.unheld_pending(schedule.id))
                .values(**cancelled(now, RunReason.SCHEDULE_DELETED))
            )
            await self._announce(session)
        self._changed()
