"""Schedules by the host's own key: apply (create or replace), read, delete and reconcile.

A host that owns its records (a deployment, an agent) keeps one schedule per record under its
own key, unique per owner among live schedules (``ux_schedules_owner_key``), so it never
stores our ids and can hand us its whole table at start (``reconcile``).

Apply is a full replace (PUT): every field comes from the record, with the defaults of
``ScheduleCreate`` for those it leaves out. Fields equal to the stored ones are not touched,
so re-applying an unchanged record moves nothing (its ``next_run`` included). Every check runs
before anything is written: an invalid record leaves the stored definition in force.

Each verb that writes by key is one transaction that first takes its turn at the
active-schedule limit (``CAPACITY_LOCK``), so what it reads of the owner's keys includes what
every writer before it added: replicas applying or reconciling at once never add one key twice
nor, together, pass the limit.
"""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, TypeVar

from pydantic import ValidationError
from sqlalchemy import Select, func, select
from sqlalchemy.ext.asyncio import AsyncSession

from agentcron.core.errors import InvalidSchedule, NotFound
from agentcron.core.schedules.service import Prepared, ScheduleCrud
from agentcron.core.secrets.references import check_references
from agentcron.core.specs import ScheduleCreate
from agentcron.core.storage.models import Schedule

KEY = re.compile(r"[A-Za-z0-9._:@+=~-]{1,200}")
KEY_RULE = "1 to 200 letters, digits or . _ : @ + = ~ -"

Record = ScheduleCreate | Mapping[str, Any]
T = TypeVar("T")


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
        (same id, so the same run history), in one transaction that holds the schedule's row.
        Raises what ``create`` and ``update`` raise, and ``InvalidSchedule`` for a bad key;
        nothing is written then."""
        check_key(key)
        spec = as_spec(record)

        async def put(session: AsyncSession) -> tuple[Applied, bool]:
            existing = await session.scalar(self._by_key(owner, key).with_for_update())
            stored = None if existing is None else existing.trigger
            prepared = self.prepare(spec, trusted=trusted, stored=stored)
            values = prepared.values
            if existing is not None:
                # Every field given: those equal to the stored ones, _replace leaves alone.
                changed = await self._replace(session, existing, values, trusted=trusted)
                return Applied(existing, False), changed
            await check_references(session, owner, values["runner"], values["notify"])
            return Applied(await self._insert(session, prepared, owner, key), True), True

        return await self._write_keyed(put)

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

        One transaction: every record is checked first, the secrets it names included, and
        one bad record is ``InvalidSchedule`` naming its key and field; the active-schedule
        limit judges where the reconcile ends, not each step on the way. Whatever is refused,
        none of it is applied, however many replicas write at once."""
        specs = {key: _record_spec(key, record, scope) for key, record in records.items()}

        async def write(session: AsyncSession) -> tuple[Reconciled, bool]:
            found = await session.scalars(
                select(Schedule)
                .where(
                    Schedule.owner == owner,
                    Schedule.key.is_not(None),
                    Schedule.deleted_at.is_(None),
                    func.substr(Schedule.key, 1, len(scope)) == scope,
                )
                .order_by(Schedule.id)
                .with_for_update()
            )
            stored = {schedule.key or "": schedule for schedule in found}
            prepared: dict[str, Prepared] = {}
            for key, spec in specs.items():
                try:
                    existing = stored.get(key)
                    trigger = None if existing is None else existing.trigger
                    prepared[key] = self.prepare(spec, trusted=trusted, stored=trigger)
                    values = prepared[key].values
                    await check_references(session, owner, values["runner"], values["notify"])
                except InvalidSchedule as exc:
                    raise _record_error(key, exc) from None
            done = Reconciled(
                created=[key for key in specs if key not in stored],
                replaced=[key for key in specs if key in stored],
                deleted=[key for key in stored if key not in specs],
            )
            for key in done.deleted:
                await self._remove(session, stored[key])
            changed = bool(done.deleted or done.created)
            # The records kept paused first, so the limit counts what they free before what
            # the others take.
            for key in sorted(specs, key=lambda key: specs[key].enabled):
                if key in stored:
                    values = prepared[key].values
                    changed |= await self._replace(session, stored[key], values, trusted=trusted)
                else:
                    await self._insert(session, prepared[key], owner, key)
            return done, changed

        return await self._write_keyed(write)

    async def _write_keyed(self, write: Callable[[AsyncSession], Awaitable[tuple[T, bool]]]) -> T:
        """Run ``write`` (what it did, and whether it changed anything) in one write
        transaction that first takes its turn at the limit (``CAPACITY_LOCK``): what it then
        reads of the owner's keys includes every key added by a keyed write before it, so two
        writers never add one key twice."""
        async with self.db.session() as session:
            await self._hold_capacity(session)
            done, changed = await write(session)
            if changed:
                await self._announce(session)
        if changed:
            self._changed()
        return done

    def _by_key(self, owner: str, key: str) -> Select[Schedule]:
        return select(Schedule).where(
            Schedule.owner == owner, Schedule.key == key, Schedule.deleted_at.is_(None)
        )


def _record_spec(key: str, record: Record, scope: str) -> ScheduleCreate:
    """A reconciled record as a spec, its key checked and in ``scope``; or ``InvalidSchedule``
    naming the key and the field (``records.<key>.<field>``)."""
    try:
        check_key(key)
        if not key.startswith(scope):
            raise InvalidSchedule(f"key is outside the scope {scope!r}", field="key")
        return as_spec(record)
    except InvalidSchedule as exc:
        raise _record_error(key, exc) from None


def _record_error(key: str, exc: InvalidSchedule) -> InvalidSchedule:
    where = f"records.{key}" + (f".{exc.field}" if exc.field else "")
    return InvalidSchedule(f"record {key!r}: {exc.message}", field=where)
