"""Browser fixtures: Playwright driving Debian's chromium (/usr/bin/chromium).

`browser_page` gives a fresh page (its own cookies) in a headless chromium. Without chromium
the test is skipped, except in CI (CI=true), where a missing browser is a failure: `.ci/run`
installs it with `apt-get install chromium`. Playwright's own browser downloads are never used.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",  # we run as root, where chromium's sandbox refuses to start
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
SCREENSHOTS = Path(__file__).resolve().parent.parent / "test-results"


def chromium_required() -> None:
    if CHROMIUM.exists():
        return
    if os.environ.get("CI") == "true":
        pytest.fail(
            f"{CHROMIUM} is missing: CI must run browser tests (apt-get install chromium)",
            pytrace=False,
        )
    pytest.skip(f"{CHROMIUM} is missing (apt-get install chromium to run browser tests)")


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Any:
    # Lets browser_page know whether its test failed, to keep a screenshot.
    report = yield
    if report.when == "call":
        item.stash[_CALL_FAILED] = report.failed
    return report


_CALL_FAILED = pytest.StashKey[bool]()


@pytest.fixture
def browser_page(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    """A playwright.sync_api.Page in headless chromium; a screenshot of a failed test's page is
    kept under test-results/."""
    chromium_required()
    from playwright.sync_api import sync_playwright

    # Playwright's sync API keeps an asyncio loop running in this thread while it is active,
    # and Django's ORM refuses to run "in an async context" then. The test itself still uses
    # the ORM synchronously, so allow it for this test only.
    monkeypatch.setenv("DJANGO_ALLOW_ASYNC_UNSAFE", "true")
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(
            executable_path=str(CHROMIUM), args=CHROMIUM_ARGS, headless=True
        )
        context = browser.new_context()
        page = context.new_page()
        page.set_default_timeout(30_000)
        try:
            yield page
        finally:
            if request.node.stash.get(_CALL_FAILED, False):
                SCREENSHOTS.mkdir(exist_ok=True)
                name = re.sub(r"[^A-Za-z0-9_.-]+", "_", request.node.nodeid)[-150:]
                path = SCREENSHOTS / f"{name}.png"
                try:
                    page.screenshot(path=str(path), full_page=True)
                    print(f"screenshot of the failed page: {path}")
                except Exception as exc:  # the page may be what broke
                    print(f"no screenshot ({exc})")
            context.close()
            browser.close()
