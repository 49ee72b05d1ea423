"""``ScheduleService``: every schedule verb over one database, for the API, the dashboard,
MCP, the CLI and a host (``engine.schedules``).

Why this shape: the verbs fall into three concepts, each a class of its own file that a reader
finds by what it does: ``ScheduleCrud`` (``crud``: create, get, list, update, delete),
``TimetableVerbs`` (``timetable``: pause, resume, backfill, skip) and ``KeyedVerbs`` (``keyed``:
apply, reconcile, get and delete by key). What they share is data, not behaviour, so it is one
object they are each given (``ScheduleContext``) rather than a base class; and the only verbs
one part needs of another (the keyed verbs write with CRUD's steps; CRUD accounts for a pause
as resume does) are passed or called by name. This class composes the three and offers their
verbs as its own, so a caller holds one service and never needs to know which part a verb is
of; each verb's contract is the docstring of the method it is.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from agentcron.core.clock import Clock, utcnow
from agentcron.core.policy import ExecutionPolicy
from agentcron.core.policy import current as current_policy
from agentcron.core.schedules.context import ScheduleContext
from agentcron.core.schedules.crud import ScheduleCrud
from agentcron.core.schedules.keyed import KeyedVerbs
from agentcron.core.schedules.timetable import TimetableVerbs
from agentcron.core.storage.database import Database

# Fields whose change makes an update recompute the schedule's warnings, and its next_run.
WARNING_INPUTS = frozenset({"trigger", "timeout_seconds", "overlap", "runner", "notify"})
TIMETABLE_INPUTS = frozenset({"trigger", "enabled", "max_runs"})
Warnings = list[dict[str, str]]


class ScheduleService:
    """Schedule CRUD, the timetable verbs, and the verbs by the host's key, over one database.

    ``owner=None`` in a verb means an administrator (sees everything); otherwise a schedule of
    another owner is ``NotFound``, never "forbidden". ``max_active`` bounds the active
    (enabled, undeleted) schedules of every owner together. ``on_change`` is called after
    every committed change to a timetable so the local loop can re-plan its sleep; on
    PostgreSQL the same transaction also sends a NOTIFY on ``agentcron_schedules`` for other
    replicas. ``allow_private``: notify targets may be on loopback or private networks.
    ``policy``: what tenants may run (default: the configured one). ``data_dir``: where runs
    start, so a save can warn of a relative program path that is not there. The settings are
    ``context``'s, read by every verb when it runs: changing one there changes them all.
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
        data_dir: Path | None = None,
    ) -> None:
        self.context = context = ScheduleContext(
            db=db,
            clock=clock,
            policy=policy or current_policy(),
            max_active=max_active,
            allow_private=allow_private,
            data_dir=data_dir,
            on_change=on_change,
        )
        crud = ScheduleCrud(context)
        self.create = crud.create
        self.get = crud.get
        self.list = crud.list
        self.update = crud.update
        self.delete = crud.delete
        timetable = TimetableVerbs(context)
        self.pause = timetable.pause
        self.resume = timetable.resume
        self.plan_resume = timetable.plan_resume
        self.backfill = timetable.backfill
        self.skip_occurrence = timetable.skip_occurrence
        self.unskip_occurrence = timetable.unskip_occurrence
        keyed = KeyedVerbs(context, crud)
        self.get_by_key = keyed.get_by_key
        self.apply = keyed.apply
        self.delete_by_key = keyed.delete_by_key
        self.reconcile = keyed.reconcile
