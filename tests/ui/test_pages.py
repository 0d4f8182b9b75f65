"""Every dashboard page in headless Chromium over a SYNTHETIC seeded database (recorded H100
measurements replayed): it loads without a console error, its charts hold the data points the
API serves, and filters, sorting, search and pagination change the rows."""

from __future__ import annotations

import json
import re
from typing import Any
from urllib.parse import quote

import httpx
import pytest

from tests.ui.harness import draw

pytestmark = pytest.mark.slow


def api(base: str, path: str) -> Any:
    r = httpx.get(base + path, timeout=30)
    r.raise_for_status()
    return r.json()


def cells(page: Any, column: int) -> list[str]:
    return page.locator(f"#overview tbody tr td:nth-child({column})").all_inner_texts()


def number(text: str) -> float:
    found = re.findall(r"[-+]?\d*\.?\d+", text.replace(",", ""))
    return float(found[0]) if found else float("nan")


def chart(page: Any, element_id: str) -> list[dict[str, Any]]:
    """The traces Plotly drew in ``element_id``: name, type and the number of points."""
    return page.evaluate("""(id) => document.getElementById(id).data.map((t) => ({
        name: t.name || '', type: t.type || 'scatter',
        points: t.z ? t.z.flat().filter((v) => v !== null).length : (t.x || []).length,
        x: t.x, y: t.y}))""", element_id)


@pytest.mark.parametrize("path", ["/", "/ui", "/ui/jobs", "/ui/workers", "/ui/shapes",
                                  "/ui/shapes?kind=attention"])
def test_every_page_loads_without_a_console_error(page: Any, path: str) -> None:
    draw(page, path)
    assert page.locator("h1").count() == 1
    assert page.locator("#error").is_hidden()


def test_the_problem_page_draws_every_trial(page: Any) -> None:
    top = api(page.base, "/ui/api/overview?verdict=custom_wins&sort=trials&order=desc")
    row = top["rows"][0]
    gpu = row["gpu_model"]
    data = api(page.base, f"/ui/api/problems/{row['problem_id']}/trials?gpu={quote(gpu)}")
    draw(page, f"/ui/problems/{row['problem_id']}?gpu={quote(gpu)}")
    n = len(data["trials"]["id"])
    ok = sum(s == "ok" for s in data["trials"]["status"])
    assert n == row["trials"] and n > 10

    convergence = {t["name"]: t for t in chart(page, "chart-convergence")}
    best = convergence["best so far"]
    assert best["points"] == n
    ys = [y for y in best["y"] if y is not None]
    assert ys == sorted(ys, reverse=True)  # best so far never gets worse
    library = next(t for name, t in convergence.items() if name.startswith("library best"))
    assert library["y"][0] == pytest.approx(data["library_best"]["median_us"])
    assert "served" in convergence

    trials = chart(page, "chart-trials")
    assert sum(t["points"] for t in trials) == n
    assert {t["name"].split(" · ")[0] for t in trials} == set(data["trials"]["backend"])

    roofline = chart(page, "chart-roofline")
    candidates = [t for t in roofline if t["name"] in set(data["trials"]["backend"])]
    assert sum(t["points"] for t in candidates) == ok
    ceilings = [t for t in roofline if "TFLOP/s" in t["name"]]
    assert len(ceilings) == len(data["roofline"]["peaks"])

    verify = chart(page, "chart-verify")
    rounds = data["decision"]["verification"]
    assert [t["y"] for t in verify][:2] == [rounds["library_us"], rounds["custom_us"]]

    failed = page.locator("#failed tbody tr").all_inner_texts()
    bad = [(s, e) for s, e in zip(data["trials"]["status"], data["trials"]["error"],
                                  strict=True) if s != "ok"]
    if bad:
        assert len(failed) == len(bad)
        assert all(s in row and (e or "") in row for (s, e), row in zip(bad, failed,
                                                                       strict=True))
    assert "custom_wins" in page.locator("#decision").inner_text()
    assert page.locator("#rationale").inner_text().strip()
    assert page.locator("#history tbody tr").count() >= 1


def test_copy_button_copies_the_winning_configuration(page: Any) -> None:
    row = api(page.base, "/ui/api/overview?verdict=custom_wins")["rows"][0]
    draw(page, f"/ui/problems/{row['problem_id']}?gpu={quote(row['gpu_model'])}")
    page.locator("button[data-copy=config]").click()
    page.wait_for_function("() => document.querySelector('button[data-copy=config]')"
                           ".textContent === 'Copied'")
    copied = page.evaluate("() => navigator.clipboard.readText()")
    decision = api(page.base, f"/v1/problems/{row['problem_id']}/decision?gpu="
                              f"{quote(row['gpu_model'])}")
    assert json.loads(copied) == decision["config"]
    snippet = page.locator("#snippet").inner_text()
    assert "KernelSearchClient" in snippet and "registry.make_callable" in snippet


