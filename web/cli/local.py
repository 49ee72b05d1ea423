"""The commands that act on the server's own database and process: ``serve``, ``migrate``,
``example``, ``keys``, ``secrets-key`` and ``secrets-rotate``. They read
``AGENTCRON_DATABASE_URL`` (and ``AGENTCRON_SECRETS_KEY``) like the service does."""

from __future__ import annotations

import errno
import socket
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, NoReturn

import typer

from agentcron.web.cli.database import fail, on_database, read_settings, unreachable

# ``core`` is imported inside each command: the HTTP commands registered beside these never
# need it, and should start without loading settings, logging or SQLAlchemy.
if TYPE_CHECKING:
    from datetime import datetime

    import structlog

    from agentcron.core.storage.database import Database
    from agentcron.core.storage.models import ApiKey

keys = typer.Typer(
    help="API keys on the server's database: create, list, revoke.", no_args_is_help=True
)


def _log() -> structlog.stdlib.BoundLogger:
    from agentcron.core.logging import get_logger

    return get_logger("agentcron.cli")


def _configure_logging() -> None:
    from agentcron.core.logging import configure_logging

    settings = read_settings()
    configure_logging(settings.log_format, settings.log_level)


def migrate() -> None:
    """Apply the database migrations to AGENTCRON_DATABASE_URL."""
    from agentcron.core.errors import SchedulerUnavailable, StartupError
    from agentcron.core.storage.migrate import head_revision, upgrade

    _configure_logging()
    settings = read_settings()
    try:
        upgrade(settings.database_url, schema=settings.database_schema)
    except StartupError as exc:
        fail(exc.message, 2)
    except SchedulerUnavailable as exc:
        fail(unreachable(settings.database_url, exc), 1)
    _log().info(
        "migrated",
        database_url=_safe_url(settings.database_url),
        database_schema=settings.database_schema,
        revision=head_revision(),
    )


EXAMPLE_NAME = "example: hello agent"
EXAMPLE_AGENT = Path(__file__).resolve().parents[2] / "examples" / "hello_agent.py"


def example() -> None:
    """Create the example schedule and a first API key for owner "local" (each once).

    The schedule runs the stand-in agent every 30 seconds; the key is printed once, never
    stored (only its hash is).
    """
    from agentcron.core.keys import LOCAL_OWNER, create_key, display_prefix, list_keys
    from agentcron.core.schedules.service import ScheduleService
    from agentcron.core.specs import ScheduleCreate

    async def create(db: Database) -> tuple[str, str | None, str | None]:
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

    _configure_logging()
    outcome, token, existing = on_database(create)
    _log().info("example_schedule", result=outcome, name=EXAMPLE_NAME)
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
            f"# Another one: {self_command()} keys create --owner {LOCAL_OWNER}",
        )


def self_command() -> str:
    """This executable as the user can type it again in the same shell: ``agentcron`` when
    that name on PATH is this very program, else its path. `make run` leaves .venv/bin off
    PATH, so a bare ``agentcron`` in a hint would answer "command not found"."""
    import os
    import shlex
    import shutil

    me = Path(sys.argv[0])
    if me.name != "agentcron":  # `python -m web.cli`
        return f"{shlex.quote(sys.executable)} -m web.cli"
    found = shutil.which("agentcron")
    if found is not None and Path(found).resolve() == me.resolve():
        return "agentcron"
    relative = os.path.relpath(me.resolve(), Path.cwd())
    if relative.startswith(".."):
        return shlex.quote(str(me.resolve()))
    # A path without a slash would be looked up on PATH, not in the current directory.
    return shlex.quote(relative if os.sep in relative else f".{os.sep}{relative}")


def _print(*lines: str) -> None:
    # Keys go to stdout, alone, never through the logger: log lines are shipped and kept.
    sys.stdout.write("".join(f"{line}\n" for line in lines))
    sys.stdout.flush()


