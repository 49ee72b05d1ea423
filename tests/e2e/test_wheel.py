"""The built wheel, installed into fresh virtualenvs outside the repository.

What a host gets from ``pip install agentcron``: one top-level package, ``agentcron`` (no
``core`` or ``web`` beside the host's own), the migrations inside it. With no extra, at most
the number of packages docs/library.md gives, and the library example of that page runs to a
fired run; each feature whose extra is missing says which one to install, in one line. With
``[all]``, an ``agentcron`` command that migrates and serves the API, the dashboard, MCP and
metrics with nothing of the checkout on its path. One virtualenv of each kind per test run.
"""

from __future__ import annotations

import fcntl
import json
import os
import re
import shutil
import subprocess
import sys
import zipfile
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.conftest import bearer
from tests.e2e.conftest import captured, start_server, wait_until

REPO = Path(__file__).resolve().parents[2]
LIBRARY_MD = REPO / "docs" / "library.md"
# The bound the issue set for the base install; docs/library.md gives the figure the test holds.
MOST_PACKAGES = 30
# One worker builds the wheel and the two virtualenvs and runs every test of this module
# (--dist loadgroup); the build lock below is for a run without it.
pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("wheel")]


@pytest.fixture(scope="session")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The wheel, built once per test run. Under xdist the tests of this module may run on
    different workers at once, and two setuptools builds in one tree race on its ``build/``
    and ``*.egg-info`` (one fails, the other packs the egg-info): so the workers share one
    build, under a lock, made from a copy of the tree that leaves the checkout untouched."""
    base = tmp_path_factory.getbasetemp()
    shared = base.parent if "PYTEST_XDIST_WORKER" in os.environ else base  # one run's workers
    out = shared / "wheel"
    with (shared / "wheel.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not list(out.glob("agentcron-*.whl")):
            source = shared / "wheel-source"
            shutil.rmtree(source, ignore_errors=True)
            shutil.copytree(REPO, source, symlinks=True, ignore=UNPACKAGED)
            built = captured([*PIP, "wheel", "-q", "--no-deps", "-w", str(out), str(source)], 300)
            assert built.returncode == 0, built.stderr
    (built,) = out.glob("agentcron-*.whl")
    return built


UNPACKAGED = shutil.ignore_patterns(
    ".git", ".venv", "build", "dist", "var", "bench", "tests", "*.egg-info", "__pycache__",
    ".*_cache",
)  # fmt: skip


def test_the_wheel_holds_one_package_and_its_migrations(wheel: Path) -> None:
    names = zipfile.ZipFile(wheel).namelist()
    assert {name.split("/")[0] for name in names} == {"agentcron", wheel_info(wheel)}
    assert "agentcron/migrations/env.py" in names
    assert "agentcron/migrations/script.py.mako" in names
    versions = [name for name in names if name.startswith("agentcron/migrations/versions/")]
    assert len(versions) == len(list((REPO / "migrations" / "versions").glob("*.py")))
    assert "agentcron/web/dashboard/templates/base.html" in names
    assert "agentcron/py.typed" in names


def wheel_info(wheel: Path) -> str:
    name, version = wheel.name.split("-")[:2]
    return f"{name}-{version}.dist-info"


@dataclass(frozen=True)
class Venv:
    """A virtualenv outside the checkout holding the wheel (with extras or without)."""

    path: Path

    def bin(self, name: str) -> str:
        return str(self.path / "bin" / name)

    def packages(self) -> list[str]:
        """The distributions installed, pip and setuptools not counted (agentcron is)."""
        listed = captured([*PIP, "--python", self.bin("python"), "list", "--format", "json"], 120)
        assert listed.returncode == 0, listed.stderr
        names = [item["name"].lower() for item in json.loads(listed.stdout)]
        return sorted(name for name in names if name not in ("pip", "setuptools"))


# The test run's pip installs into each virtualenv (`--python`), which is then made without
# one of its own (ensurepip costs about 8 s) and gets no bytecode compiled at install (about
# 20 s for every extra; what a test imports is compiled on its first import instead). What is
# installed, and from where, is pip's usual choice.
PIP = [sys.executable, "-m", "pip"]


def make_venv(path: Path, *requirement: str) -> Venv:
    """A virtualenv at ``path`` without a pip of its own, ``requirement`` (pip install's
    arguments) installed into it by the test run's pip."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(path)], check=True)
    # pip's own bound is 600 s: on a loaded machine the install alone may take minutes.
    pip = captured([*PIP, "--python", str(path / "bin" / "python"), "install", *requirement], 600)
    assert pip.returncode == 0, pip.stderr
    assert "BuildBackendWarning" not in pip.stderr, pip.stderr
    return Venv(path)


