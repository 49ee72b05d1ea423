"""agentcron as an AstraBox-style scheduler provider, on agentcron's public API only.

The platform owns its deployment records (id, name, prompt, 5-field cron, IANA zone, enabled)
and hands them over: all of them at start (``reconcile``), then the one that changed
(``apply``, ``delete``; a record marked ``deleted`` is deleted). Each becomes the schedule keyed
``deployment:{id}`` of one owner, run through the platform's handler (a ``handler`` runner
whose saved data is the deployment id and its target, as given). agentcron owns the firing, the
run ledger, retries and recovery.

The platform's console reads back what the provider holds: one deployment's schedule
(``get``: its state, cron, zone and next due time), and its runs (``list_runs``, ``get_run``),
each with its due time, trigger, status, the prompt and target it was started with (an edit of
the record since changes neither), what the handler returned for it (a mapping such as
``{"session_id": ...}``: the session the run opened), its error and when it started and
finished.

The platform sees errors by class, with messages of its own words: ``InvalidSchedule``,
``ScheduleCapacityExceeded``, ``ProviderUnavailable`` (not usable here, or not started),
``ExecutionUnavailable`` (the execution store is failing), ``DeploymentNotFound`` and
``RunNotFound``. Its handler raises ``PermanentFailure`` for a failure that retrying cannot
help; any other exception is retried (``ATTEMPTS`` in all, from 1 s, doubling). It returns
None or a mapping of JSON values, at most 16 KB of JSON, kept as the run's ``result``; any other
value, or a bigger mapping, fails the run (not retried) with the reason as its ``error``.
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Mapping
from contextlib import asynccontextmanager, suppress
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import agentcron

NAME = "agentcron"  # the entry point's name: ASTRABOX_SCHEDULER_PROVIDER=agentcron
OWNER = "astrabox"  # every deployment's schedule belongs to this owner
SCOPE = "deployment:"  # the keys this provider owns; reconcile deletes only within them
ATTEMPTS = 5
HISTORY_LIMIT = 200


class SchedulerError(Exception):
    """Base of the provider's errors; the message is the platform's to show."""


class InvalidSchedule(SchedulerError):
    def __init__(
        self,
        message: str = "schedule cron or timezone is invalid",
        deployment_id: str | None = None,
    ) -> None:
        super().__init__(f"deployment {deployment_id}: {message}" if deployment_id else message)
        self.deployment_id = deployment_id  # in a reconcile: the record that was refused
        self.where = ""  # the refused field, as agentcron named it (which record, in a reconcile)


class ScheduleCapacityExceeded(SchedulerError):
    def __init__(self) -> None:
        super().__init__("too many scheduled deployments are enabled")


class ProviderUnavailable(SchedulerError):
    """Not usable in this deployment (configure refused it), or not started."""


class ExecutionUnavailable(SchedulerError):
    def __init__(self) -> None:
        super().__init__("the scheduler's execution store is unavailable; try again")


class DeploymentNotFound(SchedulerError):
    def __init__(self) -> None:
        super().__init__("deployment has no schedule")


class RunNotFound(SchedulerError):
    def __init__(self) -> None:
        super().__init__("run not found for this deployment")


class PermanentFailure(Exception):
    """Raised by the platform's handler: retrying this call cannot help."""


@dataclass(frozen=True)
class DeploymentRecord:
    id: str
    name: str
    prompt: str
    cron: str  # five fields
    timezone: str  # IANA
    enabled: bool = True
    target: Mapping[str, Any] = field(default_factory=dict)  # saved with each run, as given
    deleted: bool = False  # the platform deleted it: its schedule is deleted (as ``delete``)


@dataclass(frozen=True)
class ScheduledCall:
    """One call of the platform's handler: one attempt of one run."""

    run_id: str
    deployment_id: str
    trigger: str  # schedule, manual, replay or backfill
    due_at: datetime | None  # the instant a scheduled run is for
    prompt: str
    target: Mapping[str, Any]
    replayed_from_run_id: str | None
    attempt: int

    @property
    def idempotency_key(self) -> str:
        """The same on every attempt and after a recovery: the platform's steps key on it."""
        return f"deployment-run:{self.run_id}"


