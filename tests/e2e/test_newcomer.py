"""A newcomer's first minutes, with the real ``agentcron`` executable as a user runs it: the
database URL as they paste it, a database that is missing or not migrated, commands run from
another directory. Each answer is one plain line and an exit status, never a traceback. (How
a URL without a driver is read: tests/unit/test_database_url.py.)"""

from __future__ import annotations

import os
import sqlite3
import subprocess
import uuid
from pathlib import Path

import pytest
from cryptography.fernet import Fernet
from sqlalchemy.engine import make_url

from tests.conftest import PG_URL, PgServer, clone_pg
from tests.e2e.conftest import AGENTCRON, start_server

pytestmark = pytest.mark.slow


def agentcron(
    *args: str, database_url: str | None, cwd: Path, timeout: float = 60, **extra: str
) -> subprocess.CompletedProcess[str]:
    """``agentcron ARGS`` in ``cwd`` with no AGENTCRON_* variable but ``database_url`` (none:
    the default) and ``extra`` (names without the prefix), as in a newcomer's shell."""
    env = {key: value for key, value in os.environ.items() if not key.startswith("AGENTCRON_")}
    if database_url is not None:
        env["AGENTCRON_DATABASE_URL"] = database_url
    env.update({f"AGENTCRON_{key}": value for key, value in extra.items()})
    return subprocess.run(
        [AGENTCRON, *args], env=env, cwd=cwd, capture_output=True, text=True, timeout=timeout
    )


def assert_plain(done: subprocess.CompletedProcess[str], status: int) -> str:
    """The exit status is ``status`` and nothing printed a traceback; returns all the output."""
    output = done.stdout + done.stderr
    assert done.returncode == status, output
    assert "Traceback" not in output, output
    return output


def server_url(database: str) -> str:
    """A URL of ``database`` on the test PostgreSQL server, without a driver, as pasted."""
    url = make_url(PG_URL).set(database=database)
    return f"postgresql://{url.render_as_string(hide_password=False).split('://', 1)[1]}"


# -- 2. a PostgreSQL database that does not exist ----------------------------------------------


def the_line(output: str, prefix: str) -> str:
    """The one line of ``output`` that starts with ``prefix``."""
    lines = [line for line in output.splitlines() if line.startswith(prefix)]
    assert len(lines) == 1, output
    return lines[0]


def one_line(output: str, needle: str) -> str:
    """The one ``agentcron:`` message of ``output``, which holds ``needle``."""
    line = the_line(output, "agentcron:")
    assert needle in line, output
    return line


@pytest.mark.parametrize("command", [["migrate"], ["serve", "--port", "0"], ["keys", "list"]])
async def test_a_missing_postgresql_database_is_named_with_its_remedy(
    pg_server: PgServer | None, tmp_path: Path, command: list[str]
) -> None:
    if pg_server is None:
        await clone_pg(pg_server)  # skips (or fails under AGENTCRON_REQUIRE_PG=1)
    name = f"agentcron_nc_missing_{uuid.uuid4().hex[:12]}"  # never created
    url = make_url(PG_URL).set(database=name)
    done = agentcron(*command, database_url=server_url(name), cwd=tmp_path)
    line = one_line(assert_plain(done, 2), f'database "{name}" does not exist')
    assert f"on {url.host}:{url.port or 5432}" in line
    assert f"create it with: createdb -h {url.host}" in line and line.endswith(name)
    assert "listen_unavailable" not in done.stderr  # serve refused instead of starting


# -- 3. commands run where there is no database, or an empty one ------------------------------

COMMANDS = [
    ["keys", "list"],
    ["keys", "create", "--owner", "local"],
    ["keys", "revoke", "ac_000000000000"],
    ["example"],
    ["secrets-rotate"],
    ["serve", "--port", "0"],
]


@pytest.mark.parametrize("empty", [False, True], ids=["no-file", "empty-file"])
@pytest.mark.parametrize("command", COMMANDS, ids=lambda command: " ".join(command))
def test_without_a_migrated_database_says_migrate_first(
    tmp_path: Path, command: list[str], empty: bool
) -> None:
    # No file: the default URL, ./var/agentcron.db, from a directory that has none.
    path = tmp_path / "empty.db"
    if empty:
        sqlite3.connect(path).close()
    url = f"sqlite:///{path}" if empty else None
    done = agentcron(*command, database_url=url, cwd=tmp_path, SECRETS_KEY=secrets_key())
    line = one_line(assert_plain(done, 2), "run `agentcron migrate`")
    if empty:
        assert f"the database {path} is at schema nothing" in line
    else:
        assert str(tmp_path / "var" / "agentcron.db") in line
        assert not (tmp_path / "var").exists()  # neither the file nor its directory


def secrets_key() -> str:
    return Fernet.generate_key().decode()


# -- 5. the hint `agentcron example` prints can be typed as printed ----------------------------


def test_the_another_key_hint_runs_as_printed(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'agentcron.db'}"
    assert_plain(agentcron("migrate", database_url=url, cwd=tmp_path), 0)
    assert_plain(agentcron("example", database_url=url, cwd=tmp_path), 0)  # makes the first key
    again = assert_plain(agentcron("example", database_url=url, cwd=tmp_path), 0)
    hint = the_line(again, "# Another one: ").removeprefix("# Another one: ")
    # The shell of `make run`: .venv/bin is not on PATH.
    venv_bin = str(Path(AGENTCRON).parent)
    path = os.pathsep.join(p for p in os.environ["PATH"].split(os.pathsep) if p != venv_bin)
    done = subprocess.run(
        ["sh", "-c", hint],
        env={**os.environ, "PATH": path, "AGENTCRON_DATABASE_URL": url},
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert_plain(done, 0)
    assert done.stdout.strip().splitlines()[-1].startswith("ac_")


# -- 6. start-up logs are what an operator needs -----------------------------------------------


def test_migrate_and_serve_do_not_narrate_alembic(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'agentcron.db'}"
    migrated = assert_plain(agentcron("migrate", database_url=url, cwd=tmp_path), 0)
    assert "alembic" not in migrated and '"migrated"' in migrated
    env = {**os.environ, "AGENTCRON_DATABASE_URL": url, "AGENTCRON_DATA_DIR": str(tmp_path)}
    server = start_server(env, tmp_path / "serve.log")
    server.stop()
    started = server.log()
    assert "Application startup complete" in started and "alembic" not in started, started
    verbose = agentcron("migrate", database_url=url, cwd=tmp_path, LOG_LEVEL="DEBUG")
    assert "alembic" in assert_plain(verbose, 0)  # still there for whoever asks
