"""Headless Chromium for the dashboard's browser tests and screenshots.

Debian's own chromium package, never a browser Playwright downloads: ``playwright install``
fetches from a CDN, while the system package comes from the same apt mirror as everything
else (``scripts/install-chromium`` installs it; ``make test`` runs that first).
"""

from __future__ import annotations

import importlib.util

from tests.sandbox import installed, require

# Quiet and offline: no sandbox (containers often forbid its namespaces), no GPU, no QUIC, and
# none of the background traffic (updates, sync) a desktop browser makes.
LAUNCH_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


def chromium_path() -> str | None:
    """The browser to drive: ``AGENTCRON_CHROMIUM``, else Debian's ``/usr/bin/chromium``, else
    ``chromium`` on the PATH; None when none of them exists."""
    return installed("AGENTCRON_CHROMIUM", "/usr/bin/chromium", "chromium")


def missing_browser() -> str | None:
    """Why the browser tests cannot run here, or None when they can."""
    if importlib.util.find_spec("playwright") is None:
        return "the Python package playwright is not installed (make install adds it)"
    if chromium_path() is None:
        return (
            "no Chromium at AGENTCRON_CHROMIUM or /usr/bin/chromium "
            "(scripts/install-chromium installs Debian's package as root)"
        )
    return None


def require_browser() -> str:
    """The Chromium executable; skips the test with the reason when there is none, or fails
    it under ``AGENTCRON_REQUIRE_BROWSER=1`` (CI, .ci/run) so CI cannot pass without it."""
    return require(missing_browser(), "AGENTCRON_REQUIRE_BROWSER", chromium_path())
