"""Headless Chromium for the dashboard's browser tests and screenshots: Debian's ``chromium``
package driven by Playwright (``pip install -e ".[ui]"``; never ``playwright install``)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

CHROMIUM = Path("/usr/bin/chromium")
ARGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
        "--disable-background-networking", "--disable-component-update", "--disable-sync")
#: A page is drawn when every chart holder has a Plotly plot or says why it has none.
CHARTS_DRAWN = """() => [...document.querySelectorAll('.chart')].every(
    (el) => (el.data && el._fullLayout) || el.textContent.trim().length > 0)"""


def missing() -> str | None:
    """Why the browser cannot run here (None: it can)."""
    if not CHROMIUM.exists():
        return f"{CHROMIUM} is absent (apt-get install -y chromium chromium-driver)"
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        return "playwright is not installed (pip install -e \".[ui]\")"
    return None


@contextmanager
def chromium() -> Iterator[Any]:
    """A headless Chromium browser (Playwright's ``Browser``)."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=str(CHROMIUM), args=list(ARGS))
        try:
            yield browser
        finally:
            browser.close()