@keys.command("create")
def keys_create(
    owner: Annotated[str, typer.Option("--owner", help="the owner the key acts as")],
    admin: Annotated[
        bool, typer.Option("--admin", help="the key sees every owner's objects")
    ] = False,
) -> None:
    """Make a key; prints it once, alone on the last line."""
    from agentcron.core.keys import check_owner, create_key

    _configure_logging()
    try:
        check_owner(owner)
    except ValueError as exc:
        fail(f"--owner: {exc}", 2)

    async def create(db: Database) -> tuple[str, str]:
        token, record = await create_key(db, owner, admin=admin)
        return token, str(record.id)

    token, key_id = on_database(create)
    role = "admin: sees every owner" if admin else "sees its own owner only"
    _print(
        f'# API key {key_id} for owner "{owner}" ({role}). Shown only now: only its hash'
        " is stored.",
        token,
    )


@keys.command("list")
def keys_list(
    owner: Annotated[str | None, typer.Option("--owner", help="only this owner's keys")] = None,
    include_revoked: Annotated[bool, typer.Option("--all", help="include revoked keys")] = False,
) -> None:
    """Keys without their secrets: id, prefix, owner, role, creation and last use."""
    from agentcron.core.keys import list_keys

    _configure_logging()

    async def fetch(db: Database) -> list[ApiKey]:
        return await list_keys(db, owner, include_revoked=include_revoked)

    found = on_database(fetch)
    _print(*([_key_line(key) for key in found] or ["# no API keys (agentcron keys create)"]))


def _key_line(key: ApiKey) -> str:
    """One ``keys list`` line: id, prefix, owner, role and dates; never anything secret."""
    from agentcron.core.keys import display_prefix

    def when(moment: datetime | None) -> str:
        return "-" if moment is None else moment.isoformat(timespec="seconds")

    line = (
        f"{key.id}  {display_prefix(key)}  owner={key.owner}  admin={'yes' if key.admin else 'no'}"
        f"  created={when(key.created_at)}  last_used={when(key.last_used_at)}"
    )
    return line if key.revoked_at is None else f"{line}  revoked={when(key.revoked_at)}"


@keys.command("revoke")
def keys_revoke(
    key: Annotated[
        str, typer.Argument(metavar="ID", help="the key's id or prefix, as `keys list` shows")
    ],
) -> None:
    """Revoke a key at once (by id or prefix); the next request with it answers 401."""
    from agentcron.core.errors import NotFound
    from agentcron.core.keys import display_prefix, revoke_key

    _configure_logging()

    async def revoke(db: Database) -> str:
        record = await revoke_key(db, key)
        return f"revoked {record.id} ({display_prefix(record)}, owner {record.owner})"

    try:
        _print(on_database(revoke))
    except NotFound:
        fail(f"no API key {key!r} (see `agentcron keys list --all`)", 1)


def secrets_key() -> None:
    """Print a fresh random key for AGENTCRON_SECRETS_KEY (nothing is stored).

    To rotate, put the new key first and keep the old one after it
    (AGENTCRON_SECRETS_KEY=NEW,OLD), restart, run `agentcron secrets-rotate`, then drop OLD.
    """
    from agentcron.core.errors import StartupError
    from agentcron.core.secrets.keyring import generate_key

    try:
        _print(generate_key())
    except StartupError as exc:  # the secrets extra is missing
        fail(exc.message, 2)


def secrets_rotate() -> None:
    """Re-encrypt every stored secret under the first key of AGENTCRON_SECRETS_KEY, so the
    keys after it can be dropped. Safe to run while the service runs, and to run again."""
    from agentcron.core.errors import StartupError
    from agentcron.core.secrets.keyring import KEY_SETTING, Keyring, SecretUnreadable
    from agentcron.core.secrets.store import reencrypt_all

    _configure_logging()
    try:
        keyring = Keyring.from_setting(read_settings().secrets_key)
    except StartupError as exc:
        fail(exc.message, 2)
    if keyring is None:
        fail(f"{KEY_SETTING} is not set: there is no key to rotate to", 2)

    async def rotate(db: Database) -> int:
        return await reencrypt_all(db, keyring)

    try:
        count = on_database(rotate)
    except SecretUnreadable as exc:
        fail(f"{exc.message}; keep every old key in {KEY_SETTING}", 1)
    _print(f"re-encrypted {count} secret(s) under the first key of {KEY_SETTING}")


