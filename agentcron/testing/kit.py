"""The contract suite's kit (``agentcron.testing``): a settable clock, firing due times,
the suite's records and views, and the verbs it drives on an engine.

The suite itself is ``agentcron.testing.contract.ProviderContract``.

A host that embeds agentcron (or wraps it in a provider of its own) subclasses
``ProviderContract`` in its tests and supplies two hooks:

- ``make_engine(store)``: an engine (or the host's provider) configured on ``store``, a fresh,
  empty database of the suite's; not started;
- ``fire_due_times(engine, key, start, end)``: fire every due time of the record ``key`` up to
  ``end`` the engine's own way, and return once their runs are over.

The verbs the suite drives (``start``, ``apply``, ``delete``, ``run_now``, ``replay``,
``list_runs``, ``settle``) default to ``agentcron.Engine``'s; a provider overrides them with
its own. For an engine, ``fire_due_times`` is ``fire_engine_due_times``: the engine runs on a
``SettableClock`` (``Engine(clock=...)``), which is moved to each due time in turn, and the
engine's own loop claims and runs it; nothing of the engine is replaced.

In one process the suite checks: the handler gets the run's context; a permanent failure is
not retried and other failures are, until the attempts run out; the run history is newest
first and its limit clamped; the saved payload comes back as given, an edit rewriting no run
that exists; a replay re-runs the saved input and points back to the run, and a replay of
another record's run is not found; a due time fired twice runs once; a deleted record runs no
more; a disabled record does not fire and is not run late; an invalid change leaves the
previous definition in force. Each test is sync and runs its own event loop, so any pytest
runs it. The multi-process guarantees (two replicas at one due time, a process that vanishes)
are for tests with several processes.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

from agentcron.core.clock import utcnow
from agentcron.core.errors import InvalidSchedule, NotFound, RunPermanentError
from agentcron.core.runners.handler import HandlerContext
from agentcron.core.states import ACTIVE
from agentcron.web.host import Engine

OWNER = "contract"  # the owner of the schedules the suite applies to an engine
HISTORY_LIMIT = 200  # list_runs clamps its limit to 1..HISTORY_LIMIT
POLL_SECONDS = 0.02


class SettableClock:
    """Real time, moved forward at will: the engine's clock while the suite fires due times.

    It only ever moves forward (a lease or a retry time never goes back), and between jumps
    it runs as the wall clock does, so the engine's waits and leases behave as in production.
    """

    def __init__(self) -> None:
        self.offset = timedelta(0)

    def __call__(self) -> datetime:
        return utcnow() + self.offset

    def jump_to(self, instant: datetime) -> None:
        """Move to ``instant``, if it is ahead."""
        ahead = instant - self()
        if ahead > timedelta(0):
            self.offset += ahead


@dataclass(frozen=True)
class Store:
    """Where ``make_engine`` keeps the engine's data: a fresh database of the suite's."""

    database_url: str
    data_dir: Path
    migrated: bool = False  # its schema is already at this version (else migrate at start)


@dataclass(frozen=True)
class Record:
    """A host's record, as the suite writes it: one schedule, by the host's key."""

    name: str
    prompt: str
    cron: str  # five fields
    timezone: str = "UTC"
    enabled: bool = True
    data: Mapping[str, Any] = field(default_factory=dict)  # the payload, saved as given


@dataclass(frozen=True)
class Call:
    """One call of the handler, as the suite saw it."""

    run_id: str
    key: str | None
    trigger: str  # schedule, manual, replay or backfill
    due_at: datetime | None
    prompt: str
    data: Mapping[str, Any]
    replay_of: str | None
    attempt: int


@dataclass(frozen=True)
class RunView:
    """One run of the history, as the suite reads it."""

    id: str
    trigger: str
    status: str
    due_at: datetime | None
    replay_of: str | None


HostHandler = Callable[[Call], Awaitable[None]]


async def until(
    check: Callable[[], Awaitable[Any]], what: str, within: float = 10.0, step: float = 0.0
) -> Any:
    """Poll ``check`` until it returns something true; ``AssertionError`` after ``within``."""
    deadline = time.monotonic() + within
    while True:
        value = await check()
        if value:
            return value
        if time.monotonic() >= deadline:
            raise AssertionError(f"{what}: not within {within} s (last: {value!r})")
        await asyncio.sleep(step or POLL_SECONDS)


def settable_clock(engine: Engine) -> SettableClock:
    clock = engine.clock
    if not isinstance(clock, SettableClock) or engine.loop is None:
        raise TypeError("fire due times on a started engine built with clock=SettableClock()")
    return clock


async def settle_engine(engine: Engine, owner: str, key: str, within: float = 10.0) -> None:
    """Wait until no run of ``owner``'s schedule ``key`` is pending or running. A retry waits
    for its time by the engine's clock, so the clock is moved to it."""
    clock = settable_clock(engine)
    schedule = await engine.schedules.get_by_key(owner, key)

    async def settled() -> bool:
        page = await engine.runs.list_runs(schedule.id, owner, limit=HISTORY_LIMIT)
        active = [run for run, _ in page.items if run.status in ACTIVE]
        waiting = [run.available_at for run in active if run.status == "pending"]
        if active and len(waiting) == len(active) and min(waiting) > clock():
            clock.jump_to(min(waiting))  # a retry's backoff, passed at once
            assert engine.loop is not None
            engine.loop.wake()
        return not active

    await until(settled, f"the runs of {key!r} to end", within)


