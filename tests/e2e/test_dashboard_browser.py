"""The dashboard in a real browser (headless Chromium) on a real ``agentcron serve``.

A new user's first minutes: sign in with the key, create a schedule through the form (the live
preview follows the typing; a bad cron is refused at its field), watch its runs appear and
succeed without reloading, pause it, replay a run, then a schedule with every setting.
"""

from __future__ import annotations

import asyncio
import re
import sys
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING

import pytest

from tests.e2e.browser import LAUNCH_ARGS, require_browser
from tests.e2e.conftest import Server, create_schedule

if TYPE_CHECKING:  # imported lazily below: without playwright the test skips, not errors
    from playwright.async_api import Page

pytestmark = pytest.mark.slow

AGENT = "import sys; print('agent says: ' + sys.stdin.read().strip())"
# Not the runner's zone (UTC for an interval): the pages then show the viewer's time too.
VIEWER_ZONE = "Europe/Paris"


@pytest.fixture
def chromium() -> str:
    """The browser, checked before any server starts (skip or fail: see require_browser)."""
    return require_browser()


@pytest.fixture
async def page(chromium: str, server: Server) -> AsyncIterator[Page]:
    from playwright.async_api import async_playwright

    async with async_playwright() as playwright:
        browser = await playwright.chromium.launch(
            executable_path=chromium, headless=True, args=LAUNCH_ARGS
        )
        try:
            context = await browser.new_context(
                viewport={"width": 1280, "height": 800}, timezone_id=VIEWER_ZONE
            )
            context.set_default_timeout(15_000)
            page = await context.new_page()
            errors: list[str] = []
            page.on("pageerror", lambda error: errors.append(str(error)))
            yield page
            assert errors == [], errors  # no script of any page failed
        finally:
            await browser.close()


