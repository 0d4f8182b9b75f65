"""The dashboard's pages and data over HTTP (no browser; ``tests/ui`` has those), on SQLite and
Postgres: totals kept as measurements arrive, filters, sorts and pages done in SQL, bad
queries refused with the parameter named, nothing loaded from elsewhere."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any
from urllib.parse import quote

import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient

from db import summaries
from db.dashboard import SORTS
from scripts.dashboard.seed import seed_database
from search.decision import early_stop_savings
from search.roofline import efficiency
from service.settings import ServiceSettings

PAGES = ("/ui", "/ui/jobs", "/ui/workers", "/ui/shapes", "/ui/shapes?kind=attention")


def test_totals_and_savings_follow_the_measurements(driver: Any, app: FastAPI) -> None:
    job = driver.submit(budget={"max_trials": 6})
    worker = driver.register()
    failed = None
    for _ in range(50):
        grant = driver.lease(worker)
        if not grant["candidates"]:
            break
        for c in grant["candidates"]:
            if failed is None and c["backend"] == "triton":
                failed = c["id"]
                driver.report(worker, grant["lease_id"], c["id"], driver.fake_failure())
            else:
                driver.report(worker, grant["lease_id"], c["id"], driver.answer(c))
    done = driver.job(job["id"])
    assert done["status"] == "done" and failed is not None
    decision = done["decision"]
    trials = driver.http.get(f"/v1/problems/{done['problem_id']}/trials?limit=500").json()

    data = driver.http.get("/ui/api/overview").json()
    (row,) = data["rows"]
    assert row["trials"] == trials["total"] and row["failed"] == 1
    # FAKE measurements cost 0.1 s compile + 0.2 s bench, the verification included
    tasks = 1 if decision["verified"] else 0
    assert row["gpu_s"] == pytest.approx(0.3 * (trials["total"] - 1 + tasks))
    assert (row["verdict"], row["backend"]) == (decision["verdict"], decision["backend"])
    assert row["speedup"] == pytest.approx(decision["speedup"])
    assert row["roofline_share"] == pytest.approx(
        efficiency(decision["attainable_us"], decision["median_us"]))
    strip = data["strip"]
    assert strip["custom_wins"] == (decision["verdict"] == "custom_wins")
    assert strip["saved_gpu_s"] == pytest.approx(
        early_stop_savings(decision["spend"], 6, full_search=False))

    with app.state.flow.db.session() as s:  # the running totals are the measurements' sums
        summaries.rebuild(s)
    again = driver.http.get("/ui/api/overview").json()["rows"][0]
    assert {k: again[k] for k in ("trials", "failed")} == {k: row[k] for k in
                                                           ("trials", "failed")}
    assert again["gpu_s"] == pytest.approx(row["gpu_s"])


@pytest.fixture
def seeded_client(database_url: str, make_app: Callable[..., FastAPI]) -> TestClient:
    seed_database(database_url, problems=24, measurements=2500, attention_share=0.25,
                  active=2, seed=5)
    return TestClient(make_app(ServiceSettings(database_url=database_url)))


def _all(http: TestClient, query: str) -> list[dict[str, Any]]:
    rows, page = [], 1
    while True:
        data = http.get(f"/ui/api/overview?{query}&per_page=10&page={page}").json()
        rows += data["rows"]
        if page >= data["pages"]:
            return rows
        page += 1


def test_filters_sorts_and_pages(seeded_client: TestClient) -> None:
    http = seeded_client
    everything = http.get("/ui/api/overview?per_page=200").json()
    total = everything["total"]
    assert total == len(everything["rows"]) > 24  # problems on more than one GPU model
    keys = {(r["problem_id"], r["gpu_model"]) for r in everything["rows"]}
    for sort in SORTS:
        for order in ("asc", "desc"):
            rows = _all(http, f"sort={sort}&order={order}")
            assert len(rows) == total and {(r["problem_id"], r["gpu_model"])
                                           for r in rows} == keys  # pages partition the rows
            column = {"shape": "label", "gpu": "gpu_model", "roofline": "roofline_share",
                      "last": "last_at"}.get(sort, sort)
            values = [r[column] for r in rows]
            present = [v for v in values if v is not None]
            assert values[:len(present)] == present  # nulls last
            assert present == sorted(present, reverse=order == "desc"), (sort, order)
    for name, value, column in (("kind", "attention", "kind"), ("verdict", "custom_wins",
                                                                "verdict")):
        rows = _all(http, f"{name}={value}")
        assert rows and {r[column] for r in rows} == {value}
        assert len(rows) == sum(r[column] == value for r in everything["rows"])
    gpu = everything["rows"][0]["gpu_model"]
    rows = _all(http, f"gpu={quote(gpu)}")
    assert {r["gpu_model"] for r in rows} == {gpu}
    shape = next(r["label"] for r in everything["rows"] if r["kind"] == "gemm").split("x")[0]
    rows = _all(http, f"shape={shape}x")
    assert rows and all(f"{shape}x" in r["label"] for r in rows)
    undecided = http.get("/ui/api/overview?verdict=undecided").json()
    assert all(r["verdict"] is None for r in undecided["rows"])
    assert undecided["total"] == total - everything["strip"]["decided"]
    strip = http.get("/ui/api/overview?verdict=custom_wins").json()["strip"]
    assert strip["rows"] == strip["custom_wins"] == strip["decided"]


def test_pages_answer_and_load_nothing_from_elsewhere(seeded_client: TestClient) -> None:
    http = seeded_client
    row = http.get("/ui/api/overview?sort=trials&order=desc").json()["rows"][0]
    problem = f"/ui/problems/{row['problem_id']}?gpu={quote(row['gpu_model'])}"
    for path in (*PAGES, problem, "/ui?kind=&gpu=&verdict=&shape=", "/ui/jobs?page=2"):
        r = http.get(path)
        assert r.status_code == 200, (path, r.text[:300])
        for url in re.findall(r'(?:src|href)="([^"]*)"', r.text):
            assert url.startswith(("/", "#", "data:", "?")), (path, url)
    assert http.get("/", follow_redirects=False).headers["location"] == "/ui"
    for asset in ("dashboard.js", "problem.js", "jobs.js", "shapes.js", "dashboard.css"):
        text = http.get(f"/ui/static/{asset}").text
        assert not re.search(r"https?://", text), asset
    plotly = http.get("/ui/vendor/plotly.min.js")
    assert plotly.status_code == 200 and len(plotly.content) > 1_000_000
    trials = http.get(f"/ui/api/problems/{row['problem_id']}/trials?gpu="
                      f"{quote(row['gpu_model'])}").json()
    assert len(trials["trials"]["id"]) == trials["total"] == row["trials"]
    other = http.get(f"/ui/api/problems/{row['problem_id']}/trials?gpu=no%20such%20gpu")
    assert other.status_code == 422 and "gpu" in other.text and row["gpu_model"] in other.text


@pytest.mark.parametrize("path,field", [
    ("/ui?sort=bogus", "sort"), ("/ui?order=up", "order"), ("/ui?page=0", "page"),
    ("/ui?per_page=5000", "per_page"), ("/ui?verdict=maybe", "verdict"),
    ("/ui?kind=no%20such", "kind"), ("/ui?shape=%01", "shape"),
    ("/ui/api/overview?page=-1", "page"), ("/ui/problems/0", "problem_id"),
    ("/ui/api/shapes?kind=nope", "kind"), ("/ui/api/shapes?dtype=b%20f", "dtype"),
    ("/ui/jobs?page=x", "page"), ("/ui/problems/1?gpu=%00", "gpu"),
])
def test_bad_queries_are_refused_naming_the_parameter(client: TestClient, path: str,
                                                      field: str) -> None:
    r = client.get(path)
    assert r.status_code == 422, (path, r.status_code, r.text[:200])
    assert field in r.text


def test_unknown_problem_is_a_404(client: TestClient) -> None:
    for path in ("/ui/problems/999", "/ui/api/problems/999/trials"):
        r = client.get(path)
        assert r.status_code == 404 and "problem 999 not found" in r.text


def test_the_dashboard_can_be_turned_off(make_app: Callable[..., FastAPI],
                                         settings: ServiceSettings) -> None:
    off = TestClient(make_app(settings.model_copy(update={"dashboard": False})))
    assert off.get("/ui").status_code == 404 and off.get("/").status_code == 404
    assert off.get("/healthz").status_code == 200


def test_the_live_jobs_are_the_oldest_active_ones(driver: Any,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    from service.dashboard import api

    monkeypatch.setattr(api, "MAX_ACTIVE", 5)
    ids = [driver.submit(problem={**driver.PROBLEM, "m": 64 + i})["id"] for i in range(7)]
    data = driver.http.get("/ui/api/jobs/active").json()
    assert data["active"] == 7
    assert [j["id"] for j in data["jobs"]] == ids[:5]
    assert all(j["status"] == "queued" and j["trials_done"] == 0 for j in data["jobs"])
    page = driver.http.get("/ui/jobs").text
    assert "The 5 oldest of 7 active jobs." in page


def test_live_progress_is_what_the_job_api_says(driver: Any) -> None:
    job = driver.submit(budget={"max_trials": 8})
    queued = driver.submit(problem={**driver.PROBLEM, "m": 96}, gpu="NVIDIA B200")
    worker = driver.register()
    for _ in range(3):  # part of the way: the library stage, then some custom trials
        grant = driver.lease(worker, n=3)
        for c in grant["candidates"][:2]:
            driver.report(worker, grant["lease_id"], c["id"], driver.answer(c))
    live = {j["id"]: j for j in driver.http.get("/ui/api/jobs/active").json()["jobs"]}
    state = driver.job(job["id"])
    assert state["status"] == "running" and state["progress"]["trials_done"] > 0
    mine = live[job["id"]]
    assert (mine["trials_done"], mine["outstanding"], mine["trials_budget"]) == (
        state["progress"]["trials_done"], state["progress"]["outstanding"], 8)
    assert mine["best_us"] == pytest.approx(state["best"]["median_us"])
    assert mine["best_backend"] == state["best"]["backend"]
    assert mine["library_us"] == pytest.approx(state["library_best"]["median_us"])
    assert mine["speedup"] == pytest.approx(state["speedup"]) and mine["stage"] == state["stage"]
    other = live[queued["id"]]
    assert other["waiting"] == driver.job(queued["id"])["waiting"] and "NVIDIA B200" in (
        other["waiting"] or "")


def test_the_roofline_share_follows_the_floor_slack(app: FastAPI, client: TestClient) -> None:
    """At the floor or a little under it: 100%; far under (the roofline refuted): none;
    over it: the ratio. As ``search.roofline.efficiency``, computed in SQL."""
    from datetime import UTC, datetime

    from db import decisions, jobs
    from search.types import parse_problem

    now = datetime(2026, 1, 1, tzinfo=UTC)
    cases = {64: (10.0, 10.5), 80: (10.0, 9.5), 96: (10.0, 5.0)}  # m: (attainable, median)
    with app.state.flow.db.session() as s:
        for m, (attainable, median) in cases.items():
            p = jobs.get_or_create_problem(s, parse_problem({"m": m, "n": 64, "k": 64}), now)
            summaries.add(s, p.id, "GPU", kernel=True, ok=True, gpu_s=1.0, now=now)
            decisions.add_decision(
                s, problem_id=p.id, job_id=None, gpu_model="GPU", verdict="custom_wins",
                chosen="custom", backend="triton", config={}, median_us=median, speedup=1.1,
                bound="memory", attainable_us=attainable, verified=True, rationale="FAKE",
                evidence={}, env={}, now=now)
    rows = client.get("/ui/api/overview?sort=roofline&order=desc").json()["rows"]
    share = {r["label"].split("x")[0]: r["roofline_share"] for r in rows}
    assert share == {"80": 1.0, "64": pytest.approx(10.0 / 10.5), "96": None}
    assert [r["label"].split("x")[0] for r in rows] == ["80", "64", "96"]  # none sorts last
    assert efficiency(10.0, 5.0) is None and efficiency(10.0, 9.5) == 1.0
