"""The ``agentcron`` command: ``serve``, ``migrate``, ``example`` and ``keys``."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from core.config import get_settings
from core.logging import configure_logging, get_logger

if TYPE_CHECKING:
    from datetime import datetime

    from core.storage import ApiKey


def _migrate(_args: argparse.Namespace) -> int:
    from core.storage.migrate import upgrade

    settings = get_settings()
    upgrade(settings.database_url)
    get_logger("agentcron.cli").info("migrated", database_url=_safe_url(settings.database_url))
    return 0


EXAMPLE_NAME = "example: hello agent"
EXAMPLE_AGENT = Path(__file__).resolve().parents[1] / "examples" / "hello_agent.py"


def _example(_args: argparse.Namespace) -> int:
    """Create the example schedule unless it exists (the stand-in agent every 30 seconds), and
    the first API key of owner "local" unless that owner has one (printed once, never stored)."""
    import asyncio

    from core.keys import LOCAL_OWNER, create_key, display_prefix, list_keys
    from core.schedules import ScheduleService
    from core.specs import ScheduleCreate
    from core.storage import Database

    async def create() -> tuple[str, str | None, str | None]:
        db = Database(get_settings().database_url)
        try:
            service = ScheduleService(db)
            page = await service.list(LOCAL_OWNER, limit=500)
            outcome = ""
            for schedule in page.items:
                if schedule.name == EXAMPLE_NAME:
                    outcome = f"exists: {schedule.id}"
            if not outcome:
                spec = ScheduleCreate(
                    name=EXAMPLE_NAME,
                    prompt="Say hello and count the words of this prompt.",
                    trigger={"every_seconds": 30},
                    runner={"type": "command", "argv": [sys.executable, str(EXAMPLE_AGENT)]},
                    notify=[{"type": "file", "path": "deliveries.jsonl"}],
                )
                outcome = f"created: {(await service.create(spec, LOCAL_OWNER)).id}"
            existing = await list_keys(db, LOCAL_OWNER, include_revoked=False)
            if existing:
                return outcome, None, display_prefix(existing[0])
            token, _record = await create_key(db, LOCAL_OWNER)
            return outcome, token, None
        finally:
            await db.dispose()

    outcome, token, existing = asyncio.run(create())
    get_logger("agentcron.cli").info("example_schedule", result=outcome, name=EXAMPLE_NAME)
    if token is not None:
        _print(
            f'# An API key for owner "{LOCAL_OWNER}", shown only this once (only its hash is'
            " stored).",
            "# Send it as `Authorization: Bearer <key>`; in the shell you will run curl in:",
            f"export AGENTCRON_KEY={token}",
        )
    else:
        _print(
            f'# Owner "{LOCAL_OWNER}" already has an API key ({existing}); keys are shown only'
            " when made.",
            f"# Another one: agentcron keys create --owner {LOCAL_OWNER}",
        )
    return 0


def _print(*lines: str) -> None:
    # Keys go to stdout, alone, never through the logger: log lines are shipped and kept.
    sys.stdout.write("".join(f"{line}\n" for line in lines))
    sys.stdout.flush()


def _keys_create(args: argparse.Namespace) -> int:
    import asyncio

    from core.keys import check_owner, create_key
    from core.storage import Database

    try:
        check_owner(args.owner)
    except ValueError as exc:
        sys.stderr.write(f"agentcron: --owner: {exc}\n")
        return 2

    async def create() -> tuple[str, str]:
        db = Database(get_settings().database_url)
        try:
            token, record = await create_key(db, args.owner, admin=args.admin)
            return token, str(record.id)
        finally:
            await db.dispose()

    token, key_id = asyncio.run(create())
    role = "admin: sees every owner" if args.admin else "sees its own owner only"
    _print(
        f'# API key {key_id} for owner "{args.owner}" ({role}). Shown only now: only its hash'
        " is stored.",
        token,
    )
    return 0


def _keys_list(args: argparse.Namespace) -> int:
    import asyncio

    from core.keys import list_keys
    from core.storage import Database

    async def fetch() -> list[ApiKey]:
        db = Database(get_settings().database_url)
        try:
            return await list_keys(db, args.owner, include_revoked=args.all)
        finally:
            await db.dispose()

    keys = asyncio.run(fetch())
    _print(*([_key_line(key) for key in keys] or ["# no API keys (agentcron keys create)"]))
    return 0


def _key_line(key: ApiKey) -> str:
    """One ``keys list`` line: id, prefix, owner, role and dates; never anything secret."""
    from core.keys import display_prefix

    def when(moment: datetime | None) -> str:
        return "-" if moment is None else moment.isoformat(timespec="seconds")

    line = (
        f"{key.id}  {display_prefix(key)}  owner={key.owner}  admin={'yes' if key.admin else 'no'}"
        f"  created={when(key.created_at)}  last_used={when(key.last_used_at)}"
    )
    return line if key.revoked_at is None else f"{line}  revoked={when(key.revoked_at)}"


def _keys_revoke(args: argparse.Namespace) -> int:
    import asyncio

    from core.errors import NotFound
    from core.keys import display_prefix, revoke_key
    from core.storage import Database

    async def revoke() -> str:
        db = Database(get_settings().database_url)
        try:
            record = await revoke_key(db, args.key)
            return f"revoked {record.id} ({display_prefix(record)}, owner {record.owner})"
        finally:
            await db.dispose()

    try:
        _print(asyncio.run(revoke()))
    except NotFound:
        sys.stderr.write(f"agentcron: no API key {args.key!r} (see `agentcron keys list --all`)\n")
        return 1
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
    example = commands.add_parser(
        "example", help='create the example schedule and a first key for owner "local" (once)'
    )
    example.set_defaults(func=_example)
    keys = commands.add_parser("keys", help="API keys: create, list, revoke")
    key_commands = keys.add_subparsers(dest="keys_command", required=True)
    create = key_commands.add_parser("create", help="make a key; prints it once, last line alone")
    create.add_argument("--owner", required=True, help="the owner the key acts as")
    create.add_argument("--admin", action="store_true", help="the key sees every owner's objects")
    create.set_defaults(func=_keys_create)
    listing = key_commands.add_parser("list", help="keys without their secrets")
    listing.add_argument("--owner", help="only this owner's keys")
    listing.add_argument("--all", action="store_true", help="include revoked keys")
    listing.set_defaults(func=_keys_list)
    revoke = key_commands.add_parser("revoke", help="revoke a key at once (by id or prefix)")
    revoke.add_argument("key", metavar="ID", help="the key's id or prefix, as `keys list` shows")
    revoke.set_defaults(func=_keys_revoke)

    args = parser.parse_args(argv)
    settings = get_settings()
    configure_logging(settings.log_format, settings.log_level)
    result: int = args.func(args)
    return result


if __name__ == "__main__":
    sys.exit(main())