async def test_create_watch_pause_and_replay_in_the_browser(server: Server, page: Page) -> None:
    from playwright.async_api import expect

    assert server.key is not None
    # Signing in: any page sends a stranger to the sign-in form.
    await page.goto(f"{server.url}/")
    await expect(page).to_have_url(re.compile(r"/login\?next=%2F$"))
    await page.fill("#key", "ac_not_a_key")
    await page.click("button[type=submit]")
    await expect(page.locator(".field-error")).to_contain_text("not valid")
    await page.fill("#key", server.key)
    await page.click("button[type=submit]")
    await expect(page).to_have_url(f"{server.url}/")
    await expect(page.locator("header .who")).to_contain_text("Signed in as local")

    # The form: the preview follows the typing, in the viewer's zone by default.
    await page.click("text=New schedule >> nth=0")
    await expect(page.locator("#timezone")).to_have_value(VIEWER_ZONE)
    await page.fill("#name", "browser agent")
    await page.fill("#prompt", "hello from the browser")
    await page.fill("#cron", "")
    await page.locator("#cron").press_sequentially("0 8 * *", delay=30)
    await expect(page.locator("#preview .field-error")).to_contain_text("cron has 5 fields")
    await expect(page.locator("#cron")).to_have_attribute("aria-invalid", "true")
    await page.locator("#cron").press_sequentially(" 1-5", delay=30)
    await expect(page.locator("#preview .description")).to_have_text(
        f"At 08:00, Monday through Friday, {VIEWER_ZONE}"
    )
    await expect(page.locator("#preview time")).to_have_count(5)
    await expect(page.locator("#cron")).not_to_have_attribute("aria-invalid", "true")

    # A bad cron sent anyway comes back at its field, with everything typed kept.
    await page.fill("#cron", "0 8 * *")
    await page.fill("#argv", "\n".join([sys.executable, "-c", AGENT]))
    await page.click("button:has-text('Create schedule')")
    await expect(page.locator("#error-cron")).to_contain_text("cron has 5 fields")
    await expect(page.locator("#name")).to_have_value("browser agent")
    await expect(page.locator("#argv")).to_have_value(f"{sys.executable}\n-c\n{AGENT}")

    # Every 3 seconds instead.
    await page.check("input[name=trigger_kind][value=every]")
    await expect(page.locator("#cron")).to_be_hidden()
    await page.fill("#every_seconds", "3")
    await expect(page.locator("#preview .description")).to_have_text("Every 3 seconds")
    await page.click("button:has-text('Create schedule')")
    await expect(page).to_have_url(re.compile(r"/schedules/[0-9a-f-]{36}\?done=created$"))
    await expect(page.locator("h1")).to_have_text("browser agent")
    await expect(page.locator(".viewer-time").first).to_contain_text("your time")

    # Runs appear and succeed while the page stays as it is (polling, not reloading).
    await page.evaluate("window.__samePage = true")
    succeeded = page.locator("tr.run[data-status=succeeded]")
    await expect(succeeded.first).to_be_visible(timeout=30_000)
    await expect(succeeded.first.locator("td.out summary")).to_contain_text(
        "agent says: hello from the browser"
    )
    assert await page.evaluate("window.__samePage === true"), "the page was reloaded"

    # Pause: the schedule says so and its next run is gone.
    await page.locator(".heading-actions button:has-text('Pause')").click()
    await expect(page.locator(".notice")).to_contain_text("Schedule paused")
    await expect(page.locator(".lead .pill")).to_have_text("paused")
    await expect(page.locator(".heading-actions button:has-text('Resume')")).to_be_visible()

    # Replay a succeeded run: a replay appears and succeeds, although the schedule is paused.
    await page.locator("tr.run[data-status=succeeded] button:has-text('Replay')").first.click()
    await expect(page.locator(".notice")).to_contain_text("Replay queued")
    replay = page.locator("tr.run[data-trigger=replay]")
    await expect(replay.first).to_have_attribute("data-status", "succeeded", timeout=30_000)
    await expect(replay.first.locator("td.out summary")).to_contain_text("agent says:")

    # Issue 17: the form's settings beyond the trigger, the preview following its bounds and
    # max runs as they are typed (paging the history: tests/integration/test_dashboard.py,
    # test_a_batch_of_runs_pages_in_due_time_order; a phone's width: the next test).
    await page.goto(f"{server.url}/")
    await page.click("text=New schedule >> nth=0")
    await page.fill("#name", "bounded")
    await page.fill("#prompt", "p")
    await page.fill("#cron", "0 9 * * *")
    await page.fill("#timezone", "Asia/Shanghai")
    await page.fill("#start_at", "2030-01-01T00:00:00+08:00")
    # The preview honours the bound and then max runs, as they are typed.
    await expect(page.locator("#preview time").first).to_have_attribute(
        "datetime", "2030-01-01T01:00:00Z"
    )
    await page.fill("#max_runs", "2")
    await expect(page.locator("#preview time")).to_have_count(2)
    await expect(page.locator("#preview .max-runs-note")).to_contain_text("at most 2 due times")
    await page.fill("#end_at", "2001-01-01T00:00:00Z")
    await expect(page.locator("#preview .field-error")).to_contain_text("has passed")
    await expect(page.locator("#end_at")).to_have_attribute("aria-invalid", "true")
    await page.fill("#end_at", "")
    await page.select_option("#dst_repeat", "both")
    await page.select_option("#catchup", "latest")
    await page.fill("#jitter_seconds", "30")
    await page.fill("#pause_after_failures", "3")
    await page.fill("#retention_days", "7")
    # The bounds belong to cron and interval triggers, not to a one-shot.
    await page.check("input[name=trigger_kind][value=at]")
    await expect(page.locator("#start_at")).to_be_hidden()
    await page.check("input[name=trigger_kind][value=cron]")
    await expect(page.locator("#start_at")).to_be_visible()
    await page.fill("#argv", "sh\n-c\necho agent got: $(cat)")
    await page.click("button:has-text('Create schedule')")
    await expect(page).to_have_url(re.compile(r"/schedules/[0-9a-f-]{36}\?done=created$"))
    await expect(page.locator(".trigger-words")).to_contain_text("At 09:00, Asia/Shanghai")
    await expect(page.locator(".trigger-words")).to_contain_text(
        "not before 2030-01-01 00:00:00 +08:00"
    )
    await expect(page.locator(".trigger-words details")).not_to_have_attribute("open", "")
    await expect(page.locator("code.argv")).to_have_text("sh -c 'echo agent got: $(cat)'")
    await expect(page.locator(".settings")).to_contain_text("catch-up latest")
    await expect(page.locator(".settings")).to_contain_text("pauses after 3 failures in a row")
    unhandled = [line for line in server.log().splitlines() if "unhandled_error" in line]
    assert unhandled == [], unhandled


async def sign_in(page: Page, server: Server) -> None:
    assert server.key is not None
    await page.goto(f"{server.url}/login")
    await page.fill("#key", server.key)
    await page.click("button[type=submit]")


# Words a box cuts: broken inside (not at a space, "/" or "-") or running past its right edge,
# where the box clips them. Only text the page shows is read (a folded "as JSON" is not).
CUT_WORDS = """(box) => {
  const cut = [];
  const edge = box.getBoundingClientRect().right;
  const walker = document.createTreeWalker(box, NodeFilter.SHOW_TEXT);
  for (let node = walker.nextNode(); node; node = walker.nextNode()) {
    if (!node.parentElement.checkVisibility()) continue;
    for (const match of node.data.matchAll(/[^\\s\\/-]+[\\/-]?/g)) {
      const range = document.createRange();
      range.setStart(node, match.index);
      range.setEnd(node, match.index + match[0].length);
      const rects = [...range.getClientRects()].filter((rect) => rect.width > 0);
      const lines = new Set(rects.map((rect) => Math.round(rect.top)));
      if (lines.size > 1 || rects.some((rect) => rect.right > edge)) cut.push(match[0]);
    }
  }
  return cut;
}"""


