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


def _serve(args: argparse.Namespace) -> int:
    import uvicorn

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