@pytest.fixture(scope="session")
def slim(wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> Venv:
    """The wheel alone: what `pip install agentcron` gives a host."""
    return make_venv(tmp_path_factory.mktemp("slim") / "venv", "-q", "--no-compile", str(wheel))


@pytest.fixture(scope="session")
def full(wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> Venv:
    """The wheel with every extra: `pip install 'agentcron[all]'`."""
    return make_venv(
        tmp_path_factory.mktemp("full") / "venv", "-q", "--no-compile", f"{wheel}[all]"
    )


def host_env(venv: Venv, home: Path) -> dict[str, str]:
    """The environment of a process of the host in ``home``: nothing of this test run's
    agentcron settings or Python paths, the venv's commands first on PATH."""
    env = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith(("AGENTCRON_", "PYTHON", "VIRTUAL_ENV"))
    }
    env.update(
        PATH=f"{venv.path / 'bin'}{os.pathsep}{env.get('PATH', '')}",
        AGENTCRON_DATABASE_URL=f"sqlite:///{home / 'agentcron.db'}",
        AGENTCRON_DATA_DIR=str(home / "data"),
        AGENTCRON_LOG_FORMAT="json",
    )
    return env


def imported_from(venv: Venv, module: str, **options: Any) -> str:
    """The file the venv's python imports ``module`` from."""
    done = captured(
        [venv.bin("python"), "-c", f"import {module} as m; print(m.__file__)"], **options
    )
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def host_home(tmp_path: Path) -> Path:
    home = tmp_path / "host"  # the host's own directory: nothing of the checkout in it
    home.mkdir()
    return home


def documented_bound() -> int:
    """The most packages docs/library.md says the base install brings."""
    found = re.search(r"at most (\d+) packages", LIBRARY_MD.read_text())
    assert found, "docs/library.md gives no bound on the base install's packages"
    return int(found.group(1))


def slim_check(venv: Venv, home: Path, *args: str) -> dict[str, Any]:
    """Run a check of tests/e2e/slim_checks.py with the venv's python, from ``home`` (a copy
    of the script there: nothing of the checkout is on its path); its JSON answer."""
    script = home / "slim_checks.py"
    shutil.copy(Path(__file__).with_name("slim_checks.py"), script)
    env = {**host_env(venv, home), "AGENTCRON_SCHEDULER_TICK_SECONDS": "0.2"}
    done = captured([venv.bin("python"), str(script), *args], 120, cwd=home, env=env)
    assert done.returncode == 0, done.stdout + done.stderr
    answer: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return answer


@pytest.mark.timeout(900)
def test_the_base_install_is_small_and_runs_the_library_example(slim: Venv, tmp_path: Path) -> None:
    packages = slim.packages()
    assert documented_bound() <= MOST_PACKAGES
    assert len(packages) <= documented_bound(), packages
    assert "agentcron" in packages
    home = host_home(tmp_path)
    (home / "var").mkdir()  # the example's relative database: var/host-jobs.db
    example = LIBRARY_MD.read_text().split("<!-- example:")[1].split("```python\n")[1]
    (home / "example.py").write_text(example.split("```")[0])
    found = slim_check(slim, home, "library", str(home / "example.py"))
    run = found["run"]
    assert run["status"] == "succeeded", run
    assert run["output"] == "ran d-42: summarise the news (attempt 1)"
    # Nothing of an extra was imported on the way: `import agentcron`, the engine, the API.
    assert found["loaded"] == []
    # A schedule with an email channel: refused at save, naming the field and the extra.
    assert found["email"]["status"] == 422
    assert found["email"]["body"]["error"] == {
        "type": "InvalidSchedule",
        "message": "an email channel needs the email extra: pip install 'agentcron[email]'",
        "field": "notify.0.type",
    }


@pytest.mark.timeout(900)
def test_each_missing_extra_is_one_line_naming_it(slim: Venv, tmp_path: Path) -> None:
    home = host_home(tmp_path)
    env = host_env(slim, home)
    server_line = (
        "agentcron: the agentcron command needs the server extra: pip install 'agentcron[server]'\n"
    )
    for command in (["serve"], ["migrate"], ["mcp"], ["--help"]):
        done = captured([slim.bin("agentcron"), *command], cwd=home, env=env)
        assert (done.returncode, done.stdout, done.stderr) == (2, "", server_line)
    found = slim_check(slim, home, "service", f"sqlite:///{home / 'service.db'}")
    lines = {
        "/": "the dashboard needs the server extra: pip install 'agentcron[server]'",
        "/mcp": "the MCP endpoint (/mcp) needs the mcp extra: pip install 'agentcron[mcp]'",
        "/metrics": "GET /metrics needs the metrics extra: pip install 'agentcron[metrics]'",
    }
    # At start, one line each; at the URL, a 501 with the same line.
    assert [line["reason"] for line in found["logged"]] == list(lines.values())
    assert found["answers"] == {
        f"{method} {path}": [
            501,
            {"error": {"type": "ExtraMissing", "message": line, "field": None}},
        ]
        for (path, line), method in zip(lines.items(), ("GET", "POST", "GET"), strict=True)
    }
    # A secrets key set without the extra refuses the start (never a run that fires later).
    assert found["secrets"] == (
        "ExtraMissing: stored secrets (AGENTCRON_SECRETS_KEY) needs the secrets extra: "
        "pip install 'agentcron[secrets]'"
    )
    # Tracing asked for by the environment without the extra: said, and nothing imported.
    assert found["tracing"] == [
        "tracing (OTEL_* environment) needs the otel extra: pip install 'agentcron[otel]'"
    ]
    assert found["loaded"] == []


# The first test to ask for a virtualenv pays its pip install (its own bound is 600 s; minutes on
# a loaded machine), within its timeout.
@pytest.mark.timeout(900)
def test_every_extra_migrates_serves_the_api_the_dashboard_mcp_and_metrics(
    full: Venv, tmp_path: Path
) -> None:
    agentcron = full.bin("agentcron")
    home = host_home(tmp_path)
    env = host_env(full, home)

    def cli(*args: str) -> str:
        done = captured([agentcron, *args], 120, cwd=home, env=env)
        assert done.returncode == 0, done.stdout + done.stderr
        return done.stdout

    # The installed package is the one imported, from site-packages, not from the checkout.
    where = imported_from(full, "agentcron.core", cwd=home, env=env)
    assert "site-packages" in where and str(REPO) not in where
    cli("migrate")
    key = cli("keys", "create", "--owner", "local").strip().splitlines()[-1]
    server = start_server(env, home / "serve.log", argv=(agentcron, "serve"), cwd=home)
    try:
        with httpx.Client(base_url=server.url, headers=bearer(key), timeout=10) as http:
            due = (datetime.now(UTC) + timedelta(seconds=5)).isoformat()
            runner = {"type": "command", "argv": ["sh", "-c", "echo ran from the wheel"]}
            body = {"name": "from the wheel", "prompt": "hello", "trigger": {"at": due}}
            created = http.post("/api/v1/schedules", json={**body, "runner": runner})
            assert created.status_code == 201, created.text
            runs_url = f"/api/v1/schedules/{created.json()['id']}/runs"
            # The dashboard's sign-in page, while the run is due.
            login = httpx.get(f"{server.url}/login", timeout=10)
            assert login.status_code == 200 and "text/html" in login.headers["content-type"]
            # MCP's streamable-HTTP transport: the tools, as the owner of the key.
            tools_list = {"jsonrpc": "2.0", "id": 1, "method": "tools/list"}
            accept = {"accept": "application/json, text/event-stream"}
            listed = http.post("/mcp", headers=accept, json=tools_list)
            assert listed.status_code == 200, listed.text
            tools = {tool["name"] for tool in listed.json()["result"]["tools"]}
            assert {"create_schedule", "list_runs"} <= tools

            def ended() -> list[dict[str, Any]]:
                runs: list[dict[str, Any]] = http.get(runs_url).json()["items"]
                return runs if runs and runs[0]["status"] not in ("pending", "running") else []

            runs = wait_until(ended, "the run to finish")
            assert runs[0]["status"] == "succeeded", runs[0]
            assert "ran from the wheel" in runs[0]["output"]
            # The run, counted in Prometheus' text format.
            metrics = httpx.get(f"{server.url}/metrics", timeout=10)
            assert metrics.status_code == 200
            assert 'agentcron_runs_total{status="succeeded",trigger="schedule"} 1.0' in metrics.text
    finally:
        server.stop()
    assert "extra_missing" not in server.log()


def test_an_editable_install_warns_of_nothing_and_imports_the_checkout(tmp_path: Path) -> None:
    # What `make install` does in a fresh clone, into a venv of its own: the build backend
    # has nothing to warn about (its warnings reach the user's terminal through pip).
    source = tmp_path / "clone"
    shutil.copytree(REPO, source, symlinks=True, ignore=UNPACKAGED)
    venv = make_venv(tmp_path / "venv", "--no-deps", "-e", str(source))  # no BuildBackendWarning
    # From tmp_path, not the clone: the install, not the working directory, finds it.
    where = imported_from(venv, "agentcron", cwd=tmp_path)
    assert where == str(source / "agentcron" / "__init__.py")