async def inside(page: Page, selector: str) -> None:
    """Every element ``selector`` finds lies wholly inside the viewport's width."""
    width = page.viewport_size["width"] if page.viewport_size else 0
    found = await page.locator(selector).all()
    assert found, selector
    for element in found:
        box = await element.bounding_box()
        assert box is not None, selector
        assert box["x"] >= 0 and box["x"] + box["width"] <= width, (page.url, selector, box)


async def on_one_line(page: Page, selector: str) -> None:
    """The elements ``selector`` finds share one line (one top edge)."""
    tops = set()
    for element in await page.locator(selector).all():
        box = await element.bounding_box()
        assert box is not None, selector
        tops.add(round(box["y"]))
    assert len(tops) == 1, (page.url, selector, tops)


ZONE = "America/Argentina/Buenos_Aires"


async def test_buttons_columns_and_words_fit_a_laptop_and_a_phone(
    server: Server, page: Page
) -> None:
    """Issue 38: at 1280 px with the viewer's times shown, every schedule's buttons are on
    the screen; at 390 px the run history shows its output, the settings card cuts no word,
    and a schedule's buttons sit on one line at both widths; no page is wider than the screen
    and "Sign out" is on it. The zone is one of the longest names there are, and not the
    viewer's, so every time has a second line."""
    import httpx
    from playwright.async_api import expect

    talk = "import sys; sys.stdin.read(); print('agent says: ' + 'several words of output ' * 6)"
    # A long path, as an agent's script often has: it wraps at its slashes, never mid-word.
    script = "/srv/agents/newsroom/morning_digest_with_sources.py"
    agent = {"type": "command", "argv": [sys.executable, "-c", talk, script]}
    assert server.key is not None
    digest_body = {
        "name": "morning digest",
        "prompt": "Summarise the news in five bullets.",
        "trigger": {"cron": "0 8 * * 1-5", "timezone": ZONE},
        "runner": agent,
        "notify": [{"type": "file", "path": "digests.jsonl"}],
    }
    digest = (await create_schedule(server, server.key, digest_body))["id"]
    # Every 5 seconds: a warning line under its name, the longest heading a page has.
    feed_body = {
        "name": "feed check",
        "prompt": "p",
        "trigger": {"every_seconds": 5},
        "runner": agent,
        "enabled": False,
    }
    feed = (await create_schedule(server, server.key, feed_body))["id"]
    async with httpx.AsyncClient(base_url=server.url, headers=server.headers) as api:
        paused = await api.post(f"/api/v1/schedules/{feed}/pause", json={"note": "feed moved"})
        assert paused.status_code == 200, paused.text
        runs = []
        for schedule in (digest, feed):
            started = await api.post(f"/api/v1/schedules/{schedule}/run")
            assert started.status_code == 202, started.text
            runs.append(started.json()["id"])
        # The list is drawn once per visit: both runs have ended before it is loaded.
        for run_id in runs:
            for _ in range(600):
                status = (await api.get(f"/api/v1/runs/{run_id}")).json()["status"]
                if status not in ("pending", "running"):
                    break
                await asyncio.sleep(0.1)
            assert status == "succeeded", status
    await sign_in(page, server)

    for width, height in ((1280, 800), (390, 844)):
        await page.set_viewport_size({"width": width, "height": height})
        await page.goto(f"{server.url}/")
        await expect(page.locator("tr[data-schedule] .badge-succeeded")).to_have_count(
            2, timeout=30_000
        )
        await expect(page.locator(".viewer-time").first).to_be_visible()
        await inside(page, "tr[data-schedule] .actions button")
        for schedule in (digest, feed):
            await page.goto(f"{server.url}/schedules/{schedule}")
            await inside(page, ".heading-actions .button, .heading-actions button")
            await on_one_line(page, ".heading-actions .button, .heading-actions button")
            output = page.locator("tr.run td.out summary").first
            await expect(output).to_contain_text("agent says: several words")
            await inside(page, "tr.run td.out summary")
            await inside(page, "tr.run .run-actions button")
            settings = page.locator("section.card:has(dl.settings)")
            assert await settings.evaluate(CUT_WORDS) == [], (width, schedule)
        for path in ("/", f"/schedules/{digest}", "/schedules/new"):
            await page.goto(f"{server.url}{path}")
            scrolled = await page.evaluate("document.documentElement.scrollWidth")
            assert scrolled <= width, (path, scrolled)
            await inside(page, "button:has-text('Sign out')")
