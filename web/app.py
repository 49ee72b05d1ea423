"""The FastAPI application factory. The lifespan owns the database and the scheduler loop."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from fastapi import FastAPI

from agentcron.core.clock import Clock, DatabaseClock, utcnow
from agentcron.core.config import Settings, get_settings
from agentcron.core.errors import SchedulerUnavailable
from agentcron.core.ledger import Ledger
from agentcron.core.logging import configure_logging, get_logger
from agentcron.core.policy import ExecutionPolicy
from agentcron.core.policy import configure as configure_policy
from agentcron.core.retention import RetentionPolicy
from agentcron.core.runners.command.reaper import REAPER
from agentcron.core.runners.containment import Containment, check_sandbox, containment_from_settings
from agentcron.core.runs import RunService
from agentcron.core.schedules import ScheduleService
from agentcron.core.secrets import Keyring
from agentcron.core.storage import Database
from agentcron.core.storage.lock import EngineLock
from agentcron.core.storage.migrate import check_schema
from agentcron.web.api import health, runs, schedules, secrets, tasks
from agentcron.web.api.errors import install_error_handlers
from agentcron.web.clockwatch import ClockWatch
from agentcron.web.dashboard import install as install_dashboard
from agentcron.web.loop import EngineProperties, SchedulerLoop
from agentcron.web.mcp.endpoint import install as install_mcp
from agentcron.web.metrics import EngineMetrics
from agentcron.web.supervisor import Supervisor

log = get_logger(__name__)


def engine_properties(
    settings: Settings, db: Database, containment: Containment | None = None
) -> EngineProperties:
    """The promises this configuration makes (logged at start, docs/design.md, promise 14)."""
    caps = db.capabilities
    containment = containment or containment_from_settings(settings)
    return EngineProperties(
        instance_id=settings.instance_id,
        dialect=caps.dialect,
        # PostgreSQL: any replica continues a dead one's runs. SQLite: one engine per file,
        # so recovery happens when that process (or its replacement) starts again.
        recovery_scope="cluster" if caps.multi_process else "process",
        max_active_schedules=settings.max_active_schedules,
        pause_visibility="immediate: checked under the schedule's row lock when a run starts",
        lease_seconds=settings.lease_seconds,
        tick_seconds=settings.scheduler_tick_seconds,
        concurrency=settings.scheduler_concurrency,
        clock="database" if caps.database_clock else "local",
        sandbox=containment.describe(),
        agent_env=list(containment.agent_env),
    )


def create_app(settings: Settings | None = None) -> FastAPI:
    """Build the app for ``settings`` (default: from the environment)."""
    settings = settings or get_settings()
    # Read (and the agents file parsed) before anything starts: a bad one refuses the start.
    policy = ExecutionPolicy.from_settings(settings)

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        # First: a malformed AGENTCRON_SECRETS_KEY refuses the start (StartupError) before
        # anything is opened.
        keyring = Keyring.from_setting(settings.secrets_key)
        db = Database(settings.database_url, timeout=settings.database_timeout_seconds)
        lock = EngineLock(settings.database_url)
        loop: SchedulerLoop | None = None
        watch: ClockWatch | None = None
        metrics = EngineMetrics()
        app.state.metrics = metrics
        # The command runner resolves declared agents through the process's policy.
        configure_policy(policy)
        # One supervisor for every long-lived task of this app, so /readyz sees them all.
        supervisor = Supervisor(metrics)
        app.state.supervisor = supervisor
        # On PostgreSQL every "now" of the engine (due times, leases, next_run, available_at)
        # is the database's: replicas on hosts whose clocks disagree would otherwise claim
        # early or late relative to each other, and one whose clock runs fast would find a
        # live run's lease expired and take it over. One clock for all of them, the database's.
        clock: Clock = utcnow
        if db.capabilities.database_clock:
            clock = DatabaseClock(warn_seconds=settings.clock_skew_warn_seconds)
            watch = ClockWatch(
                clock,
                db,
                instance_id=settings.instance_id,
                metrics=metrics,
                supervisor=supervisor,
            )
        try:
            try:
                await check_schema(db)
            except SchedulerUnavailable:
                # Start anyway: /readyz says 503 and the loop retries until the database is back.
                log.warning("schema_check_skipped", reason="database unavailable")
            ledger = Ledger(
                db,
                owner=settings.instance_id,
                lease_seconds=settings.lease_seconds,
                data_dir=settings.data_dir,
                clock=clock,
            )
            runs = RunService(db, clock=clock)
            service = ScheduleService(
                db,
                clock=clock,
                max_active=settings.max_active_schedules,
                allow_private=settings.allow_private_webhooks,
                policy=policy,
                data_dir=settings.data_dir,
            )
            containment = containment_from_settings(settings)
            if not settings.disable_scheduler:
                # Before anything runs: a sandbox that cannot start would fail every command.
                await asyncio.to_thread(check_sandbox, containment)
                # The process that kills every command agent's group when this one dies,
                # SIGKILL included (core.runners.command.reaper): started before any run.
                REAPER.start()
                if not db.capabilities.multi_process:
                    lock.acquire()
                loop = SchedulerLoop(
                    ledger,
                    concurrency=settings.scheduler_concurrency,
                    tick_seconds=settings.scheduler_tick_seconds,
                    drain_timeout=settings.drain_timeout_seconds,
                    clock=clock,
                    allow_private=settings.allow_private_webhooks,
                    metrics=metrics,
                    retention=RetentionPolicy(
                        days=settings.retention_days, keep_last=settings.retention_keep_last
                    ),
                    retention_interval=settings.retention_interval_seconds,
                    supervisor=supervisor,
                    keyring=keyring,
                    containment=containment,
                )
                service.on_change = ledger.on_change = runs.on_change = loop.wake
                runs.on_cancel = loop.cancel_local
            app.state.settings = settings
            app.state.keyring = keyring
            app.state.db = db
            app.state.schedules = service
            app.state.ledger = ledger
            app.state.runs = runs
            app.state.loop = loop
            app.state.clock_watch = watch
            if watch is not None:
                # Before the first claim, so it already uses the database's time. API-only
                # replicas measure too: run now and schedule changes write times as well.
                await watch.start()
            if loop is not None:
                loop.start()
                log.info("engine_started", **vars(engine_properties(settings, db, containment)))
            else:
                log.info("engine_disabled", reason="AGENTCRON_DISABLE_SCHEDULER")
            async with mcp.running():
                yield
        finally:
            if loop is not None:
                await loop.stop()
                # The runs are stopped; whatever a run left registered dies with the reaper.
                await asyncio.to_thread(REAPER.close)
            if watch is not None:
                await watch.stop()
            lock.release()
            await db.dispose()
            log.info("service_stopped")

    app = FastAPI(
        title="agentcron",
        version="0.1.0",
        summary="Run AI-agent work on a timetable.",
        lifespan=lifespan,
    )
    install_error_handlers(app)
    app.include_router(health.router)
    app.include_router(schedules.router)
    app.include_router(runs.router)
    app.include_router(runs.schedule_runs)
    app.include_router(tasks.router)
    app.include_router(secrets.router)
    install_dashboard(app)
    mcp = install_mcp(app)
    return app


def app_from_env() -> FastAPI:
    """Entry point for ``uvicorn --factory web.app:app_from_env``: logging set up first."""
    settings = get_settings()
    configure_logging(settings.log_format, settings.log_level)
    return create_app(settings)