def test_filters_change_the_rows(page: Any) -> None:
    draw(page, "/ui")
    everything = api(page.base, "/ui/api/overview")["total"]
    assert page.locator("[data-strip=rows]").inner_text() == str(everything)

    page.select_option("select[name=verdict]", "custom_wins")
    page.wait_for_url("**verdict=custom_wins**")
    verdicts = cells(page, 5)
    assert verdicts and set(verdicts) == {"custom_wins"}
    wins = api(page.base, "/ui/api/overview?verdict=custom_wins")["total"]
    assert 0 < wins < everything
    assert page.locator("[data-strip=rows]").inner_text() == str(wins)
    assert page.locator("[data-strip=custom_wins]").inner_text() == str(wins)

    page.select_option("select[name=kind]", "attention")
    page.wait_for_url("**kind=attention**")
    assert set(cells(page, 1)) == {"attention"} and set(cells(page, 5)) == {"custom_wins"}

    page.goto(page.base + "/ui")
    gpus = page.locator("select[name=gpu] option").all_inner_texts()[1:]
    assert len(gpus) >= 2
    page.select_option("select[name=gpu]", gpus[1])
    page.wait_for_url("**gpu=**")
    assert set(cells(page, 4)) == {gpus[1]}


def test_the_shape_box_searches_the_shapes(page: Any) -> None:
    draw(page, "/ui")
    page.fill("input[name=shape]", "4096x")
    page.press("input[name=shape]", "Enter")
    page.wait_for_url("**shape=4096x**")
    shapes = cells(page, 2)
    assert shapes and all("4096x" in s for s in shapes)
    assert len(shapes) < api(page.base, "/ui/api/overview")["total"]


@pytest.mark.parametrize("column,key", [(7, "speedup"), (9, "trials"), (8, "roofline")])
def test_sorting_by_a_column_orders_the_rows(page: Any, column: int, key: str) -> None:
    draw(page, "/ui?per_page=200")
    before = cells(page, column)
    page.locator(f"th[data-sort={key}] a").click()
    page.wait_for_url(f"**sort={key}**order=desc**")
    down = [number(c) for c in cells(page, column) if number(c) == number(c)]
    assert down == sorted(down, reverse=True) and len(down) > 10
    assert cells(page, column) != before
    page.locator(f"th[data-sort={key}] a").click()
    page.wait_for_url(f"**sort={key}**order=asc**")
    up = [number(c) for c in cells(page, column) if number(c) == number(c)]
    assert up == sorted(up)


def test_pagination_walks_the_rows(page: Any) -> None:
    draw(page, "/ui?per_page=10&sort=shape&order=asc")
    first = cells(page, 2)
    assert len(first) == 10
    page.locator("#pager a[rel=next]").click()
    page.wait_for_url("**page=2**")
    second = cells(page, 2)
    assert page.locator("#page").inner_text() == "2"
    assert len(second) == 10 and second != first
    assert sorted(first + second) == first + second  # the order carries over the pages
    page.locator("#pager a[rel=prev]").click()
    page.wait_for_url("**page=1**")
    assert cells(page, 2) == first


def test_the_shapes_map_draws_each_decided_shape(page: Any) -> None:
    gpu = api(page.base, "/ui/api/overview?sort=gpu&order=asc")["rows"][0]["gpu_model"]
    data = api(page.base, f"/ui/api/shapes?kind=gemm&gpu={quote(gpu)}")
    draw(page, f"/ui/shapes?kind=gemm&gpu={quote(gpu)}")
    traces = chart(page, "chart-shapes")
    heat = [t for t in traces if t["type"] == "heatmap"]
    assert heat and heat[0]["points"] == len(data["cells"]) > 5
    markers = [t for t in traces if t["type"] == "scatter"]
    assert sum(t["points"] for t in markers) == len(data["cells"])
    assert {t["name"] for t in markers} <= set(data["verdicts"])
    page.locator("select[name=dtype]").select_option(index=1)
    page.wait_for_url("**dtype=**")
    page.wait_for_function("() => document.getElementById('chart-shapes').data")


def test_workers_show_their_lease(page: Any) -> None:
    draw(page, "/ui/workers")
    workers = api(page.base, "/ui/api/workers")["workers"]
    rows = page.locator("#workers tbody tr").all_inner_texts()
    assert len(rows) == len(workers) >= 2
    leased = [w for w in workers if w["lease_id"]]
    assert leased
    text = page.locator(f"tr[data-worker='{leased[0]['id']}']").inner_text()
    assert f"{leased[0]['leased']} candidate" in text and leased[0]["gpu_model"] in text


def test_cancel_a_queued_job(page: Any) -> None:
    draw(page, "/ui/jobs")
    queued = [j for j in api(page.base, "/ui/api/jobs/active")["jobs"]
              if j["status"] == "queued"]
    job = queued[0]["id"]
    button = page.locator(f"button[data-cancel='{job}']")
    button.click()
    assert button.inner_text() == "Confirm cancel"
    button.click()
    page.wait_for_function(f"() => !document.querySelector(\"#active tr[data-job='{job}']\")")
    page.wait_for_function("(t) => document.getElementById('cancel-note').textContent"
                           ".includes(t)", arg=f"Job {job} cancelled")
    assert api(page.base, f"/v1/jobs/{job}")["status"] == "cancelled"
