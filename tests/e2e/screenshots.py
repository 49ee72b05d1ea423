"""The dashboard's screenshots in docs/: ``python -m tests.e2e.screenshots docs`` (or
``make screenshots``).

Starts a real ``agentcron serve`` on a throwaway SQLite database, adds a few example schedules
through the API, lets them run for a few seconds, then photographs the pages in headless
Chromium (1280x800, so the images stay small).
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

from tests.e2e.browser import LAUNCH_ARGS, chromium_path, missing_browser
from tests.e2e.conftest import Server, keyed_server, sqlite_env

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
VIEWPORT = {"width": 1280, "height": 800}
FAIL = "import sys; sys.stdin.read(); print('feed unreachable', file=sys.stderr); sys.exit(1)"


def schedules() -> list[dict[str, Any]]:
    """What a small installation might hold: a digest, a frequent agent, a broken check."""
    hello = [sys.executable, str(EXAMPLES / "hello_agent.py")]
    return [
        {
            "name": "morning digest",
            "prompt": "Summarise the news in five bullets.",
            "trigger": {"cron": "0 8 * * 1-5", "timezone": "Asia/Shanghai"},
            "runner": {"type": "command", "argv": hello},
            "notify": [{"type": "file", "path": "digests.jsonl"}],
        },
        {
            "name": "feed check",
            "prompt": "Check the status feed.",
            "trigger": {"every_seconds": 4},
            "runner": {"type": "command", "argv": [sys.executable, "-c", FAIL]},
            "max_attempts": 1,
        },
        {
            "name": "hello agent",
            "prompt": "Say hello and count the words of this prompt.",
            "trigger": {"every_seconds": 3},
            "runner": {"type": "command", "argv": hello},
            "notify": [{"type": "file", "path": "hello.jsonl"}],
        },
    ]


def populate(server: Server) -> dict[str, str]:
    """Create the schedules, let them run a few times; returns their ids by name."""
    ids: dict[str, str] = {}
    with httpx.Client(base_url=server.url, headers=server.headers, timeout=10) as api:
        for spec in schedules():
            response = api.post("/api/v1/schedules", json=spec)
            response.raise_for_status()
            ids[spec["name"]] = response.json()["id"]
        api.post(f"/api/v1/schedules/{ids['morning digest']}/run").raise_for_status()
        time.sleep(10)
        api.post(f"/api/v1/schedules/{ids['feed check']}/pause", json={"note": "feed moved"})
        runs = api.get(f"/api/v1/schedules/{ids['hello agent']}/runs").json()["items"]
        done = [run for run in runs if run["status"] == "succeeded"]
        if done:
            api.post(f"/api/v1/runs/{done[-1]['id']}/replay").raise_for_status()
        time.sleep(2)
        api.post(f"/api/v1/schedules/{ids['hello agent']}/pause").raise_for_status()
    return ids


async def photograph(server: Server, ids: dict[str, str], out: Path) -> list[Path]:
    from playwright.async_api import async_playwright

    assert server.key is not None
    shots: list[Path] = []

    async def shoot(name: str, full_page: bool = False) -> None:
        shots.append(out / f"dashboard-{name}.png")
        await page.screenshot(path=shots[-1], full_page=full_page)

    async with async_playwright() as playwright:
        browser = await playwright.chromium.launch(
            executable_path=chromium_path(), headless=True, args=LAUNCH_ARGS
        )
        try:
            context = await browser.new_context(viewport=VIEWPORT, timezone_id="Europe/Paris")
            page = await context.new_page()

            await page.goto(f"{server.url}/login")
            await shoot("sign-in")
            await page.fill("#key", server.key)
            await page.click("button[type=submit]")
            await page.wait_for_url(f"{server.url}/")
            await shoot("schedules")

            await page.goto(f"{server.url}/schedules/{ids['hello agent']}")
            await page.locator("tr.run").first.wait_for()
            await page.locator("#runs").scroll_into_view_if_needed()
            await shoot("schedule", full_page=True)

            await page.goto(f"{server.url}/schedules/new")
            await page.fill("#name", "weekday digest")
            await page.fill("#prompt", "Summarise the news in five bullets.")
            await page.fill("#cron", "0 8 * * MON-FRI")
            await page.fill("#timezone", "Asia/Shanghai")
            await page.fill("#argv", "python3\nmy_agent.py")
            await page.locator(
                "#preview .description", has_text="Monday through Friday, Asia/Shanghai"
            ).wait_for()
            await page.locator(".trigger").evaluate("section => section.scrollIntoView()")
            await shoot("form-preview")

            await page.fill("#cron", "0 8 * MON-FRI")
            await page.click("button:has-text('Create schedule')")
            await page.locator("#error-cron").wait_for()
            await page.locator("#preview.invalid").wait_for(state="attached")
            await shoot("form-error")
        finally:
            await browser.close()
    return shots


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path, help="directory for the PNG files (docs)")
    args = parser.parse_args()
    reason = missing_browser()
    if reason is not None:
        sys.exit(f"cannot take screenshots: {reason}")
    args.out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        server = keyed_server(sqlite_env(Path(tmp), "screenshots"), Path(tmp) / "server.log")
        try:
            ids = populate(server)
            shots = asyncio.run(photograph(server, ids, args.out.resolve()))
        finally:
            server.stop()
    for shot in shots:
        print(f"{shot} ({shot.stat().st_size // 1024} KiB)")


if __name__ == "__main__":
    main()