async def fire_engine_due_times(
    engine: Engine, owner: str, key: str, start: datetime, end: datetime, within: float = 10.0
) -> None:
    """Move the engine's clock to each due time of ``owner``'s schedule ``key`` up to ``end``
    (its ``next_run``, as the engine planned it), let the engine's loop claim and run it, and
    wait for the runs; the clock is at ``end`` (or past it) afterwards. A due time fired
    already is not due again; a record that is disabled or deleted has none. ``start`` is
    the window's start: due times before it that have not fired yet fire too, as they would
    with time passing."""
    clock = settable_clock(engine)
    loop = engine.loop
    assert loop is not None
    while True:
        try:
            due = (await engine.schedules.get_by_key(owner, key)).next_run
        except NotFound:
            due = None  # deleted: nothing of it is due any more
        if due is None or due > end:
            break
        clock.jump_to(due)
        loop.wake()

        async def claimed(due: datetime = due) -> bool:
            return (await engine.schedules.get_by_key(owner, key)).next_run != due

        await until(claimed, f"the due time {due.isoformat()} of {key!r} to be claimed", within)
        await settle_engine(engine, owner, key, within)
    clock.jump_to(end)


def call_of(ctx: HandlerContext) -> Call:
    return Call(
        run_id=str(ctx.run_id),
        key=ctx.key,
        trigger=ctx.trigger,
        due_at=ctx.due_at,
        prompt=ctx.prompt,
        data=ctx.data,
        replay_of=str(ctx.replay_of) if ctx.replay_of else None,
        attempt=ctx.attempt,
    )


def next_hour(after: datetime) -> datetime:
    return after.astimezone(UTC).replace(minute=0, second=0, microsecond=0) + timedelta(hours=1)


class EngineVerbs:
    """The verbs the suite drives, on an ``agentcron.Engine`` (owner ``OWNER``)."""

    max_attempts = 3  # what a transient failure gets, in all
    permanent_error: type[Exception] = RunPermanentError  # what the handler raises for good
    invalid_errors: tuple[type[BaseException], ...] = (InvalidSchedule,)
    not_found_errors: tuple[type[BaseException], ...] = (NotFound,)
    within = 10.0  # seconds any one wait of the suite may take

    def make_engine(self, store: Store) -> Any:
        raise NotImplementedError("a configured engine (or provider) on store, not started")

    async def fire_due_times(self, engine: Any, key: str, start: datetime, end: datetime) -> None:
        raise NotImplementedError("fire every due time of key in the window, the engine's way")

    async def start(self, engine: Any, handler: HostHandler) -> None:
        async def run(ctx: HandlerContext) -> None:
            await handler(call_of(ctx))

        engine.handler = run
        await engine.start()

    async def stop(self, engine: Any) -> None:
        await engine.stop()

    async def apply(self, engine: Any, key: str, record: Record) -> None:
        spec = {
            "name": record.name,
            "prompt": record.prompt,
            "trigger": {"cron": record.cron, "timezone": record.timezone},
            "enabled": record.enabled,
            "max_attempts": self.max_attempts,
            "runner": {"type": "handler", "data": dict(record.data)},
        }
        await engine.schedules.apply(OWNER, key, spec, trusted=True)

    async def delete(self, engine: Any, key: str) -> None:
        await engine.schedules.delete_by_key(OWNER, key)

    async def run_now(self, engine: Any, key: str) -> str:
        schedule = await engine.schedules.get_by_key(OWNER, key)
        return str((await engine.runs.run_now(schedule.id, OWNER)).id)

    async def replay(self, engine: Any, key: str, run_id: str) -> str:
        schedule = await engine.schedules.get_by_key(OWNER, key)
        run, _ = await engine.runs.get_run(run_id, OWNER)
        if run.schedule_id != schedule.id:
            raise NotFound("run", run_id)  # the record's runs only, as a provider answers
        return str((await engine.runs.replay(run.id, OWNER)).id)

    async def list_runs(self, engine: Any, key: str, limit: int) -> list[RunView]:
        schedule = await engine.schedules.get_by_key(OWNER, key)
        limit = max(1, min(HISTORY_LIMIT, limit))
        page = await engine.runs.list_runs(schedule.id, OWNER, limit=limit)
        return [
            RunView(
                id=str(run.id),
                trigger=run.trigger,
                status=run.status,
                due_at=run.due_at,
                replay_of=str(run.replay_of) if run.replay_of else None,
            )
            for run, _ in page.items
        ]

    async def settle(self, engine: Any, key: str) -> None:
        """Return once no run of ``key`` is pending or running."""
        await settle_engine(engine, OWNER, key, self.within)


def zone_due_times(cron_hour: int, zone: str, start: datetime, end: datetime) -> list[datetime]:
    """The instants (UTC) of ``0 <cron_hour> * * *`` in ``zone`` within ``[start, end]``."""
    found, day = [], start.astimezone(ZoneInfo(zone)).date() - timedelta(days=1)
    while (local := datetime(day.year, day.month, day.day, cron_hour, tzinfo=ZoneInfo(zone))) <= (
        end
    ):
        if local >= start:
            found.append(local.astimezone(UTC))
        day += timedelta(days=1)
    return found


__all__ = [
    "OWNER",
    "Call",
    "EngineVerbs",
    "HostHandler",
    "Record",
    "RunView",
    "SettableClock",
    "Store",
    "fire_engine_due_times",
    "next_hour",
    "settle_engine",
    "until",
    "zone_due_times",
]