@dataclass(frozen=True)
class DeploymentSchedule:
    """One deployment's schedule as the provider holds it."""

    deployment_id: str
    state: str  # "active", or "paused" (the record is disabled, or the scheduler paused it)
    cron: str
    timezone: str
    next_due_at: datetime | None  # None while paused
    name: str
    prompt: str
    target: Mapping[str, Any]


@dataclass(frozen=True)
class DeploymentRun:
    run_id: str
    deployment_id: str
    trigger: str
    status: str  # pending, running, succeeded, failed, timed_out, cancelled, skipped
    due_at: datetime | None
    replayed_from_run_id: str | None
    created_at: datetime
    prompt: str  # the input it was started with, as saved then: a later edit changes neither
    target: Mapping[str, Any]
    started_at: datetime | None
    finished_at: datetime | None  # when it reached its final status
    error: str | None
    result: Mapping[str, Any] | None  # what the handler returned: the session it opened, say


@dataclass(frozen=True)
class ProviderProperties:
    recovery_scope: str  # "cluster" (PostgreSQL) or "executor" (SQLite: its restart recovers)
    max_active_schedules: int | None
    pause_visibility_seconds: float


Returned = Mapping[str, Any] | None
Handler = Callable[[ScheduledCall], Awaitable[Returned] | Returned]


def sql_url_of(backend: Any) -> str | None:
    """The repository backend's SQL URL (an attribute or a method ``sql_url``), if it has one."""
    url = getattr(backend, "sql_url", None)
    if callable(url):
        url = url()
    return url if isinstance(url, str) and url else None


def key_of(deployment_id: str) -> str:
    return f"{SCOPE}{deployment_id}"


def spec_of(record: DeploymentRecord) -> dict[str, Any]:
    if len(record.cron.split()) != 5:
        raise InvalidSchedule()  # the platform's records are five-field crons only
    return {
        "name": record.name,
        "prompt": record.prompt,
        "trigger": {"cron": record.cron, "timezone": record.timezone},
        "enabled": record.enabled,
        "max_attempts": ATTEMPTS,
        "runner": {
            "type": "handler",
            "data": {"deployment_id": record.id, "target": dict(record.target)},
        },
    }


@asynccontextmanager
async def translated() -> AsyncIterator[None]:
    """agentcron's errors as the provider's classes; their text never reaches the platform."""
    try:
        yield
    except agentcron.InvalidSchedule as exc:
        where = exc.field or ""
        trigger = where.startswith("trigger") or ".trigger" in where
        error = InvalidSchedule() if trigger else InvalidSchedule("deployment record is invalid")
        error.where = where
        raise error from None
    except agentcron.ScheduleCapacityExceeded:
        raise ScheduleCapacityExceeded() from None
    except agentcron.SchedulerUnavailable:
        raise ExecutionUnavailable() from None


def target_of(runner: Mapping[str, Any]) -> Mapping[str, Any]:
    """The deployment's target in a ``handler`` runner's saved data."""
    target: Mapping[str, Any] = (runner.get("data") or {}).get("target") or {}
    return target


def run_of(run: Any, deployment_id: str) -> DeploymentRun:
    saved = run.payload  # what the run was created with: edits of the schedule leave it be
    return DeploymentRun(
        run_id=str(run.id),
        deployment_id=deployment_id,
        trigger=run.trigger,
        status=run.status,
        due_at=run.due_at,
        replayed_from_run_id=str(run.replay_of) if run.replay_of else None,
        created_at=run.created_at,
        prompt=saved.get("prompt", ""),
        target=target_of(saved.get("runner") or {}),
        started_at=run.started_at,
        finished_at=run.finished_at,
        error=run.error,
        result=run.result,
    )


def schedule_of(schedule: Any, deployment_id: str) -> DeploymentSchedule:
    return DeploymentSchedule(
        deployment_id=deployment_id,
        state="active" if schedule.enabled else "paused",
        cron=schedule.trigger["cron"],
        timezone=schedule.trigger["timezone"],
        next_due_at=schedule.next_run,
        name=schedule.name,
        prompt=schedule.prompt,
        target=target_of(schedule.runner),
    )


