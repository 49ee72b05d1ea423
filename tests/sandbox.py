"""bubblewrap for the sandbox tests: Debian's package (``scripts/install-bubblewrap`` installs
it as root; ``make test`` runs that first).

A missing or broken bwrap skips those tests with the reason, except under
``AGENTCRON_REQUIRE_SANDBOX=1`` (CI, ``.ci/run``), where it fails them.
"""

from __future__ import annotations

import functools
import os
import shutil
import sys
import tempfile
from pathlib import Path

import pytest

from agentcron.core.errors import StartupError
from agentcron.core.runners.containment import Containment, Sandbox, check_sandbox

# The interpreter itself, not the venv's link to it: the sandbox gives an agent a private
# /tmp, so a checkout (and its .venv) under /tmp is not there inside it. Stdlib only.
HOST_PYTHON = os.path.realpath(sys.executable)


def installed(variable: str, default: str, name: str) -> str | None:
    """The executable named by the environment ``variable``, else ``default`` (Debian's
    path), else ``name`` on the PATH; None when none of them exists."""
    configured = os.environ.get(variable)
    if configured:
        return configured if os.access(configured, os.X_OK) else None
    if os.access(default, os.X_OK):
        return default
    return shutil.which(name)


def require(reason: str | None, flag: str, path: str | None) -> str:
    """``path``, when ``reason`` (why the tests cannot run here) is None; else skips the test
    with the reason, or fails it when the environment variable ``flag`` is set (CI, so it
    cannot pass without running the test)."""
    if reason is not None:
        if os.environ.get(flag, "").lower() in ("1", "true", "yes"):
            pytest.fail(f"{reason} ({flag}=1)", pytrace=False)
        pytest.skip(reason)
    assert path is not None
    return path


def bwrap_path() -> str | None:
    """``AGENTCRON_SANDBOX_BINARY``, else Debian's ``/usr/bin/bwrap``, else ``bwrap`` on PATH."""
    return installed("AGENTCRON_SANDBOX_BINARY", "/usr/bin/bwrap", "bwrap")


@functools.cache
def missing_sandbox() -> str | None:
    """Why the sandbox tests cannot run here, or None when they can (probed once)."""
    path = bwrap_path()
    if path is None:
        return (
            "no bubblewrap at AGENTCRON_SANDBOX_BINARY or /usr/bin/bwrap "
            "(scripts/install-bubblewrap installs Debian's package as root)"
        )
    with tempfile.TemporaryDirectory() as data_dir:
        try:
            check_sandbox(Containment(sandbox=Sandbox(path, Path(data_dir))))
        except StartupError as exc:
            return exc.message
    return None


def require_bwrap() -> str:
    """The bwrap executable; skips the test with the reason when it cannot sandbox here, or
    fails it under ``AGENTCRON_REQUIRE_SANDBOX=1``."""
    return require(missing_sandbox(), "AGENTCRON_REQUIRE_SANDBOX", bwrap_path())
