"""The ``agentcron`` command line as an operator uses it: a real process talking HTTP to a real
``agentcron serve`` process. Times are checked in a fixed local zone (``TZ``), computed here
with zoneinfo rather than by the code under test."""

from __future__ import annotations

import asyncio
import fcntl
import json
import os
import pty
import re
import shlex
import struct
import subprocess
import sys
import termios
import time
import uuid
from collections.abc import Iterator
from dataclasses import replace
from datetime import datetime
from itertools import count
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

import pytest

from agentcron.core.keys import create_key
from agentcron.core.storage.database import Database
from tests.e2e.conftest import AGENTCRON, Server, free_port, migrate, sqlite_env, start_server
from tests.e2e.test_serve import readme_block

# The module's tests share one server: `make test` (--dist loadgroup) keeps them on one
# xdist worker, or each worker that got one of them would start a server of its own.
pytestmark = pytest.mark.xdist_group("cli-server")

LOCAL_ZONE = "America/New_York"  # the viewer's zone in these tests; DST starts 2026-03-08
# Variables that would change how rich prints (or which service the command reaches).
_PRINTING = ("NO_COLOR", "FORCE_COLOR", "TTY_COMPATIBLE", "TTY_INTERACTIVE", "COLUMNS", "TERM")
# One server for the module; each test is a different owner on it, so it sees only what it
# made (owners are isolated as in production) and no test pays for a server start.
OWNERS = tuple(f"cli-{index:02d}" for index in range(40))


