"""``GET /v1/best`` keeps its answers per process (``service.best_cache``) only while the
problem's generation stands: a measurement or a decision committed by any process changes the
answer at once (the measurements are FAKE, reported by the test driver)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from fastapi import FastAPI
from fastapi.testclient import TestClient

from service.settings import ServiceSettings
from tests.service.conftest import Driver, seed_calibrations

QUERY = {"m": 512, "n": 512, "k": 512, "dtype": "fp16"}


def _measure(driver: Driver, times: dict[str, float]) -> None:
    """Lease the first candidates and report each backend's FAKE time."""
    worker = driver.register()
    grant = driver.lease(worker)
    for c in grant["candidates"]:
        driver.report(worker, grant["lease_id"], c["id"],
                      driver.answer(c, lambda c: times[c["backend"]]))


def test_a_repeated_question_is_answered_from_memory(app: FastAPI, client: TestClient,
                                                     driver: Driver) -> None:
    driver.submit({"max_trials": 2})
    _measure(driver, {"cublas": 100.0, "triton": 70.0})
    cache = app.state.best_cache
    first = client.get("/v1/best", params=QUERY)
    hits = cache.hits
    again = client.get("/v1/best", params=QUERY)
    assert first.status_code == again.status_code == 200
    assert again.json() == first.json() and first.json()["median_us"] == 70.0
    assert cache.hits == hits + 1


def test_a_new_measurement_changes_the_kept_answer(client: TestClient, driver: Driver) -> None:
    driver.submit({"max_trials": 2})
    worker = driver.register()
    grant = driver.lease(worker)
    by_backend = {c["backend"]: c for c in grant["candidates"]}
    driver.report(worker, grant["lease_id"], by_backend["cublas"]["id"], driver.fake_ok(100.0))
    assert client.get("/v1/best", params=QUERY).json()["median_us"] == 100.0
    assert client.get("/v1/best", params=QUERY).json()["median_us"] == 100.0  # kept
    driver.report(worker, grant["lease_id"], by_backend["triton"]["id"], driver.fake_ok(70.0))
    best = client.get("/v1/best", params=QUERY).json()
    assert best["median_us"] == 70.0 and best["backend"] == "triton"


def test_a_decision_changes_the_kept_answer(client: TestClient, driver: Driver) -> None:
    job = driver.submit({"max_trials": 2})
    worker = driver.register()
    # no decision yet: the fastest measurement (its verification is still due)
    grant = driver.lease(worker)
    for c in grant["candidates"]:
        driver.report(worker, grant["lease_id"], c["id"], driver.answer(
            c, lambda c: 100.0 if c["backend"] == "cublas" else 99.0))
    assert client.get("/v1/best", params=QUERY).json()["decision"] is None
    driver.run_all(worker, lambda c: 100.0 if c["backend"] == "cublas" else 99.0)
    assert driver.job(job["id"])["decision"] is not None
    best = client.get("/v1/best", params=QUERY).json()
    assert best["decision"] is not None and best["decision"]["job_id"] == job["id"]


def test_another_process_writing_changes_the_kept_answer(
        make_app: Callable[..., FastAPI], settings: ServiceSettings,
        secret_keeper: Callable[[TestClient], TestClient]) -> None:
    reader, writer = make_app(settings), make_app(settings)  # two API processes, one database
    seed_calibrations(writer)
    with TestClient(reader) as r, TestClient(writer) as w:
        driver = Driver(secret_keeper(w))
        driver.submit({"max_trials": 2})
        worker = driver.register()
        grant = driver.lease(worker)
        by_backend = {c["backend"]: c for c in grant["candidates"]}
        driver.report(worker, grant["lease_id"], by_backend["cublas"]["id"],
                      driver.fake_ok(100.0))
        assert r.get("/v1/best", params=QUERY).json()["median_us"] == 100.0
        driver.report(worker, grant["lease_id"], by_backend["triton"]["id"],
                      driver.fake_ok(70.0))
        assert r.get("/v1/best", params=QUERY).json()["median_us"] == 70.0


def test_an_unknown_problem_is_a_404_before_and_after_it_is_tuned(
        client: TestClient, driver: Driver) -> None:
    missing: Any = client.get("/v1/best", params=QUERY)
    assert missing.status_code == 404 and "POST /v1/jobs" in missing.json()["detail"]
    driver.submit({"max_trials": 2})
    queued = client.get("/v1/best", params=QUERY)  # known, not measured: still a 404
    assert queued.status_code == 404
    _measure(driver, {"cublas": 100.0, "triton": 70.0})
    assert client.get("/v1/best", params=QUERY).status_code == 200


def test_a_kept_answer_is_served_before_the_route_on_postgres(
        app: FastAPI, client: TestClient, driver: Driver, database_url: str) -> None:
    driver.submit({"max_trials": 2})
    worker = driver.register()
    grant = driver.lease(worker)
    by_backend = {c["backend"]: c for c in grant["candidates"]}
    driver.report(worker, grant["lease_id"], by_backend["cublas"]["id"], driver.fake_ok(100.0))
    cache = app.state.best_cache
    first = client.get("/v1/best", params=QUERY)  # a miss: the route answers and keeps it
    assert first.status_code == 200 and cache.fast_hits == 0
    again = client.get("/v1/best", params=QUERY)
    fast = 1 if database_url.startswith("postgresql") else 0
    # the fast path (service.best_fast) answers on Postgres only, with the route's bytes
    assert cache.fast_hits == fast
    assert again.content == first.content and again.json()["median_us"] == 100.0
    assert again.headers["content-type"] == "application/json"
    # a form the fast path does not read exactly as the route (exact=0) goes to the route
    routed = client.get("/v1/best", params={**QUERY, "exact": "0"})
    assert routed.content == first.content and cache.fast_hits == fast
    # a repeated parameter is the route's to judge (Starlette reads the last value: 256, a
    # problem never tuned)
    assert client.get("/v1/best?m=512&m=256&n=512&k=512&dtype=fp16").status_code == 404
    assert cache.fast_hits == fast
    # a new measurement: the kept answer is not served (the generation moved on)
    driver.report(worker, grant["lease_id"], by_backend["triton"]["id"], driver.fake_ok(70.0))
    moved = client.get("/v1/best", params=QUERY)
    assert moved.status_code == 200 and moved.json()["median_us"] == 70.0
    assert cache.fast_hits == fast
