"""Headless Chromium for the tests that look at the dashboard: Debian's `chromium`, which
scripts/setup.sh installs, driven by Playwright (which never downloads a browser here)."""

import contextlib
import os
import shutil
from collections.abc import Iterator
from pathlib import Path

from playwright.sync_api import Browser, Page, sync_playwright

REPOSITORY = Path(__file__).resolve().parents[1]
DOCS_SCREENSHOT = REPOSITORY / "docs" / "dashboard.png"
"""The README's picture of the dashboard, written when MILLRACE_DOCS_SCREENSHOT=1."""


@contextlib.contextmanager
def chromium() -> Iterator[Browser]:
    """Debian's Chromium, headless, for as long as the `with` lasts."""
    executable = shutil.which("chromium")
    assert executable is not None, "Debian's chromium is missing: run scripts/setup.sh"
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(
            executable_path=executable, headless=True, args=["--no-sandbox"]
        )
        try:
            yield browser
        finally:
            browser.close()


def wants_docs_screenshot() -> bool:
    """Whether MILLRACE_DOCS_SCREENSHOT=1 asks for docs/dashboard.png to be written again."""
    return os.environ.get("MILLRACE_DOCS_SCREENSHOT") == "1"


def save_docs_screenshot(page: Page) -> None:
    """Save `page` as docs/dashboard.png."""
    page.screenshot(path=str(DOCS_SCREENSHOT), full_page=True)