def _preflight() -> str | None:
    """Why the service cannot start (a malformed AGENTCRON_SECRETS_KEY, a bad agents file,
    schema behind, a second engine on one SQLite file, a configured sandbox that does not work),
    or None. The lifespan checks the same again; checking here first gives a plain message
    instead of a traceback."""
    import asyncio

    from agentcron.core.errors import SchedulerUnavailable, StartupError
    from agentcron.core.policy import ExecutionPolicy
    from agentcron.core.runners.containment import check_sandbox, containment_from_settings
    from agentcron.core.secrets.keyring import Keyring
    from agentcron.core.storage.database import Database
    from agentcron.core.storage.lock import EngineLock
    from agentcron.core.storage.migrate import check_schema, require_database_file

    settings = read_settings()
    try:
        Keyring.from_setting(settings.secrets_key)
    except StartupError as exc:
        return exc.message

    async def schema() -> None:
        require_database_file(settings.database_url)  # and create no empty file (see there)
        db = Database.from_settings(settings)
        try:
            await check_schema(db)
        except SchedulerUnavailable:
            pass  # the service starts and reports 503 until the database is back
        finally:
            await db.dispose()

    try:
        ExecutionPolicy.from_settings(settings)  # a bad agents file or policy setting
        if not settings.disable_scheduler:
            check_sandbox(containment_from_settings(settings))
        asyncio.run(schema())
        if not settings.disable_scheduler and "sqlite" in settings.database_url.split(":", 1)[0]:
            lock = EngineLock(settings.database_url)
            lock.acquire()
            lock.release()
    except StartupError as exc:
        return exc.message
    return None


def serve(
    host: Annotated[str, typer.Option("--host", help="the address to listen on")] = "127.0.0.1",
    port: Annotated[int, typer.Option("--port", help="the TCP port to listen on")] = 8000,
) -> None:
    """Serve the HTTP API (and the scheduler loop, unless AGENTCRON_DISABLE_SCHEDULER=1).
    Ctrl-C drains the runs in progress; a second Ctrl-C stops at once (web.cli.shutdown)."""
    import uvicorn

    from agentcron.web.app import app_from_env
    from agentcron.web.cli.shutdown import Server

    _configure_logging()
    problem = _preflight()
    if problem is not None:
        _refuse(problem)
    # Bound here, before the app starts: a port it cannot have stops the start before the
    # engine claims a run (uvicorn binds after the app's start-up, and exits with status 3).
    sock = _listen(host, port)
    app = app_from_env()
    server = Server(uvicorn.Config(app, host=host, port=port, log_config=None), app)
    try:
        server.run(sockets=[sock])
    except KeyboardInterrupt:
        pass  # Ctrl-C: uvicorn shut down gracefully, then re-raised it (as uvicorn.run, exit 0)
    except SystemExit:
        if server.started:
            raise
        # uvicorn's own exit when the app's start-up failed: it logged why.
    finally:
        sock.close()
    if not server.started:
        _refuse("the application's start-up failed (the log lines above say why)")


def _refuse(problem: str) -> NoReturn:
    _log().error("startup_refused", reason=problem)
    fail(f"cannot start: {problem}", 2)


def _listen(host: str, port: int) -> socket.socket:
    """A TCP socket bound to ``host``:``port`` as uvicorn binds one (``SO_REUSEADDR``; IPv6
    for an address with a colon), or ``_refuse`` saying why it cannot be."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
    except OSError as exc:
        sock.close()
        if exc.errno == errno.EADDRINUSE:
            _refuse(
                f"port {port} on {host} is in use: another process listens there; stop it, "
                "or choose another port with --port"
            )
        reason = exc.strerror or str(exc)
        _refuse(f"port {port} on {host} cannot be listened on: {reason}; check --host and --port")
    return sock


def _safe_url(url: str) -> str:
    from sqlalchemy.engine import make_url

    return make_url(url).render_as_string(hide_password=True)
