"""What the browser tests share: a page that records what it must not do, and waiting for
the charts."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from scripts.dashboard.browser import CHARTS_DRAWN


@dataclass
class Watch:
    """What a page did that a test must not allow."""

    base: str
    errors: list[str] = field(default_factory=list)
    outside: list[str] = field(default_factory=list)

    def check(self) -> None:
        assert not self.errors, f"console errors: {self.errors}"
        assert not self.outside, f"requests outside the app: {self.outside}"


def open_page(browser: Any, base: str) -> tuple[Any, Any, Watch]:
    context = browser.new_context(viewport={"width": 1400, "height": 900})
    context.grant_permissions(["clipboard-read", "clipboard-write"], origin=base)
    page = context.new_page()
    watch = Watch(base)
    page.on("console", lambda m: watch.errors.append(m.text) if m.type == "error" else None)
    page.on("pageerror", lambda e: watch.errors.append(f"uncaught: {e}"))
    page.on("requestfailed", lambda r: watch.errors.append(f"failed: {r.url}"))
    page.on("request", lambda r: None if r.url.startswith((base, "data:"))
            else watch.outside.append(r.url))
    page.set_default_timeout(30_000)
    page.base = base  # the tests' shorthand
    return context, page, watch


def draw(page: Any, path: str) -> None:
    """Open ``path`` and wait until every chart on it is drawn."""
    page.goto(page.base + path, wait_until="networkidle")
    page.wait_for_function(CHARTS_DRAWN)
