"""A job measured for real while the jobs page watches: the embedded service, a worker running
each candidate on the Triton interpreter in its spawned child, and headless Chromium. Nothing
is faked: the progress on screen is the worker's."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest

from kernel_templates import registry
from service.local import LocalCluster
from service.settings import ServiceSettings
from tests.ui.harness import draw, open_page

pytestmark = pytest.mark.slow
PROBLEM = {"kind": "gemm", "m": 64, "n": 48, "k": 80, "dtype": "fp16"}
#: Trials of the watched job: enough that, polled every second, the page sees it part-way even
#: when the interpreter runs a trial in a fraction of a second.
BUDGET = 16

#: Every text the watched job's cells take, recorded in the page as it changes (no reload).
WATCH = """(id) => {
  window.__seen = {trials: [], best: [], stage: []};
  const grab = () => {
    const row = document.querySelector(`#active tr[data-job="${id}"]`);
    if (!row) return;
    for (const f of ["trials", "best", "stage"]) {
      const text = row.querySelector(`[data-field="${f}"]`).textContent.trim();
      const seen = window.__seen[f];
      if (seen[seen.length - 1] !== text) seen.push(text);
    }
  };
  grab();
  new MutationObserver(grab).observe(document.querySelector("#active tbody"),
    {subtree: true, childList: true, characterData: true});
}"""


def _wait(until: Any, timeout_s: float, what: str) -> Any:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = until()
        if value:
            return value
        time.sleep(0.3)
    raise AssertionError(f"timed out waiting for {what}")


def test_progress_advances_on_screen_then_cancel(browser: Any, tmp_path: Path) -> None:
    settings = ServiceSettings(database_url=f"sqlite:///{tmp_path / 'live.db'}",
                               lease_seconds=60)
    with LocalCluster(settings, interpret=True, batch=1) as cluster:
        client, gpu = cluster.client, cluster.device.gpu_model
        context, page, watch = open_page(browser, cluster.url)
        page.goto(cluster.url + "/ui/jobs", wait_until="networkidle")
        job = client.submit_job(PROBLEM, budget={"max_trials": BUDGET}, gpu=gpu,
                                policy={"force_custom": True, "full_search": True})
        row = f"#active tr[data-job='{job['id']}']"
        page.wait_for_selector(row)  # the poll brought the new job in, no reload
        page.evaluate("() => { window.__sameDocument = true; }")
        page.evaluate(WATCH, job["id"])
        page.wait_for_selector(row, state="detached", timeout=240_000)  # the job ended
        seen = page.evaluate("() => window.__seen")
        assert page.evaluate("() => window.__sameDocument") is True
        done = [int(t.split("/")[0]) for t in seen["trials"]]
        # it advanced on screen, through a count short of the budget (the job still running)
        assert done == sorted(done) and any(0 < n < BUDGET for n in done), seen
        assert seen["best"][0] == "—" or "µs" in seen["best"][0]
        assert any("µs" in b for b in seen["best"]), seen
        assert "custom" in seen["stage"], seen
        final = client.get_job(job["id"])
        assert final["status"] == "done" and final["progress"]["trials_done"] == BUDGET

        # the finished job's problem: charts of the worker's measurements and the snippet
        pid = final["problem_id"]
        draw(page, f"/ui/problems/{pid}?gpu={quote(gpu)}")
        drawn = page.evaluate("() => document.getElementById('chart-trials').data"
                              ".reduce((n, t) => n + t.x.length, 0)")
        assert drawn == client.trials(pid, gpu=gpu)["total"] >= 5
        snippet = page.locator("#snippet").inner_text().replace('"cuda"', '"cpu"')
        scope: dict[str, Any] = {}
        exec(compile(snippet, "snippet", "exec"), scope)  # the page's Python, run as is
        problem, inputs = scope["problem"], scope["inputs"]
        kind = registry.kernel_kind(problem.kind)
        error = kind.rel_error(inputs.out, kind.reference(problem, inputs))
        assert error <= kind.tolerance(problem, scope["best"]["config"])

        # cancel a running job from the page
        job2 = client.submit_job(PROBLEM | {"m": 96}, budget={"max_trials": 64}, gpu=gpu,
                                 policy={"force_custom": True})
        page.goto(cluster.url + "/ui/jobs", wait_until="networkidle")
        row2 = f"#active tr[data-job='{job2['id']}']"
        page.wait_for_selector(row2)
        _wait(lambda: client.get_job(job2["id"])["status"] == "running", 120, "job 2 to run")
        button = page.locator(f"{row2} button.cancel")
        button.click()
        page.locator(f"{row2} button.cancel.confirm").click()
        page.wait_for_selector(row2, state="detached")
        page.wait_for_function("(t) => document.getElementById('cancel-note').textContent"
                               ".includes(t)", arg=f"Job {job2['id']} cancelled")
        assert client.get_job(job2["id"])["status"] == "cancelled"
        context.close()
        watch.check()
