"""The ``agentcron`` command: ``serve``, ``migrate`` and ``example``."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from core.config import get_settings
from core.logging import configure_logging, get_logger


def _migrate(_args: argparse.Namespace) -> int:
    from core.storage.migrate import upgrade

    settings = get_settings()
    upgrade(settings.database_url)
    get_logger("agentcron.cli").info("migrated", database_url=_safe_url(settings.database_url))
    return 0


EXAMPLE_NAME = "example: hello agent"
EXAMPLE_AGENT = Path(__file__).resolve().parents[1] / "examples" / "hello_agent.py"


def _example(_args: argparse.Namespace) -> int:
    """Create the example schedule unless it exists: the stand-in agent every 30 seconds."""
    import asyncio

    from core.schedules import ScheduleService
    from core.specs import ScheduleCreate
    from core.storage import Database
    from web.api.deps import LOCAL_OWNER

    async def create() -> str:
        db = Database(get_settings().database_url)
        try:
            service = ScheduleService(db)
            page = await service.list(LOCAL_OWNER, limit=500)
            for schedule in page.items:
                if schedule.name == EXAMPLE_NAME:
                    return f"exists: {schedule.id}"
            spec = ScheduleCreate(
                name=EXAMPLE_NAME,
                prompt="Say hello and count the words of this prompt.",
                trigger={"every_seconds": 30},
                runner={"type": "command", "argv": [sys.executable, str(EXAMPLE_AGENT)]},
                notify=[{"type": "file", "path": "deliveries.jsonl"}],
            )
            schedule = await service.create(spec, LOCAL_OWNER)
            return f"created: {schedule.id}"
        finally:
            await db.dispose()

    outcome = asyncio.run(create())
    get_logger("agentcron.cli").info("example_schedule", result=outcome, name=EXAMPLE_NAME)
    return 0


def _preflight() -> str | None:
    """Why the service cannot start (schema behind, a second engine on one SQLite file), or
    None. The lifespan checks the same again; checking here first gives a plain message
    instead of a traceback."""
    import asyncio

    from core.errors import SchedulerUnavailable, StartupError
    from core.storage import Database
    from core.storage.lock import EngineLock
    from core.storage.migrate import check_schema

    settings = get_settings()

    async def schema() -> None:
        db = Database(settings.database_url)
        try:
            await check_schema(db)
        except SchedulerUnavailable:
            pass  # the service starts and reports 503 until the database is back
        finally:
            await db.dispose()

    try:
        asyncio.run(schema())
        if not settings.disable_scheduler and "sqlite" in settings.database_url.split(":", 1)[0]:
            lock = EngineLock(settings.database_url)
            lock.acquire()
            lock.release()
    except StartupError as exc:
        return exc.message
    return None


def _serve(args: argparse.Namespace) -> int:
    import uvicorn

    problem = _preflight()
    if problem is not None:
        get_logger("agentcron.cli").error("startup_refused", reason=problem)
        sys.stderr.write(f"agentcron: cannot start: {problem}\n")
        return 2

    uvicorn.run(
        "web.app:app_from_env",
        factory=True,
        host=args.host,
        port=args.port,
        log_config=None,
    )
    return 0


def _safe_url(url: str) -> str:
    from sqlalchemy.engine import make_url

    return make_url(url).render_as_string(hide_password=True)


def main(argv: list[str] | None = None) -> int:
    """Parse ``argv`` and run the chosen command; returns the process exit code."""
    parser = argparse.ArgumentParser(
        prog="agentcron", description="Run AI-agent work on a timetable."
    )
    commands = parser.add_subparsers(dest="command", required=True)
    serve = commands.add_parser("serve", help="serve the HTTP API (and the scheduler loop)")
    serve.add_argument("--host", default="127.0.0.1")
    serve.add_argument("--port", type=int, default=8000)
    serve.set_defaults(func=_serve)
    migrate = commands.add_parser("migrate", help="apply database migrations")
    migrate.set_defaults(func=_migrate)
    example = commands.add_parser("example", help="create the example schedule (idempotent)")
    example.set_defaults(func=_example)

    args = parser.parse_args(argv)
    settings = get_settings()
    configure_logging(settings.log_format, settings.log_level)
    result: int = args.func(args)
    return result


if __name__ == "__main__":
    sys.exit(main())
