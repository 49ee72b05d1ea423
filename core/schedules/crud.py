"""Schedule CRUD: create, read, list, update, delete.

``ScheduleCrud`` is one of the three parts ``ScheduleService`` offers the verbs of. Besides the
verbs it has the steps they take inside a transaction (``prepare``, ``insert``, ``replace``,
``remove``), which the verbs by key (``core.schedules.keyed``) compose into theirs.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy.ext.asyncio import AsyncSession

from agentcron.core import triggers
from agentcron.core.expectations import validate_expectations
from agentcron.core.notify import keep_masked_secrets, validate_channels
from agentcron.core.pagination import Page, check_limit, decode_cursor, encode_cursor
from agentcron.core.runners import validate_runner
from agentcron.core.schedules.context import ScheduleContext
from agentcron.core.schedules.plans import exhausted, next_run_after, safe_warnings
from agentcron.core.schedules.timetable import account_pause
from agentcron.core.schedules.views import load_schedule
from agentcron.core.secrets.references import check_references
from agentcron.core.specs import (
    SETTINGS,
    ScheduleCreate,
    ScheduleUpdate,
    reject_nul,
    reject_oversized,
)
from agentcron.core.storage.models import Schedule
from agentcron.core.storage.sql.runs import end_deleted_pending
from agentcron.core.storage.sql.schedules import schedules_page
from agentcron.core.triggers.kinds import Trigger

# Fields whose change makes an update recompute the schedule's warnings, and its next_run.
WARNING_INPUTS = frozenset({"trigger", "timeout_seconds", "overlap", "runner", "notify"})
TIMETABLE_INPUTS = frozenset({"trigger", "enabled", "max_runs"})
Warnings = list[dict[str, str]]


def checked(value: Any, field: str) -> Any:
    """``value`` (a trigger, runner or notify configuration), once it holds no NUL and is not
    oversized; else ``InvalidSchedule`` naming ``field``."""
    reject_nul(value, field)
    reject_oversized(value, field)
    return value


@dataclass(frozen=True)
class Prepared:
    """A spec that passed every check needing no database: the row's settings, and the
    parsed trigger they came from."""

    values: dict[str, Any]
    trigger: Trigger


class ScheduleCrud:
    """Schedule CRUD over the shared ``ScheduleContext``.

    ``owner=None`` means an administrator (sees everything); otherwise a schedule of another
    owner is ``NotFound``, never "forbidden".
    """

    def __init__(self, context: ScheduleContext) -> None:
        self.context = context

    def prepare(
        self,
        spec: ScheduleCreate,
        *,
        trusted: bool = True,
        stored: Mapping[str, Any] | None = None,
    ) -> Prepared:
        """Every check ``create`` makes that needs no database, and the row's settings in their
        validated forms (the spec's fields, each declared once in ``ScheduleCreate``). Raises
        ``InvalidSchedule`` naming the field. ``stored``: the stored trigger of the schedule
        the spec replaces; a spec that states it again (``triggers.restated``) keeps it as it
        is, and is not judged against now as a new trigger is."""
        checked(spec.trigger, "trigger")
        same = None if stored is None else triggers.restated(spec.trigger, stored)
        trigger = same or triggers.parse_trigger(spec.trigger, self.context.clock())
        runner = validate_runner(checked(spec.runner, "runner"))
        notify = validate_channels(
            checked(spec.notify, "notify"), allow_private=self.context.allow_private
        )
        if not trusted:
            runner = self.context.policy.check_tenant(runner, notify) or runner
        values = {name: getattr(spec, name) for name in SETTINGS}
        values.update(
            expect=validate_expectations(checked(spec.expect, "expect")),
            trigger=triggers.trigger_to_dict(trigger),
            overlap=spec.overlap or ("skip" if spec.mode == "persistent" else "allow"),
            runner=runner,
            notify=notify,
        )
        return Prepared(values, trigger)

    async def create(self, spec: ScheduleCreate, owner: str, *, trusted: bool = True) -> Schedule:
        """Validate ``spec`` and store a new schedule with its first ``next_run`` and its
        warnings (``core.triggers.warnings``: things worth knowing, never a reason to refuse).
        ``trusted`` false applies the tenant rules of the execution policy (``core.policy``).
        A schedule under the host's own key is made by ``apply``.

        Raises ``InvalidSchedule`` (naming the field) for bad input, a reference to a secret
        ``owner`` has not stored included, and ``ScheduleCapacityExceeded`` when the
        active-schedule limit is reached; nothing is written in either case.
        """
        prepared = self.prepare(spec, trusted=trusted)
        values = prepared.values
        async with self.context.db.session() as session:
            # Every secret the configs refer to must be one the owner has stored.
            await check_references(session, owner, values["runner"], values["notify"])
            schedule = await self.insert(session, prepared, owner, None)
            await self.context.announce(session)
        self.context.changed()
        return schedule

    async def insert(
        self, session: AsyncSession, prepared: Prepared, owner: str, key: str | None
    ) -> Schedule:
        """Add the schedule ``prepared`` describes to ``session``, once the active-schedule
        limit allows it if it is enabled (the caller checks the secrets it names)."""
        now = self.context.clock()
        values, trigger = prepared.values, prepared.trigger
        schedule_id = uuid.uuid4()
        warnings = safe_warnings(
            trigger,
            values["overlap"],
            values["timeout_seconds"],
            now,
            runner=values["runner"],
            workdir=self.context.workdir(owner, schedule_id),
            notify=values["notify"],
        )
        enabled = values["enabled"]
        schedule = Schedule(
            **values,
            id=schedule_id,
            owner=owner,
            key=key,
            scheduled_runs=0,
            warnings=warnings,
            next_run=next_run_after(trigger, now) if enabled else None,
            paused_at=None if enabled else now,
            consecutive_failures=0,
            created_at=now,
            updated_at=now,
        )
        if enabled:
            await self.context.check_capacity(session)
        session.add(schedule)
        self.context.make_workdir(owner, schedule_id)
        return schedule

    async def get(self, schedule_id: str | uuid.UUID, owner: str | None) -> Schedule:
        """The schedule, or ``NotFound``."""
        async with self.context.db.session(write=False) as session:
            return await load_schedule(session, schedule_id, owner)

    async def list(
        self, owner: str | None, limit: int = 50, cursor: str | None = None
    ) -> Page[Schedule]:
        """Schedules newest created first (ties by id), ``limit`` per page."""
        check_limit(limit)
        after = None if cursor is None else decode_cursor(cursor)
        async with self.context.db.session(write=False) as session:
            rows = list(await session.scalars(schedules_page(owner, after, limit + 1)))
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
        A field named with the value it has is no change: an update that changes nothing
        writes nothing, ``updated_at`` included. ``trusted`` false checks a changed runner or
        notify list against the tenant rules."""
        changes = patch.changes()
        async with self.context.db.session() as session:
            if changes.get("enabled"):
                await self.context.hold_capacity(session)  # before the row (CAPACITY_LOCK)
            schedule = await load_schedule(session, schedule_id, owner, lock=True)
            if not await self.replace(session, schedule, changes, trusted=trusted):
                return schedule
            await self.context.announce(session)
        self.context.changed()
        return schedule

    async def replace(
        self,
        session: AsyncSession,
        schedule: Schedule,
        changes: dict[str, Any],
        *,
        trusted: bool,
    ) -> bool:
        """Write onto the row-locked ``schedule`` the ``changes`` (validated here) that differ
        from what it holds, as ``update`` says; whether there were any."""
        now = self.context.clock()
        changes = dict(changes)
        if "trigger" in changes:
            checked(changes["trigger"], "trigger")
            if triggers.restated(changes["trigger"], schedule.trigger) is not None:
                del changes["trigger"]  # the stored one again: kept as it is, due times too
            else:
                trigger = triggers.parse_trigger(changes["trigger"], now)
                changes["trigger"] = triggers.trigger_to_dict(trigger)
        if "runner" in changes:
            changes["runner"] = validate_runner(checked(changes["runner"], "runner"))
            if not trusted:
                changes["runner"] = self.context.policy.check_tenant(changes["runner"], None)
        if "expect" in changes:
            changes["expect"] = validate_expectations(checked(changes["expect"], "expect"))
        if "notify" in changes:
            merged = keep_masked_secrets(checked(changes["notify"], "notify"), schedule.notify)
            changes["notify"] = validate_channels(merged, allow_private=self.context.allow_private)
            if not trusted:
                self.context.policy.check_tenant(None, changes["notify"])
        named = WARNING_INPUTS & changes.keys()
        changes = {name: new for name, new in changes.items() if getattr(schedule, name) != new}
        if named:
            # Warnings speak of the service's environment too (a variable set since, a command
            # installed): naming one of their inputs looks again, changed or not.
            warnings = self._warnings(schedule, changes, now)
            if warnings != schedule.warnings:
                changes["warnings"] = warnings
        if not changes:
            return False
        # The schedule's owner's secrets (an admin may edit another owner's schedule); only
        # what this update changes, so a rename never fails on a secret deleted since.
        await check_references(
            session, schedule.owner, changes.get("runner"), changes.get("notify")
        )
        if "enabled" in changes:
            if changes["enabled"]:
                await self.context.check_capacity(session)
                await account_pause(self.context.db, session, schedule, now)
                schedule.paused_at, schedule.paused_note = None, None
            else:
                schedule.paused_at = now
        for name, value in changes.items():
            setattr(schedule, name, value)
        if TIMETABLE_INPUTS & changes.keys():
            schedule.next_run = (
                next_run_after(triggers.trigger_from_dict(schedule.trigger), now)
                if schedule.enabled and not exhausted(schedule)
                else None
            )
        schedule.updated_at = now
        return True

    def _warnings(self, schedule: Schedule, changes: dict[str, Any], now: datetime) -> Warnings:
        """The warnings ``schedule`` would have with ``changes`` applied."""
        merged = {name: changes.get(name, getattr(schedule, name)) for name in WARNING_INPUTS}
        return safe_warnings(
            triggers.trigger_from_dict(merged["trigger"]),
            merged["overlap"],
            merged["timeout_seconds"],
            now,
            runner=merged["runner"],
            workdir=self.context.workdir(schedule.owner, schedule.id),
            notify=merged["notify"],
        )

    async def delete(self, schedule_id: str | uuid.UUID, owner: str | None) -> None:
        """Delete a schedule: it stops at once and its pending and running runs are cancelled.

        The row is kept (marked deleted) so its runs stay readable by run id. Pending runs
        end ``cancelled`` now, or at their admission if one is under way this instant; a
        running run is asked to stop by its next lease renewal. The deletion holds the
        schedule's row, so it never waits for a run's (``sql.runs.end_deleted_pending``).
        """
        async with self.context.db.session() as session:
            schedule = await load_schedule(session, schedule_id, owner, lock=True)
            await self.remove(session, schedule)
            await self.context.announce(session)
        self.context.changed()

    async def remove(self, session: AsyncSession, schedule: Schedule) -> None:
        """Delete the row-locked ``schedule``, as ``delete`` says."""
        now = self.context.clock()
        schedule.deleted_at = now
        schedule.enabled = False
        schedule.next_run = None
        schedule.updated_at = now
        await session.execute(end_deleted_pending(schedule.id, now))