class AgentcronProvider:
    """The provider the platform loads from the entry point group
    ``astrabox.providers.scheduler``."""

    name = NAME

    def __init__(self) -> None:
        self._engine: agentcron.Engine | None = None
        self._started = False

    # -- lifecycle ----------------------------------------------------------------------

    def configure(self, *, repository_backend: Any, **engine_options: Any) -> None:
        """Build the engine on the backend's SQL database (migrated at start).
        ``engine_options`` go to ``agentcron.Engine`` (tick, concurrency, a test's clock).
        A backend without a SQL URL, or one agentcron cannot run on, is ``ProviderUnavailable``
        now, so the platform refuses to start rather than fail at the first due time."""
        url = sql_url_of(repository_backend)
        if url is None:
            raise ProviderUnavailable(
                "this scheduler provider needs a SQL repository backend (PostgreSQL or SQLite);"
                " choose another provider or set the provider to none"
            )
        try:
            self._engine = agentcron.Engine(database_url=url, migrate=True, **engine_options)
        except agentcron.ConfigurationError:
            raise ProviderUnavailable(
                "the repository backend's database or the scheduler settings are not usable"
                " by this provider"
            ) from None

    @property
    def engine(self) -> agentcron.Engine:
        if self._engine is None:
            raise ProviderUnavailable("the scheduler provider is not configured")
        return self._engine

    @property
    def properties(self) -> ProviderProperties:
        props = self.engine.properties
        return ProviderProperties(
            recovery_scope="cluster" if props.recovery_scope == "cluster" else "executor",
            max_active_schedules=props.max_active_schedules,
            pause_visibility_seconds=props.pause_visibility_seconds,
        )

    async def start(self, handler: Handler) -> None:
        """Begin dispatching to ``handler``; runs a lost process left are continued."""
        engine = self.engine

        async def run(ctx: agentcron.HandlerContext) -> agentcron.RunOutcome:
            call = ScheduledCall(
                run_id=str(ctx.run_id),
                deployment_id=str(ctx.data.get("deployment_id")),
                trigger=ctx.trigger,
                due_at=ctx.due_at,
                prompt=ctx.prompt,
                target=ctx.data.get("target") or {},
                replayed_from_run_id=str(ctx.replay_of) if ctx.replay_of else None,
                attempt=ctx.attempt,
            )
            try:
                if inspect.iscoroutinefunction(handler):
                    returned = await handler(call)
                else:
                    returned = await asyncio.to_thread(handler, call)
            except PermanentFailure as exc:
                raise agentcron.RunPermanentError(str(exc)) from exc
            if returned is not None and not isinstance(returned, Mapping):
                raise agentcron.RunPermanentError(
                    f"the handler returned a {type(returned).__name__}; it returns None or a"
                    " mapping (the run's result)"
                )
            return agentcron.RunOutcome(result=returned)

        engine.handler = run
        try:
            await engine.start()
        except agentcron.AgentcronError:
            raise ProviderUnavailable("the scheduler could not start on this database") from None
        self._started = True

    async def stop(self) -> None:
        """Stop firing; runs in hand finish within the drain time, the rest are handed on."""
        if self._engine is not None:
            await self._engine.stop()
        self._started = False

    def _ready(self) -> agentcron.Engine:
        if not self._started:
            raise ProviderUnavailable("the scheduler provider is not started")
        return self.engine

    # -- the records ----------------------------------------------------------------------

    async def reconcile(self, records: Iterable[DeploymentRecord]) -> None:
        """Make the schedules exactly ``records``: apply each (disabled ones kept paused),
        delete this provider's schedules no record names or whose record is marked deleted.
        One invalid record applies none (a deleted one is not checked)."""
        engine = self._ready()
        specs: dict[str, dict[str, Any]] = {}
        for record in records:
            if record.deleted:
                specs.pop(key_of(record.id), None)  # named by no spec: reconcile deletes it
                continue
            try:
                specs[key_of(record.id)] = spec_of(record)
            except InvalidSchedule:
                raise InvalidSchedule(deployment_id=record.id) from None
        try:
            async with translated():
                await engine.schedules.reconcile(OWNER, specs, scope=SCOPE)
        except InvalidSchedule as exc:
            # agentcron names the refused record's key in the field: say which deployment.
            named = [key for key in specs if exc.where.startswith(f"records.{key}")]
            refused = max(named, key=len)[len(SCOPE) :] if named else None
            raise InvalidSchedule(str(exc), deployment_id=refused) from None

    async def apply(self, record: DeploymentRecord) -> None:
        """Create or replace the deployment's schedule (same run history). An invalid change,
        or one past the capacity, is refused and the previous definition stays in force. A
        record marked deleted is ``delete``."""
        if record.deleted:
            await self.delete(record.id)
            return
        engine = self._ready()
        spec = spec_of(record)
        async with translated():
            await engine.schedules.apply(OWNER, key_of(record.id), spec)

    async def delete(self, deployment_id: str) -> None:
        """Stop the deployment's schedule; its runs stay readable (``get_run``). Unknown:
        nothing happens."""
        engine = self._ready()
        async with translated():
            with suppress(agentcron.NotFound):
                await engine.schedules.delete_by_key(OWNER, key_of(deployment_id))

    async def get(self, deployment_id: str) -> DeploymentSchedule:
        """The deployment's schedule as the provider holds it; ``DeploymentNotFound`` when it
        has none (never applied, or deleted)."""
        engine = self._ready()
        async with translated():
            try:
                schedule = await engine.schedules.get_by_key(OWNER, key_of(deployment_id))
            except agentcron.NotFound:
                raise DeploymentNotFound() from None
        return schedule_of(schedule, deployment_id)

    # -- runs -----------------------------------------------------------------------------

    async def list_runs(self, deployment_id: str, limit: int = 50) -> list[DeploymentRun]:
        """The deployment's runs newest first, every trigger; ``limit`` clamped to 1..200."""
        engine = self._ready()
        limit = max(1, min(HISTORY_LIMIT, limit))
        async with translated():
            try:
                schedule = await engine.schedules.get_by_key(OWNER, key_of(deployment_id))
            except agentcron.NotFound:
                return []
            page = await engine.runs.list_runs(schedule.id, OWNER, limit=limit)
        return [run_of(run, deployment_id) for run, _ in page.items]

    async def get_run(self, deployment_id: str, run_id: str) -> DeploymentRun:
        """One of the deployment's runs, also once the deployment is deleted; a run that is
        not this deployment's is ``RunNotFound``."""
        engine = self._ready()
        async with translated():
            try:
                run, _ = await engine.runs.get_run(run_id, OWNER)
            except agentcron.NotFound:
                raise RunNotFound() from None
        if run.payload.get("key") != key_of(deployment_id):
            raise RunNotFound()
        return run_of(run, deployment_id)

    async def run_now(self, deployment_id: str) -> DeploymentRun:
        """Queue a run; returns once its record is saved."""
        engine = self._ready()
        async with translated():
            try:
                schedule = await engine.schedules.get_by_key(OWNER, key_of(deployment_id))
            except agentcron.NotFound:
                raise DeploymentNotFound() from None
            return run_of(await engine.runs.run_now(schedule.id, OWNER), deployment_id)

    async def replay(self, deployment_id: str, run_id: str) -> DeploymentRun:
        """Re-run the saved input of one of the deployment's runs; the new run points back to
        it. A run that is not this deployment's is ``RunNotFound``."""
        engine = self._ready()
        async with translated():
            try:
                schedule = await engine.schedules.get_by_key(OWNER, key_of(deployment_id))
                original, _ = await engine.runs.get_run(run_id, OWNER)
                if original.schedule_id != schedule.id:
                    raise RunNotFound()
                return run_of(await engine.runs.replay(original.id, OWNER), deployment_id)
            except agentcron.NotFound:
                raise RunNotFound() from None


__all__ = [
    "ATTEMPTS",
    "NAME",
    "OWNER",
    "SCOPE",
    "AgentcronProvider",
    "DeploymentNotFound",
    "DeploymentRecord",
    "DeploymentRun",
    "DeploymentSchedule",
    "ExecutionUnavailable",
    "InvalidSchedule",
    "PermanentFailure",
    "ProviderProperties",
    "ProviderUnavailable",
    "RunNotFound",
    "ScheduleCapacityExceeded",
    "ScheduledCall",
    "SchedulerError",
    "key_of",
]
