"""The built wheel, installed into a fresh virtualenv outside the repository, runs the service.

What a host gets from ``pip install agentcron``: one top-level package, ``agentcron`` (no
``core`` or ``web`` beside the host's own), the migrations inside it, and an ``agentcron``
command that migrates, serves and runs a schedule with nothing of the checkout on its path.
"""

from __future__ import annotations

import fcntl
import os
import shutil
import subprocess
import sys
import time
import zipfile
from datetime import UTC, datetime, timedelta
from pathlib import Path

import httpx
import pytest

from tests.e2e.conftest import free_port, wait_healthy

REPO = Path(__file__).resolve().parents[2]
# One worker builds the wheel and runs both tests (--dist loadgroup); the build lock below is
# for a run without it.
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
            subprocess.run(
                [
                    sys.executable,
                    "-m",
                    "pip",
                    "wheel",
                    "-q",
                    "--no-deps",
                    "-w",
                    str(out),
                    str(source),
                ],
                check=True,
                capture_output=True,
                timeout=300,
            )
    (built,) = out.glob("agentcron-*.whl")
    return built


UNPACKAGED = shutil.ignore_patterns(
    ".git",
    ".venv",
    "build",
    "dist",
    "var",
    "bench",
    "tests",
    "*.egg-info",
    "__pycache__",
    ".*_cache",
)


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


# Its pip install alone may take minutes on a loaded machine (its own bound is 600 s).
@pytest.mark.timeout(900)
def test_a_fresh_venv_with_only_the_wheel_migrates_serves_and_runs(
    wheel: Path, tmp_path: Path
) -> None:
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=120)
    pip = subprocess.run(
        [str(venv / "bin" / "python"), "-m", "pip", "install", "-q", str(wheel)],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert pip.returncode == 0, pip.stderr
    agentcron = str(venv / "bin" / "agentcron")
    home = tmp_path / "host"  # the host's own directory: nothing of the checkout in it
    home.mkdir()
    env = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith(("AGENTCRON_", "PYTHON", "VIRTUAL_ENV"))
    }
    env.update(
        PATH=f"{venv / 'bin'}{os.pathsep}{env.get('PATH', '')}",
        AGENTCRON_DATABASE_URL=f"sqlite:///{home / 'agentcron.db'}",
        AGENTCRON_DATA_DIR=str(home / "data"),
        AGENTCRON_LOG_FORMAT="json",
    )

    def cli(*args: str) -> str:
        done = subprocess.run(
            [agentcron, *args], cwd=home, env=env, capture_output=True, text=True, timeout=120
        )
        assert done.returncode == 0, done.stdout + done.stderr
        return done.stdout

    # The installed package is the one imported, from site-packages, not from the checkout.
    where = subprocess.run(
        [str(venv / "bin" / "python"), "-c", "import agentcron.core as c; print(c.__file__)"],
        cwd=home,
        env=env,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert "site-packages" in where and str(REPO) not in where
    cli("migrate")
    key = cli("keys", "create", "--owner", "local").strip().splitlines()[-1]
    port = free_port()
    with (home / "serve.log").open("wb") as log:
        server = subprocess.Popen(
            [agentcron, "serve", "--port", str(port)], cwd=home, env=env, stdout=log, stderr=log
        )
    try:
        base = f"http://127.0.0.1:{port}"
        headers = {"Authorization": f"Bearer {key}"}
        # Healthy in time, and not exited on the way (else its log says why).
        assert wait_healthy(base, server), (home / "serve.log").read_text()
        due = (datetime.now(UTC) + timedelta(seconds=5)).isoformat()
        created = httpx.post(
            f"{base}/api/v1/schedules",
            headers=headers,
            json={
                "name": "from the wheel",
                "prompt": "hello",
                "trigger": {"at": due},
                "runner": {"type": "command", "argv": ["sh", "-c", "echo ran from the wheel"]},
            },
            timeout=10,
        )
        assert created.status_code == 201, created.text
        schedule_id = created.json()["id"]
        deadline = time.monotonic() + 30
        while True:
            runs = httpx.get(
                f"{base}/api/v1/schedules/{schedule_id}/runs", headers=headers, timeout=10
            ).json()["items"]
            if runs and runs[0]["status"] not in ("pending", "running"):
                break
            assert time.monotonic() < deadline, runs
            time.sleep(0.3)
        assert runs[0]["status"] == "succeeded", runs[0]
        assert "ran from the wheel" in runs[0]["output"]
    finally:
        server.terminate()
        server.wait(timeout=30)


def test_an_editable_install_warns_of_nothing_and_imports_the_checkout(tmp_path: Path) -> None:
    # What `make install` does in a fresh clone, into a venv of its own: the build backend
    # has nothing to warn about (its warnings reach the user's terminal through pip).
    source = tmp_path / "clone"
    shutil.copytree(REPO, source, symlinks=True, ignore=UNPACKAGED)
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    python = str(venv / "bin" / "python")
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "--python",
            python,
            "install",
            "--no-deps",
            "-e",
            str(source),
        ],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr
    assert "BuildBackendWarning" not in done.stderr, done.stderr
    where = subprocess.run(
        [python, "-c", "import agentcron; print(agentcron.__file__)"],
        cwd=tmp_path,  # not the clone: the install, not the working directory, finds it
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    assert where == str(source / "agentcron" / "__init__.py")
