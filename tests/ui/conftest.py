"""The dashboard in headless Chromium (Debian's ``chromium``, driven by Playwright), against
the app served on a loopback port. Skipped, with the reason, where the browser or Playwright
is absent.

``seeded`` is a SYNTHETIC database from ``scripts.dashboard.seed`` (recorded H100
measurements replayed and perturbed); every ``page`` fails its test on a console error, an
uncaught exception, a failed request, or a request that leaves the app (no CDN, no font host).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from scripts.dashboard import browser as chromium
from scripts.dashboard.seed import seed_database
from service.embedded import EmbeddedServer
from service.settings import ServiceSettings
from tests.ui.harness import open_page

_WHY = chromium.missing()
if _WHY is not None:
    pytest.skip(f"browser tests need headless Chromium: {_WHY}", allow_module_level=True)


@dataclass
class Seeded:
    url: str
    rows: dict[str, int]


@pytest.fixture(scope="session")
def seeded(tmp_path_factory: pytest.TempPathFactory) -> Seeded:
    path = Path(tmp_path_factory.mktemp("ui")) / "seeded.db"
    url = f"sqlite:///{path}"
    rows = seed_database(url, problems=90, measurements=9000, attention_share=0.2, active=4,
                         seed=3)
    return Seeded(url, rows)


@pytest.fixture(scope="session")
def server(seeded: Seeded) -> Iterator[str]:
    with EmbeddedServer(ServiceSettings(database_url=seeded.url)) as s:
        yield s.url


@pytest.fixture(scope="session")
def browser() -> Iterator[Any]:
    with chromium.chromium() as b:
        yield b


@pytest.fixture
def page(browser: Any, server: str) -> Iterator[Any]:
    context, p, watch = open_page(browser, server)
    yield p
    context.close()
    watch.check()
