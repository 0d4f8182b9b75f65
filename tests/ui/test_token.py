"""The jobs page's Cancel sends the user token pasted on the page (kept in localStorage) as
its bearer, so it works where the service has tokens; without one the service refuses it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from service.client import KernelSearchClient
from service.embedded import EmbeddedServer
from service.settings import ServiceSettings
from tests.ui.harness import open_page

ALICE = "alice-token-0123456789"
PROBLEM = {"kind": "gemm", "m": 256, "n": 256, "k": 256, "dtype": "fp16"}


def test_cancel_sends_the_pasted_token(browser: Any, tmp_path: Path) -> None:
    settings = ServiceSettings(database_url=f"sqlite:///{tmp_path / 'ks.db'}",
                               api_tokens=f"alice:{ALICE}")
    with EmbeddedServer(settings) as server:
        client = KernelSearchClient(server.url, token=ALICE)
        job = client.submit_job(PROBLEM, gpu="nowhere")["id"]
        context, page, watch = open_page(browser, server.url)
        try:
            page.goto(server.url + "/ui/jobs", wait_until="networkidle")
            page.fill("#token", ALICE)
            page.click("#token-save")
            assert page.inner_text("#token-state") == "a token is saved"
            assert page.input_value("#token") == ""  # not left on the page
            button = page.locator(f"button[data-cancel='{job}']")
            button.click()
            button.click()
            page.wait_for_function("(t) => document.getElementById('cancel-note').textContent"
                                   ".includes(t)", arg=f"Job {job} cancelled")
            assert page.evaluate("localStorage.getItem('ks-token')") == ALICE
        finally:
            context.close()
        watch.check()
        assert client.get_job(job)["status"] == "cancelled"
