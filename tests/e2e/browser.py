"""A real browser for the page tests: Debian's Chromium driven by Playwright, never a downloaded browser."""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager

os.environ.setdefault("PLAYWRIGHT_SKIP_BROWSER_DOWNLOAD", "1")

from playwright import sync_api

CHROMIUM = "/usr/bin/chromium"
UI_TIMEOUT_MS = 30_000
FLAGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]


@contextmanager
def open_page() -> Iterator[sync_api.Page]:
    with sync_api.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, headless=True, args=FLAGS)
        try:
            page = browser.new_page(viewport={"width": 1600, "height": 1200})
            page.set_default_timeout(UI_TIMEOUT_MS)
            yield page
        finally:
            browser.close()
