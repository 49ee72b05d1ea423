"""The README's PostgreSQL quickstart, run as written against this machine's PostgreSQL: its two
blocks in ``sh`` from the checkout, then what the README says to expect, checked.

Only what a reader's machine would differ in is replaced: the database's name (one of this
test's own, dropped at the end), the server's host, port and role (``AGENTCRON_TEST_PG_URL``'s),
the two ports (free ones) and ``.venv/bin/agentcron`` (this interpreter's executable, which is
that path in a checkout). PostgreSQL unreachable: skipped, or failed under
``AGENTCRON_REQUIRE_PG=1`` as every PostgreSQL test is.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from sqlalchemy.engine import make_url

from tests.conftest import PG_URL, PgServer, clone_pg, run_sql
from tests.e2e.conftest import AGENTCRON, free_port, processes_with, wait_until
from tests.e2e.test_serve import REPO, readme_block

pytestmark = pytest.mark.slow


@pytest.fixture
async def database_name(pg_server: PgServer | None) -> AsyncIterator[str]:
    """A name for the quickstart's database, unique to this test; whatever the quickstart
    created under it is dropped afterwards."""
    if pg_server is None:
        await clone_pg(pg_server)  # skips (or fails under AGENTCRON_REQUIRE_PG=1)
    name = f"agentcron_qs_{uuid.uuid4().hex[:12]}"
    try:
        yield name
    finally:
        await run_sql(PG_URL, f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def as_here(block: str, database: str, ports: tuple[int, int]) -> str:
    """A README block with this machine's names in place of the README's."""
    url = make_url(PG_URL)
    host, port, user = url.host or "127.0.0.1", url.port or 5432, url.username or "postgres"
    replaced = (
        block.replace(".venv/bin/agentcron", AGENTCRON)
        .replace(
            "createdb -h 127.0.0.1 -U postgres agentcron",
            f"createdb -h {host} -p {port} -U {user} {database}",
        )
        .replace(
            "postgresql://postgres@127.0.0.1:5432/agentcron",
            f"postgresql://{user}@{host}:{port}/{database}",
        )
        .replace("127.0.0.1:8001", f"127.0.0.1:{ports[0]}")
        .replace("--port 8001", f"--port {ports[0]}")
        .replace("127.0.0.1:8002", f"127.0.0.1:{ports[1]}")
        .replace("--port 8002", f"--port {ports[1]}")
    )
    assert database in replaced or "createdb" not in block, "the README's names moved"
    return replaced


def json_documents(text: str) -> list[Any]:
    """The JSON documents curl printed one after another (no separator between them)."""
    decoder = json.JSONDecoder()
    found, at = [], 0
    text = text.strip()
    while at < len(text):
        document, at = decoder.raw_decode(text, at)
        found.append(document)
        while at < len(text) and text[at].isspace():
            at += 1
    return found


def serving(port: int) -> str:
    """What ``/proc/<pid>/cmdline`` holds for ``agentcron serve --port PORT`` (words end in NUL)."""
    return f"serve\x00--port\x00{port}\x00"


@pytest.fixture
def replicas() -> Iterator[list[int]]:
    """The ports of the quickstart's replicas; any still serving at the end is killed."""
    ports = [free_port(), free_port()]
    while ports[1] == ports[0]:
        ports[1] = free_port()
    yield ports
    for port in ports:
        for pid in processes_with(serving(port)):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)


def ready(port: int) -> bool:
    try:
        return httpx.get(f"http://127.0.0.1:{port}/readyz", timeout=2).status_code == 200
    except httpx.TransportError:
        return False


def test_the_postgresql_quickstart_runs_as_written(
    database_name: str, replicas: list[int], tmp_path: Path
) -> None:
    began = time.monotonic()
    ports = (replicas[0], replicas[1])
    setup = as_here(readme_block("postgres"), database_name, ports)
    check = as_here(readme_block("postgres-check"), database_name, ports)
    # The reader's shell: no AGENTCRON_* of this test run, in the checkout. Between the blocks
    # the reader waits for the replicas to answer; the script does, as the README says to.
    env = {key: value for key, value in os.environ.items() if not key.startswith("AGENTCRON_")}
    wait = "".join(
        f"until curl -sf http://127.0.0.1:{port}/readyz > /dev/null; do sleep 0.2; done\n"
        for port in ports
    )
    log, out, key_file = (tmp_path / name for name in ("quickstart.log", "check.out", "key"))
    # Test-only lines: the key the setup exported, and the check's answers, kept for reading.
    keep_key = f'printf %s "$AGENTCRON_KEY" > {key_file}\n'
    script = f"set -e\n{setup}\n{wait}{keep_key}{{\n{check}\n}} > {out}\n"
    with log.open("wb") as log_file:
        # The replicas outlive the script (as they outlive the reader's paste): their output
        # goes to the log file, never to a pipe the test would wait on.
        done = subprocess.run(
            ["sh", "-c", script],
            cwd=REPO,
            env=env,
            stdout=log_file,
            stderr=subprocess.STDOUT,
            timeout=90,
        )
    assert done.returncode == 0, log.read_text()[-4000:]
    created, listed = json_documents(out.read_text())
    assert created["name"] == "replicated echo", created
    # The second replica lists what the first created: one database.
    assert [item["id"] for item in listed["items"]] == [created["id"]]
    assert all(ready(port) for port in ports)
    setup_took = time.monotonic() - began
    headers = {"Authorization": f"Bearer {key_file.read_text()}"}
    runs_url = f"http://127.0.0.1:{ports[1]}/api/v1/schedules/{created['id']}/runs"

    def succeeded() -> list[dict[str, Any]]:
        items = httpx.get(runs_url, headers=headers, timeout=5).json()["items"]
        return [run for run in items if run["status"] == "succeeded"]

    # Every 10 s one run, on one replica or the other, its output naming it; never twice.
    first = wait_until(lambda: len(succeeded()) >= 2 and succeeded(), "two runs", 40)
    for run in first:
        assert run["output"].endswith(" got: hello replicas\n"), run
    assert len({run["due_at"] for run in first}) == len(first)

    # Stop the first replica: the second runs every due time from then on.
    [first_pid] = processes_with(serving(ports[0]))
    os.kill(first_pid, signal.SIGTERM)
    wait_until(lambda: not processes_with(serving(ports[0])), "the first to stop", 40)
    stopped_at = len(succeeded())
    later = wait_until(
        lambda: len(succeeded()) >= stopped_at + 1 and succeeded(), "a run after the stop", 30
    )
    [second_pid] = processes_with(serving(ports[1]))
    newest = later[0]  # newest first
    assert newest["output"].split(" ", 1)[0].split("-")[-2] == str(second_pid), newest
    runs = httpx.get(runs_url, headers=headers, timeout=5).json()["items"]
    due = [run["due_at"] for run in runs if run["due_at"] is not None]
    assert len(due) == len(set(due)), runs
    assert "Traceback" not in log.read_text()
    print(
        f"PostgreSQL quickstart: set-up and check {setup_took:.1f} s, "
        f"all {time.monotonic() - began:.1f} s"
    )
