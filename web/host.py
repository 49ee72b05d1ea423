"""agentcron inside a host's process: the engine object ``agentcron serve`` runs too.

``Engine`` opens the database, checks its schema (or migrates it), starts the clock watch and
the scheduling loop, and on ``stop()`` drains the runs in hand within the drain timeout and
closes everything. The service's lifespan (``agentcron.web.app``) is this object plus HTTP; a
host uses the same one in its own lifespan::

    engine = agentcron.Engine(database_url="sqlite:///var/jobs.db", handler=run_agent)

    @asynccontextmanager
    async def lifespan(app: FastAPI):
        async with engine:
            yield

    app = FastAPI(lifespan=lifespan)
    engine.install(app, prefix="/scheduling", principal=current_user_owner)

Settings are the service's (``AGENTCRON_*``, ``agentcron.core.config.Settings``); keyword
arguments override them by field name. ``AGENTCRON_DISABLE_SCHEDULER`` leaves the loop off
(the API still works), and the tick and concurrency settings tune it.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from types import TracebackType
from typing import Any, TypeVar

from fastapi import APIRouter, Depends, FastAPI, Request
from pydantic import ValidationError

from agentcron.core.clock import Clock, DatabaseClock, utcnow
from agentcron.core.config import Settings
from agentcron.core.errors import SchedulerUnavailable
from agentcron.core.ledger.sql import SqlRunStore
from agentcron.core.logging import get_logger
from agentcron.core.policy import ExecutionPolicy
from agentcron.core.policy import configure as configure_policy
from agentcron.core.retention import RetentionPolicy
from agentcron.core.runners.command.reaper import REAPER
from agentcron.core.runners.containment import Containment, check_sandbox, containment_from_settings
from agentcron.core.runners.handler import Handler
from agentcron.core.runs import RunService
from agentcron.core.schedules.service import ScheduleService
from agentcron.core.secrets.keyring import Keyring
from agentcron.core.storage.database import Database
from agentcron.core.storage.liveness import noticed_by, promised_recovery
from agentcron.core.storage.lock import EngineLock
from agentcron.core.storage.migrate import check_schema, upgrade
from agentcron.core.tracing import from_environment as tracing_from_environment
from agentcron.web.api.hosting import ConfigurationError, as_principal, install_errors
from agentcron.web.engine.clockwatch import ClockWatch
from agentcron.web.engine.loop import EngineProperties, SchedulerLoop
from agentcron.web.engine.metrics import EngineMetrics
from agentcron.web.engine.supervisor import Supervisor

log = get_logger(__name__)
T = TypeVar("T")
BACKENDS = ("postgresql+asyncpg", "sqlite+aiosqlite")  # the URL schemes, once normalised


@dataclass(frozen=True)
class Properties:
    """What this engine promises, typed for a host (``EngineProperties`` is the logged form)."""

    recovery_scope: str  # "cluster": any replica continues a dead one's runs; "process"
    max_active_schedules: int | None
    pause_visibility_seconds: float  # 0: a pause is seen by the next admission
    lease_seconds: float
    recovery_seconds: float  # the longest a dead process's run waits before it is continued
    tick_seconds: float
    concurrency: int
    dialect: str


def settings_from(settings: Settings | None, overrides: dict[str, Any]) -> Settings:
    """``settings`` (default: the environment) with ``overrides`` by field name; a bad value or
    an unknown name is a ``ConfigurationError`` naming it."""
    fields = Settings.model_fields
    unknown = sorted(set(overrides) - set(fields))
    if unknown:
        raise ConfigurationError(f"unknown setting {unknown[0]!r}")
    try:
        if settings is None:
            chosen = Settings(**overrides)
        else:
            chosen = Settings(**{**settings.model_dump(), **overrides}) if overrides else settings
    except ValidationError as exc:
        error = exc.errors()[0]
        name = ".".join(str(part) for part in error["loc"]) or "settings"
        message = error["msg"].removeprefix("Value error, ")  # pydantic's, for a ValueError
        raise ConfigurationError(f"setting {name}: {message}") from None
    scheme = chosen.database_url.partition("://")[0]
    if scheme not in BACKENDS:
        # Said now, not at the first statement: a host picks its scheduler at configure time.
        raise ConfigurationError(
            f"setting database_url: agentcron runs on PostgreSQL (postgresql://, asyncpg) or"
            f" SQLite (sqlite:///, aiosqlite), not {scheme or 'a URL without a scheme'}"
        )
    return chosen


class Engine:
    """The scheduler of one process: database, clock, ledger, services and the loop."""

    def __init__(
        self,
        settings: Settings | None = None,
        *,
        handler: Handler | None = None,
        migrate: bool = False,
        clock: Clock | None = None,
        **overrides: Any,
    ) -> None:
        """``settings`` (default: ``AGENTCRON_*`` from the environment) with ``overrides`` by
        field name (``database_url=``, ``scheduler_concurrency=``...). ``handler``: the
        callable ``handler`` schedules run through (``agentcron.core.runners.handler``).
        ``migrate``: bring the schema to this version at ``start()`` (else a database that is
        not migrated refuses the start, as ``agentcron serve`` does). ``clock``: every "now"
        of the engine, for tests that move time (``agentcron.testing``); default the database's
        on PostgreSQL, this host's on SQLite. Raises ``ConfigurationError`` for a bad setting,
        at once rather than at the first run."""
        self.settings = settings_from(settings, overrides)
        self.handler = handler
        self.migrate = migrate
        self.clock = clock
        # Read (and the agents file parsed) now: a bad one refuses the start.
        self.policy = ExecutionPolicy.from_settings(self.settings)
        self.keyring: Keyring | None = None  # AGENTCRON_SECRETS_KEY, parsed at start()
        self.metrics = EngineMetrics()
        self.supervisor = Supervisor(self.metrics)
        self.containment: Containment = containment_from_settings(self.settings)
        self._db: Database | None = None
        self._lock: EngineLock | None = None
        self._watch: ClockWatch | None = None
        self._loop: SchedulerLoop | None = None
        self._schedules: ScheduleService | None = None
        self._runs: RunService | None = None
        self._ledger: SqlRunStore | None = None
        self._started = False

    # -- what a host reads ------------------------------------------------------------

    @property
    def db(self) -> Database:
        return self._need(self._db)

    @property
    def schedules(self) -> ScheduleService:
        """Create, read, list, update, delete, pause and resume schedules (by owner)."""
        return self._need(self._schedules)

    @property
    def runs(self) -> RunService:
        """Run now, replay, cancel, get and list runs (by owner)."""
        return self._need(self._runs)

    @property
    def ledger(self) -> SqlRunStore:
        return self._need(self._ledger)

    @property
    def loop(self) -> SchedulerLoop | None:
        """The scheduling loop; None when ``disable_scheduler`` is set or before ``start()``."""
        return self._loop

    @property
    def watch(self) -> ClockWatch | None:
        return self._watch

    @property
    def properties(self) -> Properties:
        """The engine's promises for this configuration (no database needed)."""
        settings = self.settings
        multi = settings.database_url.startswith("postgresql")
        return Properties(
            recovery_scope="cluster" if multi else "process",
            max_active_schedules=settings.max_active_schedules or None,
            pause_visibility_seconds=0.0,
            lease_seconds=settings.lease_seconds,
            recovery_seconds=promised_recovery(multi, settings),
            tick_seconds=settings.scheduler_tick_seconds,
            concurrency=settings.scheduler_concurrency,
            dialect="postgresql" if multi else "sqlite",
        )

    def _need(self, value: T | None) -> T:
        if value is None:
            raise SchedulerUnavailable("the engine is not started: await engine.start() first")
        return value

    # -- lifecycle ----------------------------------------------------------------------

    async def start(self) -> None:
        """Open the database and start the loop (unless the scheduler is disabled). Raises
        ``StartupError`` for a database that is missing or not migrated (with ``migrate=False``)
        or a sandbox that cannot start; nothing is left running then."""
        if self._started:
            return
        settings = self.settings
        # First: a malformed AGENTCRON_SECRETS_KEY refuses the start before anything is opened.
        self.keyring = Keyring.from_setting(settings.secrets_key)
        self._db = db = Database.from_settings(settings)
        try:
            await self._open(db)
        except BaseException:
            await self._close()
            raise
        self._started = True

    async def _open(self, db: Database) -> None:
        settings = self.settings
        self._lock = EngineLock(settings.database_url)
        # The command runner resolves declared agents through the process's policy.
        configure_policy(self.policy)
        # On PostgreSQL every "now" of the engine (due times, leases, next_run, available_at)
        # is the database's: replicas whose clocks disagree would otherwise claim early or late
        # relative to each other, and a fast clock would find a live run's lease expired.
        clock: Clock = self.clock or utcnow
        if self.clock is None and db.capabilities.database_clock:
            clock = DatabaseClock(warn_seconds=settings.clock_skew_warn_seconds)
            self._watch = ClockWatch(
                clock,
                db,
                instance_id=settings.instance_id,
                metrics=self.metrics,
                supervisor=self.supervisor,
            )
        if self.migrate:
            await asyncio.to_thread(upgrade, settings.database_url, schema=settings.database_schema)
        try:
            await check_schema(db)
        except SchedulerUnavailable:
            # Start anyway: /readyz says 503 and the loop retries until the database is back.
            log.warning("schema_check_skipped", reason="database unavailable")
        self._ledger = ledger = SqlRunStore(
            db,
            owner=settings.instance_id,
            lease_seconds=settings.lease_seconds,
            data_dir=settings.data_dir,
            clock=clock,
        )
        self._runs = runs = RunService(db, clock=clock)
        self._schedules = service = ScheduleService(
            db,
            clock=clock,
            max_active=settings.max_active_schedules,
            allow_private=settings.allow_private_webhooks,
            policy=self.policy,
            data_dir=settings.data_dir,
        )
        if not settings.disable_scheduler:
            # Before anything runs: a sandbox that cannot start would fail every command.
            await asyncio.to_thread(check_sandbox, self.containment)
            # The process that kills every command agent's group when this one dies, SIGKILL
            # included (core.runners.command.reaper): started before any run.
            REAPER.start()
            if not db.capabilities.multi_process:
                self._lock.acquire()
            self._loop = loop = SchedulerLoop(
                ledger,
                concurrency=settings.scheduler_concurrency,
                tick_seconds=settings.scheduler_tick_seconds,
                drain_timeout=settings.drain_timeout_seconds,
                clock=clock,
                allow_private=settings.allow_private_webhooks,
                metrics=self.metrics,
                retention=RetentionPolicy(
                    days=settings.retention_days, keep_last=settings.retention_keep_last
                ),
                retention_interval=settings.retention_interval_seconds,
                supervisor=self.supervisor,
                keyring=self.keyring,
                containment=self.containment,
                handler=self.handler,
                liveness=settings.liveness,
                log_runs=settings.log_runs,
                tracing=tracing_from_environment(),  # OTEL_*: spans only when it asks
                predecessors=True,  # SQLite: the file lock is ours; PostgreSQL: the id's lock
            )
            service.context.on_change = ledger.on_change = runs.on_change = loop.wake
            runs.on_cancel = loop.cancel_local
        if self._watch is not None:
            # Before the first claim (it uses the database's time). API-only replicas too.
            await self._watch.start()
        if self._loop is not None:
            self._loop.start()
            log.info("engine_started", **vars(self.logged_properties()))
        else:
            log.info("engine_disabled", reason="AGENTCRON_DISABLE_SCHEDULER")

    def logged_properties(self) -> EngineProperties:
        """The promises this configuration makes, as ``engine_started`` logs them."""
        settings, caps = self.settings, self.db.capabilities
        return EngineProperties(
            instance_id=settings.instance_id,
            dialect=caps.dialect,
            # PostgreSQL: any replica continues a dead one's runs. SQLite: one engine per file,
            # so recovery happens when that process (or its replacement) starts again.
            recovery_scope="cluster" if caps.multi_process else "process",
            max_active_schedules=settings.max_active_schedules,
            pause_visibility="immediate: checked under the schedule's row lock when a run starts",
            lease_seconds=settings.lease_seconds,
            recovery_seconds=self.properties.recovery_seconds,
            liveness=noticed_by(caps.multi_process, settings.liveness),
            tick_seconds=settings.scheduler_tick_seconds,
            concurrency=settings.scheduler_concurrency,
            clock="given" if self.clock else "database" if caps.database_clock else "local",
            sandbox=self.containment.describe(),
            agent_env=list(self.containment.agent_env),
        )

    async def stop(self) -> None:
        """Stop claiming, let the runs in hand finish within ``drain_timeout_seconds``, hand
        the rest over (their leases released for another replica), and close the database."""
        await self._close()
        self._started = False

    async def _close(self) -> None:
        try:
            if self._loop is not None:
                await self._loop.stop()
                # The runs are stopped; whatever a run left registered dies with the reaper.
                await asyncio.to_thread(REAPER.close)
            if self._watch is not None:
                await self._watch.stop()
            if self._lock is not None:
                self._lock.release()
        finally:
            if self._db is not None:
                await self._db.dispose()
            self._loop = self._watch = self._lock = None
            self._db = None

    async def __aenter__(self) -> Engine:
        await self.start()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        await self.stop()

    def lifespan(self) -> Callable[[FastAPI], Any]:
        """A FastAPI lifespan that runs the engine for the app's life: ``FastAPI(lifespan=
        engine.lifespan())``. A host with a lifespan of its own uses ``async with engine``."""

        @asynccontextmanager
        async def running(app: FastAPI) -> AsyncIterator[None]:
            async with self:
                yield

        return running

    # -- the HTTP API, under a host's prefix and auth -------------------------------------

    def router(
        self,
        principal: Callable[..., Any] | None = None,
    ) -> APIRouter:
        """The schedules and runs API (``/api/v1/schedules``, ``/api/v1/runs``) for a host's
        app. ``principal`` is a FastAPI dependency of the host's (any parameters it likes)
        that returns the caller's owner name, or a ``Principal``; without one, the service's
        API keys are checked. The host registers ``install_errors(app)`` (or uses
        ``install``) so agentcron's errors answer with their status codes."""
        from agentcron.web.api import runs, schedules

        engine = self
        bind: Callable[..., Awaitable[None]]
        if principal is None:

            async def bind(request: Request) -> None:
                request.state.agentcron = engine

        else:
            chosen = principal

            async def bind(request: Request, caller: Any = Depends(chosen)) -> None:  # noqa: B008
                request.state.agentcron = engine
                request.state.agentcron_principal = as_principal(caller)

        router = APIRouter(dependencies=[Depends(bind)])
        router.include_router(schedules.router)
        router.include_router(runs.router)
        router.include_router(runs.schedule_runs)
        return router

    def install(
        self, app: FastAPI, *, prefix: str = "", principal: Callable[..., Any] | None = None
    ) -> None:
        """Mount ``router(principal)`` on ``app`` under ``prefix`` and register the handler
        that turns agentcron's errors into their status codes and error bodies."""
        app.include_router(self.router(principal), prefix=prefix)
        install_errors(app)
