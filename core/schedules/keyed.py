"""Schedules by the host's own key: apply (create or replace), read, delete and reconcile.

A host that owns its records (a deployment, an agent) keeps one schedule per record under its
own key, unique per owner among live schedules (``ux_schedules_owner_key``), so it never
stores our ids and can hand us its whole table at start (``reconcile``).

Apply is a full replace (PUT): every field comes from the record, with the defaults of
``ScheduleCreate`` for those it leaves out. Fields equal to the stored ones are not touched,
so re-applying an unchanged record moves nothing (its ``next_run`` included). Every check runs
before anything is written: an invalid record leaves the stored definition in force.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from pydantic import ValidationError
from sqlalchemy import Select, func, select

from agentcron.core.errors import Conflict, InvalidSchedule, NotFound, ScheduleCapacityExceeded
from agentcron.core.schedules.service import ScheduleCrud
from agentcron.core.secrets import check_references
from agentcron.core.specs import ScheduleCreate, ScheduleUpdate
from agentcron.core.storage import Schedule

KEY = re.compile(r"[A-Za-z0-9._:@+=~-]{1,200}")
KEY_RULE = "1 to 200 letters, digits or . _ : @ + = ~ -"

Record = ScheduleCreate | Mapping[str, Any]


@dataclass(frozen=True)
class Applied:
    """What ``apply`` did: the schedule as stored, and whether it was created (else replaced)."""

    schedule: Schedule
    created: bool


@dataclass(frozen=True)
class Reconciled:
    """What ``reconcile`` did, by key."""

    created: list[str] = field(default_factory=list)
    replaced: list[str] = field(default_factory=list)
    deleted: list[str] = field(default_factory=list)


def check_key(key: str) -> str:
    """The key as given, or ``InvalidSchedule`` (field ``key``)."""
    if not isinstance(key, str) or not KEY.fullmatch(key):
        raise InvalidSchedule(f"key {key!r} is not valid: {KEY_RULE}", field="key")
    return key


def as_spec(record: Record) -> ScheduleCreate:
    """A record as a validated ``ScheduleCreate``; a bad one is ``InvalidSchedule`` naming the
    first field pydantic refused."""
    if isinstance(record, ScheduleCreate):
        return record
    try:
        return ScheduleCreate.model_validate(dict(record))
    except ValidationError as exc:
        error = exc.errors()[0]
        name = ".".join(str(part) for part in error["loc"]) or None
        raise InvalidSchedule(f"{name or 'record'}: {error['msg']}", field=name) from None


class ScheduleService(ScheduleCrud):
    """Schedule CRUD, the timetable verbs, and the verbs by the host's key."""

    async def get_by_key(self, owner: str, key: str) -> Schedule:
        """The live schedule ``owner`` keeps under ``key``, or ``NotFound``."""
        check_key(key)
        async with self.db.session(write=False) as session:
            found = await session.scalar(self._by_key(owner, key))
        if found is None:
            raise NotFound("schedule with key", key)
        return found

    async def apply(self, owner: str, key: str, record: Record, *, trusted: bool = True) -> Applied:
        """Create the schedule ``owner`` keeps under ``key``, or replace every field of it
        (same id, so the same run history). Raises what ``create`` and ``update`` raise, and
        ``InvalidSchedule`` for a bad key; nothing is written then."""
        check_key(key)
        spec = as_spec(record)
        existing = await self._find(owner, key)
        if existing is None:
            try:
                return Applied(await self.create(spec, owner, trusted=trusted, key=key), True)
            except Conflict:
                # Another apply of the same key created it first: replace that one.
                existing = await self._find(owner, key)
                if existing is None:
                    raise
        values = self.prepare(spec, trusted=trusted).values
        changes = {name: new for name, new in values.items() if getattr(existing, name) != new}
        patch = ScheduleUpdate.model_validate(changes)
        schedule = await self.update(existing.id, patch, owner, trusted=trusted)
        return Applied(schedule, False)

    async def delete_by_key(self, owner: str, key: str) -> None:
        """Delete the schedule ``owner`` keeps under ``key`` (as ``delete``), or ``NotFound``."""
        schedule = await self.get_by_key(owner, key)
        await self.delete(schedule.id, owner)

    async def reconcile(
        self,
        owner: str,
        records: Mapping[str, Record],
        *,
        scope: str = "",
        trusted: bool = True,
    ) -> Reconciled:
        """Make ``owner``'s keyed schedules whose key starts with ``scope`` exactly
        ``records``: apply each (a disabled record is kept paused), and delete those no
        record names. Schedules without a key, or outside ``scope``, are never touched.

        Every record is checked first, the secrets it names and the active-schedule limit
        included: one bad record is ``InvalidSchedule`` naming its key and field, and none
        is applied."""
        specs: dict[str, ScheduleCreate] = {}
        async with self.db.session(write=False) as session:
            for key, record in records.items():
                try:
                    check_key(key)
                    if not key.startswith(scope):
                        raise InvalidSchedule(f"key is outside the scope {scope!r}", field="key")
                    specs[key] = as_spec(record)
                    values = self.prepare(specs[key], trusted=trusted).values
                    await check_references(session, owner, values["runner"], values["notify"])
                except InvalidSchedule as exc:
                    where = f"records.{key}" + (f".{exc.field}" if exc.field else "")
                    raise InvalidSchedule(f"record {key!r}: {exc.message}", field=where) from None
            stored = list(
                (
                    await session.scalars(
                        select(Schedule).where(
                            Schedule.owner == owner,
                            Schedule.key.is_not(None),
                            Schedule.deleted_at.is_(None),
                        )
                    )
                ).all()
            )
        await self._check_reconciled_capacity(stored, specs, scope)
        done = Reconciled()
        for key, spec in specs.items():
            applied = await self.apply(owner, key, spec, trusted=trusted)
            (done.created if applied.created else done.replaced).append(key)
        for schedule in stored:
            key = schedule.key or ""
            if key.startswith(scope) and key not in specs:
                await self.delete(schedule.id, owner)
                done.deleted.append(key)
        return done

    async def _check_reconciled_capacity(
        self, stored: list[Schedule], specs: Mapping[str, ScheduleCreate], scope: str
    ) -> None:
        """Refuse, before anything is applied, a reconcile that would end above the
        active-schedule limit (applying record after record would stop half-way)."""
        mine = sum(1 for s in stored if s.enabled and (s.key or "").startswith(scope))
        async with self.db.session(write=False) as session:
            active = await session.scalar(
                select(func.count())
                .select_from(Schedule)
                .where(Schedule.enabled.is_(True), Schedule.deleted_at.is_(None))
            )
        after = (active or 0) - mine + sum(1 for spec in specs.values() if spec.enabled)
        if after > self.max_active:
            raise ScheduleCapacityExceeded(
                f"at most {self.max_active} active schedules (AGENTCRON_MAX_ACTIVE_SCHEDULES);"
                f" these records would make {after}"
            )

    def _by_key(self, owner: str, key: str) -> Select[Schedule]:
        return select(Schedule).where(
            Schedule.owner == owner, Schedule.key == key, Schedule.deleted_at.is_(None)
        )

    async def _find(self, owner: str, key: str) -> Schedule | None:
        async with self.db.session(write=False) as session:
            return await session.scalar(self._by_key(owner, key))