@pytest.fixture(scope="module")
def shared_server(
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[tuple[Server, dict[str, str]]]:
    root: Path = tmp_path_factory.mktemp("cli-server")
    # Command runners allowed for every owner.
    env = sqlite_env(root, TRUSTED_OWNERS=",".join(("local", *OWNERS)))
    migrate(env)
    running = start_server(env, root / "server.log")
    yield running, asyncio.run(_keys(env["AGENTCRON_DATABASE_URL"]))
    running.stop()


async def _keys(url: str) -> dict[str, str]:
    """A key of each owner of ``OWNERS``, made at once in this process: an ``agentcron keys
    create`` process per test cost seconds each on a loaded machine (the command itself is
    run by the other e2e tests' ``make_key``)."""
    db = Database(url)
    try:
        return {owner: (await create_key(db, owner))[0] for owner in OWNERS}
    finally:
        await db.dispose()


_next_owner = count()


@pytest.fixture
def server(shared_server: tuple[Server, dict[str, str]]) -> Server:
    """The module's server, with the key of an owner no other test of the module uses."""
    running, keys = shared_server
    return replace(running, key=keys[OWNERS[next(_next_owner)]])


def client_env(server: Server | None = None, **extra: str) -> dict[str, str]:
    """The environment of an operator's shell: the service's URL and key exported (when a
    ``server`` is given), a known local zone, nothing that forces colors or a width."""
    env = {
        name: value
        for name, value in os.environ.items()
        if not name.startswith("AGENTCRON_") and name not in _PRINTING
    }
    env["TZ"] = LOCAL_ZONE
    if server is not None:
        assert server.key is not None
        env.update(AGENTCRON_URL=server.url, AGENTCRON_KEY=server.key)
    env.update(extra)
    return env


def cli(
    env: dict[str, str], *args: str, stdin: str | None = None
) -> subprocess.CompletedProcess[str]:
    """Run ``agentcron ARGS`` to completion, stdin closed (no terminal) unless given."""
    return subprocess.run(
        [AGENTCRON, *args],
        env=env,
        input=stdin,
        stdin=subprocess.DEVNULL if stdin is None else None,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def ok(env: dict[str, str], *args: str, stdin: str | None = None) -> str:
    """stdout of a command that must succeed, with no color codes (stdout is a pipe)."""
    done = cli(env, *args, stdin=stdin)
    assert done.returncode == 0, (args, done.stdout, done.stderr)
    assert "\x1b" not in done.stdout, done.stdout
    return done.stdout


def ok_json(env: dict[str, str], *args: str, stdin: str | None = None) -> Any:
    """The one JSON document a ``--json`` command prints, nothing else on stdout."""
    return json.loads(ok(env, *args, "--json", stdin=stdin))


def failed(env: dict[str, str], *args: str, code: int = 1, stdin: str | None = None) -> str:
    """stderr of a command that must fail with ``code``: one ``agentcron:`` message, no
    traceback, nothing on stdout."""
    done = cli(env, *args, stdin=stdin)
    assert done.returncode == code, (args, done.returncode, done.stdout, done.stderr)
    assert done.stdout == "", done.stdout
    assert "Traceback" not in done.stderr, done.stderr
    assert done.stderr.startswith("agentcron: "), done.stderr
    return done.stderr


def on_terminal(env: dict[str, str], *args: str, answer: bytes | None = None, code: int = 0) -> str:
    """Everything ``agentcron ARGS`` writes to a pseudo-terminal 200 columns wide (its stdin
    too); ``answer`` is typed once a ``[y/N]`` question shows."""
    leader, follower = pty.openpty()
    fcntl.ioctl(follower, termios.TIOCSWINSZ, struct.pack("HHHH", 50, 200, 0, 0))
    process = subprocess.Popen(
        [AGENTCRON, *args], env=env, stdin=follower, stdout=follower, stderr=follower
    )
    os.close(follower)
    seen = b""
    try:
        while True:
            try:
                chunk = os.read(leader, 65536)
            except OSError:  # EIO: the child closed the terminal
                break
            if not chunk:
                break
            seen += chunk
            if answer is not None and b"[y/N]" in seen:
                os.write(leader, answer)
                answer = None
    finally:
        os.close(leader)
    assert process.wait(timeout=30) == code, seen
    return seen.decode()


def local_stamp(value: str, zone: str = LOCAL_ZONE) -> str:
    """How the CLI should show the API timestamp ``value`` in ``zone``."""
    moment = datetime.fromisoformat(value).astimezone(ZoneInfo(zone))
    offset = moment.strftime("%z")
    return f"{moment:%Y-%m-%d %H:%M:%S} {offset[:3]}:{offset[3:]}"


def local_cell(value: str) -> str:
    """How a table cell (no offset; the header says "local") shows ``value``."""
    return f"{datetime.fromisoformat(value).astimezone(ZoneInfo(LOCAL_ZONE)):%Y-%m-%d %H:%M:%S}"


DIGEST = (
    "--name", "morning digest", "--prompt", "Summarise the news.",
    "--cron", "0 9 * * 1-5", "--tz", "Asia/Shanghai",
    "--command", "sh", "--command", "-c", "--command", "echo agent got: $(cat)",
)  # fmt: skip


# -- schedules -------------------------------------------------------------------------------


def test_schedule_add_list_show_pause_resume_delete(server: Server) -> None:
    env = client_env(server)
    created = ok_json(env, "schedules", "add", *DIGEST)
    schedule_id = created["id"]
    assert created["trigger"] == {"cron": "0 9 * * 1-5", "timezone": "Asia/Shanghai"}
    assert created["runner"] == {"type": "command", "argv": ["sh", "-c", "echo agent got: $(cat)"]}
    assert created["enabled"] is True

    table = ok(env, "schedules", "list")
    (row,) = [line for line in table.splitlines() if schedule_id in line]
    assert "morning digest" in row and "0 9 * * 1-5 Asia/Shanghai" in row and "active" in row
    assert local_cell(created["next_run"]) in row
    assert all(line == line.rstrip() for line in table.splitlines())  # no padding in a pipe
    listed = ok_json(env, "schedules", "list")
    assert [item["id"] for item in listed["items"]] == [schedule_id]
    assert listed["next_cursor"] is None

    shown = ok(env, "schedules", "show", schedule_id)
    assert "At 09:00, Monday through Friday, Asia/Shanghai" in shown
    # The next run in the viewer's zone and in the schedule's: 09:00 in Shanghai, always.
    shanghai = local_stamp(created["next_run"], "Asia/Shanghai")
    assert shanghai.endswith("09:00:00 +08:00")
    assert f"{local_stamp(created['next_run'])}  ({shanghai} Asia/Shanghai)" in shown
    assert "sh -c 'echo agent got: $(cat)'" in shown
    assert ok_json(env, "schedules", "show", schedule_id) == created

    paused = ok(env, "schedules", "pause", schedule_id, "--note", "holiday week")
    assert re.search(r"state\s+paused since .*: holiday week", paused), paused
    state = ok_json(env, "schedules", "show", schedule_id)
    assert state["enabled"] is False and state["next_run"] is None
    assert state["paused_note"] == "holiday week"
    resumed = ok_json(env, "schedules", "resume", schedule_id)
    assert resumed["enabled"] is True and resumed["next_run"] == created["next_run"]

    # No terminal to ask on: a delete needs --yes, and nothing is deleted without it.
    refused = failed(env, "schedules", "delete", schedule_id, code=2)
    assert "--yes" in refused
    ok_json(env, "schedules", "show", schedule_id)
    assert ok(env, "schedules", "delete", schedule_id, "--yes").strip() == f"deleted {schedule_id}"
    gone = failed(env, "schedules", "show", schedule_id)
    assert "HTTP 404 NotFound" in gone and schedule_id in gone


def test_schedule_add_from_a_file_and_options_and_every_page(server: Server) -> None:
    env = client_env(server)
    body = {
        "name": "from a file",
        "prompt": "p",
        "trigger": {"every_seconds": 3600},
        "runner": {"type": "command", "argv": ["cat"]},
        "notify": [{"type": "file", "path": "log.jsonl"}],
    }
    # Options given beside --file replace the file's fields.
    made = ok_json(
        env, "schedules", "add", "--file", "-", "--name", "renamed", "--timeout", "60",
        "--paused", "--mode", "persistent", "--max-attempts", "1",
        stdin=json.dumps(body),
    )  # fmt: skip
    assert made["name"] == "renamed" and made["timeout_seconds"] == 60
    assert made["enabled"] is False and made["mode"] == "persistent"
    assert made["overlap"] == "skip" and made["max_attempts"] == 1
    assert made["trigger"]["every_seconds"] == 3600 and made["notify"][0]["path"] == "log.jsonl"

    at = "2030-01-02T03:04:05+01:00"
    one_shot = ok_json(
        env, "schedules", "add", "--name", "once", "--prompt", "p", "--at", at,
        "--command", "env", "--env", "GREETING=hi there", "--overlap", "skip",
    )  # fmt: skip
    assert one_shot["runner"] == {
        "type": "command",
        "argv": ["env"],
        "env": {"GREETING": "hi there"},
    }
    assert datetime.fromisoformat(one_shot["next_run"]) == datetime.fromisoformat(at)
    ok_json(env, "schedules", "add", *DIGEST)

    first_page = ok_json(env, "schedules", "list", "--limit", "1")
    assert len(first_page["items"]) == 1 and first_page["next_cursor"]
    everything = ok_json(env, "schedules", "list", "--limit", "1", "--all")
    assert everything["next_cursor"] is None
    assert [item["name"] for item in everything["items"]] == ["morning digest", "once", "renamed"]
    # A first page says on stderr that more exist; every page, or one holding all, does not.
    first = cli(env, "schedules", "list", "--limit", "2")
    assert first.returncode == 0, first.stderr
    assert "once" in first.stdout and "renamed" not in first.stdout
    assert "the first 2 schedules shown; there are more: --all lists every page" in first.stderr
    whole = cli(env, "schedules", "list", "--limit", "2", "--all")
    table = whole.stdout
    assert "there are more" not in whole.stderr
    assert (
        "paused" in table and "every 3600 s" in table and "at 2030-01-01 21:04:05 -05:00" in table
    )
    assert "there are more" not in cli(env, "schedules", "list", "--limit", "50").stderr


def test_preview_shows_due_times_in_the_zone_and_locally(server: Server) -> None:
    env = client_env(server)
    after = "2026-03-06T00:00:00Z"  # a Friday, 08:00 in Shanghai
    args = ("preview", "0 9 * * 1-5", "--tz", "Asia/Shanghai", "--count", "3", "--after", after)
    preview = ok_json(env, *args)
    assert preview["description"] == "At 09:00, Monday through Friday, Asia/Shanghai"
    instants = [datetime.fromisoformat(item) for item in preview["next"]]
    assert instants == [
        datetime.fromisoformat("2026-03-06T01:00:00+00:00"),  # Friday 09:00 in Shanghai
        datetime.fromisoformat("2026-03-09T01:00:00+00:00"),  # Monday, after the weekend
        datetime.fromisoformat("2026-03-10T01:00:00+00:00"),
    ]

    table = ok(env, *args).splitlines()
    assert table[0] == preview["description"]
    # The local column crosses New York's change to daylight saving time (2026-03-08).
    assert re.fullmatch(
        r"1\s+Fri 2026-03-06 09:00:00 \+08:00\s+Thu 2026-03-05 20:00:00 -05:00", table[2]
    ), table
    assert re.fullmatch(
        r"2\s+Mon 2026-03-09 09:00:00 \+08:00\s+Sun 2026-03-08 21:00:00 -04:00", table[3]
    ), table
    assert len(table) == 5

    every = ok_json(env, "preview", "--every", "90", "--count", "2")
    assert len(every["next"]) == 2 and every["description"] == "Every 90 seconds"
    shown = ok(env, "preview", "--at", "2030-01-02T03:04:05+01:00")
    assert "Tue 2030-01-01 21:04:05 -05:00" in shown


# -- runs ------------------------------------------------------------------------------------


@pytest.mark.slow
def test_run_now_history_replay_and_cancel(server: Server) -> None:
    env = client_env(server)
    schedule_id = ok_json(env, "schedules", "add", *DIGEST)["id"]

    waited = cli(env, "schedules", "run", schedule_id, "--wait")
    assert waited.returncode == 0, waited.stderr
    assert re.search(r"status\s+succeeded", waited.stdout)
    assert "agent got: Summarise the news." in waited.stdout

    (run,) = ok_json(env, "runs", "list", schedule_id)["items"]
    assert run["status"] == "succeeded" and run["trigger"] == "manual"
    assert run["output"] == "agent got: Summarise the news.\n"
    history = ok(env, "runs", "list", schedule_id)
    (row,) = [line for line in history.splitlines() if run["id"] in line]
    assert "manual" in row and "succeeded" in row
    assert local_cell(run["started_at"]) in row
    assert ok_json(env, "runs", "show", run["id"]) == run
    shown = ok(env, "runs", "show", run["id"])
    assert re.search(rf"started\s+{re.escape(local_stamp(run['started_at']))}", shown), shown

    replay = ok_json(env, "runs", "replay", run["id"], "--wait")
    assert replay["trigger"] == "replay" and replay["replay_of"] == run["id"]
    assert replay["status"] == "succeeded" and replay["output"] == run["output"]
    filtered = ok_json(env, "runs", "list", schedule_id, "--trigger", "replay")["items"]
    assert [item["id"] for item in filtered] == [replay["id"]]
    both = ok_json(env, "runs", "list", schedule_id, "--trigger", "replay", "--trigger", "manual")
    assert [item["id"] for item in both["items"]] == [replay["id"], run["id"]]
    assert ok_json(env, "runs", "list", schedule_id, "--status", "failed")["items"] == []
    shown_ids = ok(env, "runs", "list", schedule_id, "--hide-skipped", "--origin", "manual")
    assert run["id"] in shown_ids and replay["id"] not in shown_ids

    conflict = failed(env, "runs", "cancel", run["id"])
    assert "HTTP 409 Conflict" in conflict and f"run {run['id']} already finished" in conflict
    assert failed(env, "runs", "cancel", run["id"], "--json") == conflict


@pytest.mark.slow
def test_cancel_a_running_run_and_wait_for_a_failing_one(server: Server) -> None:
    env = client_env(server)
    slow = ok_json(
        env, "schedules", "add", "--name", "slow", "--prompt", "p", "--cron", "0 0 1 1 *",
        "--command", "sleep", "--command", "30",
    )  # fmt: skip
    queued = ok_json(env, "schedules", "run", slow["id"])
    assert queued["status"] in ("pending", "running")
    ok_json(env, "runs", "cancel", queued["id"])
    deadline = time.monotonic() + 20
    while (run := ok_json(env, "runs", "show", queued["id"]))["status"] != "cancelled":
        assert time.monotonic() < deadline, run
        time.sleep(0.3)

    failing = ok_json(
        env, "schedules", "add", "--name", "failing", "--prompt", "p", "--cron", "0 0 1 1 *",
        "--command", "sh", "--command", "-c", "--command", "echo broken >&2; exit 3",
    )  # fmt: skip
    done = cli(env, "schedules", "run", failing["id"], "--wait", "--json")
    assert done.returncode == 1, done.stderr
    assert json.loads(done.stdout)["status"] == "failed"
    assert done.stderr.startswith("agentcron: run ") and " failed: " in done.stderr


@pytest.mark.slow
def test_skip_backfill_and_resume_with_catch_up(server: Server) -> None:
    # The timeline commands (issue 8): skip one upcoming due time and put it back, backfill a
    # past range (dry run first), resume with a catch-up choice.
    env = client_env(server)
    created = ok_json(env, "schedules", "add", *DIGEST)
    schedule_id = created["id"]
    upcoming = created["next_run"]

    skipped = ok_json(env, "schedules", "skip", schedule_id, upcoming)
    assert (skipped["status"], skipped["reason"]) == ("skipped", "occurrence_skipped")
    assert "will run" in ok(env, "schedules", "skip", schedule_id, upcoming, "--undo")

    hourly = ok_json(
        env, "schedules", "add", "--name", "hourly", "--prompt", "p",
        "--every", "3600", "--start-at", "2026-01-01T00:00:00Z", "--command", "true",
    )  # fmt: skip
    window = ("--start", "2026-01-01T00:00:00Z", "--end", "2026-01-01T03:00:00Z")
    dry = ok_json(env, "schedules", "backfill", hourly["id"], *window, "--dry-run")
    assert dry["dry_run"] is True and len(dry["due_times"]) == 3
    text = ok(env, "schedules", "backfill", hourly["id"], *window)
    assert "queued 3 run(s)" in text

    ok(env, "schedules", "pause", schedule_id)
    plan = ok_json(env, "schedules", "resume", schedule_id, "--catchup", "latest", "--dry-run")
    assert plan["catchup"] == "latest" and plan["run"] == []
    assert "would run" in ok(env, "schedules", "resume", schedule_id, "--dry-run")
    assert ok_json(env, "schedules", "resume", schedule_id, "--catchup", "all")["enabled"] is True
    bad_choice = cli(env, "schedules", "resume", schedule_id, "--catchup", "sometimes")
    assert bad_choice.returncode == 2 and "--catchup" in bad_choice.stderr


def test_readme_command_line_example_works(server: Server) -> None:
    env = client_env(server)
    lines = readme_block("cli").strip().splitlines()
    assert all(line.startswith("agentcron ") for line in lines), lines
    outputs: list[str] = []
    schedule_id = ""
    for line in lines:
        argv = shlex.split(line.replace("SCHEDULE_ID", schedule_id))[1:]
        outputs.append(ok(env, *argv))
        if argv[:2] == ["schedules", "add"]:
            shown_id = re.search(r"^id\s+(\S+)$", outputs[-1], re.M)
            assert shown_id, outputs[-1]
            schedule_id = shown_id.group(1)
    assert "agent got: hello agent" in outputs[2]
    assert "succeeded" in outputs[3]
    assert "At 09:00, Monday through Friday, Asia/Shanghai" in outputs[4]


# -- errors ----------------------------------------------------------------------------------


def test_api_errors_exit_1_with_the_api_message(server: Server) -> None:
    env = client_env(server)
    bad_cron = failed(env, "schedules", "add", *DIGEST, "--cron", "0 8 * *")
    assert bad_cron.startswith("agentcron: HTTP 422 InvalidSchedule: cron has 5 fields")
    assert "(field: trigger.cron)" in bad_cron
    assert failed(env, "preview", "61 * * * *", "--json").startswith(
        "agentcron: HTTP 422 InvalidSchedule"
    )
    bad_value = failed(env, "schedules", "add", *DIGEST, "--timeout", "0")
    assert "HTTP 422 ValidationError" in bad_value and "(field: timeout_seconds)" in bad_value

    missing = str(uuid.uuid4())
    for args in (("schedules", "show", missing), ("runs", "show", missing)):
        assert "HTTP 404 NotFound" in failed(env, *args)
        assert "HTTP 404 NotFound" in failed(env, *args, "--json")

    wrong_key = failed(env, "schedules", "list", "--key", "ac_000000000000_wrong")
    assert "HTTP 401 Unauthorized" in wrong_key and "AGENTCRON_KEY" in wrong_key
    assert "ac_000000000000_wrong" not in wrong_key


def test_usage_errors_exit_2(server: Server) -> None:
    env = client_env(server)
    assert "--tz goes with --cron" in failed(
        env, "schedules", "add", "--name", "x", "--prompt", "p", "--every", "60", "--tz", "UTC",
        "--command", "cat", code=2,
    )  # fmt: skip
    assert "one trigger" in failed(
        env, "schedules", "add", "--name", "x", "--prompt", "p", "--every", "60",
        "--cron", "* * * * *", "--command", "cat", code=2,
    )  # fmt: skip
    assert "missing --name" in failed(env, "schedules", "add", "--every", "60", code=2)
    assert "not JSON" in failed(env, "schedules", "add", "--file", "-", stdin="{", code=2)
    # Typer's own checks: an option out of range.
    assert cli(env, "schedules", "list", "--limit", "0").returncode == 2
    assert ok_json(env, "schedules", "list") == {"items": [], "next_cursor": None}


def test_without_a_key_or_a_service_the_client_says_so() -> None:
    url = f"http://127.0.0.1:{free_port()}"
    # No key: a usage error (2) naming where a key goes.
    env = client_env(AGENTCRON_URL=url)
    message = failed(env, "schedules", "list", code=2)
    assert "AGENTCRON_KEY" in message and "--key" in message
    assert "AGENTCRON_KEY" in failed(env, "preview", "* * * * *", "--json", code=2)
    # No service at the URL: 1, naming it.
    env = client_env(AGENTCRON_KEY="ac_000000000000_x")
    for args in (("schedules", "list", "--url", url), ("runs", "show", "x", "--url", url)):
        message = failed(env, *args)
        assert url in message and "cannot connect" in message
    assert url in failed(client_env(AGENTCRON_KEY="k", AGENTCRON_URL=url), "preview", "@daily")


# -- terminals -------------------------------------------------------------------------------


def test_colors_and_the_delete_question_are_for_a_terminal_only(server: Server) -> None:
    env = client_env(server, TERM="xterm-256color")
    schedule_id = ok_json(env, "schedules", "add", *DIGEST)["id"]
    green = "\x1b[32mactive"
    assert green in on_terminal(env, "schedules", "list")
    assert "\x1b" not in ok(env, "schedules", "list")  # a pipe: no escape codes at all
    env["NO_COLOR"] = "1"
    plain = on_terminal(env, "schedules", "list")
    assert "active" in plain and not re.search(r"\x1b\[[0-9;]*3[0-9]m", plain)

    kept = on_terminal(env, "schedules", "delete", schedule_id, answer=b"n\n", code=1)
    assert f"Delete schedule 'morning digest' ({schedule_id})?" in kept
    assert "agentcron: not deleted" in kept
    ok_json(env, "schedules", "show", schedule_id)
    assert f"deleted {schedule_id}" in on_terminal(
        env, "schedules", "delete", schedule_id, answer=b"y\n"
    )
    assert "HTTP 404" in failed(env, "schedules", "show", schedule_id)


@pytest.mark.parametrize(
    ("imports", "server_side"),
    [
        (
            "agentcron.web.cli",
            ("agentcron.core", "sqlalchemy", "alembic", "fastapi", "uvicorn", "structlog"),
        ),
        # `agentcron mcp` also reads core's request models (its tools' schemas), nothing more;
        # the MCP SDK brings uvicorn along.
        (
            "agentcron.web.cli.mcp, agentcron.web.mcp.server, mcp.server.stdio",
            ("sqlalchemy", "alembic", "fastapi", "structlog", "asyncpg"),
        ),
    ],
    ids=["cli", "mcp"],
)
def test_http_commands_do_not_load_the_server_side(
    imports: str, server_side: tuple[str, ...]
) -> None:
    # The client runs where only the URL and a key are known: no settings, no database driver.
    probe = (
        f"import sys, {imports}; "
        f"print(sorted(m for m in sys.modules"
        f" if any(m == p or m.startswith(p + '.') for p in {server_side!r})))"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, timeout=60, check=True
    )
    assert done.stdout.strip() == "[]"


# -- issue 17: a newcomer's reading of --help and of a first page ------------------------------


@pytest.mark.parametrize(
    "command", [[], ["schedules"], ["schedules", "list"], ["runs", "list"], ["keys", "create"]]
)
def test_help_shows_no_type_beside_a_flag(command: list[str]) -> None:
    # A flag takes no value: "--help -h <bool>" read as if one had to be typed.
    text = ok(client_env(), *command, "--help")
    assert "<bool>" not in text, text
    assert "--help" in text
    if command == ["schedules", "list"]:
        assert "<int range>" in text  # options that take a value still say which
