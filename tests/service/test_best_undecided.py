"""``GET /v1/best`` before any decision serves the fastest ok measurement, not another one
(the measurements are FAKE, reported by the test driver)."""

from __future__ import annotations

from typing import Any

from fastapi.testclient import TestClient

QUERY = {"m": 512, "n": 512, "k": 512, "dtype": "fp16"}


def test_best_without_a_decision_is_the_fastest(client: TestClient, driver: Any) -> None:
    job = driver.submit({"max_trials": 2})
    worker = driver.register()
    grant = driver.lease(worker)
    assert {c["backend"] for c in grant["candidates"]} == {"cublas", "triton"}
    # The faster measurement is reported first, so "the latest" would be the slower one too.
    times = {c["id"]: (70.0 if c["backend"] == "triton" else 100.0) for c in grant["candidates"]}
    for c in sorted(grant["candidates"], key=lambda c: times[c["id"]]):
        driver.report(worker, grant["lease_id"], c["id"], driver.fake_ok(times[c["id"]]))
    assert driver.job(job["id"])["stage"] == "verify"  # no decision yet: verification is due
    best = client.get("/v1/best", params=QUERY).json()
    assert best["decision"] is None, best["decision"]
    assert best["backend"] == "triton" and best["median_us"] == 70.0
    assert best["library"]["backend"] == "cublas" and best["library"]["median_us"] == 100.0
