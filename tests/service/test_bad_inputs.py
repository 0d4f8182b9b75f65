"""Nothing a client sends may produce a 500: every bad input is a 4xx naming the field."""

from __future__ import annotations

import json
from typing import Any

import pytest
from fastapi.testclient import TestClient

from service.settings import ServiceSettings

P = {"kind": "gemm", "m": 64, "n": 64, "k": 64, "dtype": "fp16"}


def job(**over: Any) -> dict[str, Any]:
    return {"problem": dict(P), **over}


def problem(**over: Any) -> dict[str, Any]:
    return {"problem": {**P, **over}}


#: (body, a word the error must name)
BAD_JOBS: list[tuple[Any, str]] = [
    (problem(m=0), "m"), (problem(n=-5), "n"), (problem(k=2**40), "k"),
    (problem(batch=0), "batch"), (problem(m="64"), "m"), (problem(m=64.5), "m"),
    (problem(m=True), "m"), (problem(m=None), "m"), (problem(dtype="int4"), "dtype"),
    (problem(dtype=""), "dtype"), (problem(out_dtype="fp8_e4m3"), "out_dtype"),
    (problem(acc_dtype="fp16"), "acc_dtype"), (problem(layout_a="diag"), "layout_a"),
    (problem(layout_b=1), "layout_b"), (problem(kind="conv2d"), "kind"),
    (problem(M=64), "M"), (problem(dtype="fp16\x00"), "dtype"),
    (problem(m=2**31 - 1, n=2**31 - 1, k=2**31 - 1), "max_problem_bytes"),
    ({"problem": {"m": 64, "n": 64}}, "k"), ({}, "problem"), ({"problem": None}, "problem"),
    ({"problem": [1, 2]}, "problem"), ([], "body"), ("gemm", "body"), (None, "body"),
    (job(budget={}), "budget"), (job(budget={"max_trials": 0}), "max_trials"),
    (job(budget={"max_trials": 10_001}), "max_trials"),
    (job(budget={"max_trials": 10**30}), "max_trials"),
    (job(budget={"max_trials": "many"}), "max_trials"),
    (job(budget={"max_seconds": 0}), "max_seconds"),
    (job(budget={"max_seconds": -1}), "max_seconds"),
    (job(budget={"max_seconds": 1e308}), "max_seconds"),
    (job(budget={"max_trials": 4, "max_minutes": 1}), "max_minutes"),
    (job(budget=5), "budget"), (job(backends=["rocblas"]), "backends"),
    (job(backends=[]), "backends"), (job(backends="triton"), "backends"),
    (job(gpu=""), "gpu"), (job(gpu="x" * 500), "gpu"), (job(seed=-1), "seed"),
    (job(seed=2**64), "seed"), (job(priority=1), "priority"),
]


@pytest.fixture
def small_client(make_app: Any, database_url: str) -> Any:
    app = make_app(ServiceSettings(database_url=database_url, max_problem_bytes=1 << 30))
    with TestClient(app) as c:
        yield c


def test_bad_job_bodies_are_4xx_naming_the_field(small_client: TestClient) -> None:
    for body, word in BAD_JOBS:
        r = small_client.post("/v1/jobs", json=body)
        assert 400 <= r.status_code < 500, (body, r.status_code, r.text)
        assert word in r.text, (body, r.text)
    detail = small_client.post("/v1/jobs", json=problem(dtype="int4")).json()["detail"]
    assert detail[0]["loc"] == ["body", "problem", "dtype"]
    assert "unknown dtype" in detail[0]["msg"]


def test_malformed_json_and_nan(client: TestClient) -> None:
    for raw in (b"{", b"not json", b'{"problem": {"m": NaN}}', b"\xff\xfe",
                b'{"problem": {"kind":"gemm","m":64,"n":64,"k":64}, "budget": '
                b'{"max_seconds": Infinity}}'):
        r = client.post("/v1/jobs", content=raw, headers={"content-type": "application/json"})
        assert 400 <= r.status_code < 500, (raw, r.text)
    r = client.post("/v1/jobs", content=json.dumps(job()), headers={"content-type": "text/plain"})
    assert 400 <= r.status_code < 500


BAD_QUERIES: list[tuple[str, dict[str, Any], str]] = [
    ("/v1/best", {}, "m"), ("/v1/best", {"m": 0, "n": 1, "k": 1}, "m"),
    ("/v1/best", {"m": "x", "n": 1, "k": 1}, "m"),
    ("/v1/best", {"m": 1, "n": 1, "k": 1, "dtype": "int4"}, "dtype"),
    ("/v1/best", {"m": 1, "n": 1, "k": 1, "layout_a": "z"}, "layout_a"),
    ("/v1/best", {"m": 1, "n": 1, "k": 1, "kind": "conv"}, "kind"),
    ("/v1/best", {"m": 1, "n": 1, "k": 1, "gpu": "a\x00b"}, "gpu"),
    ("/v1/best", {"m": 10**40, "n": 1, "k": 1}, "m"),
    ("/v1/jobs", {"limit": 0}, "limit"), ("/v1/jobs", {"limit": 10**6}, "limit"),
    ("/v1/jobs", {"offset": -1}, "offset"), ("/v1/jobs", {"limit": "all"}, "limit"),
    ("/v1/problems", {"offset": 2**80}, "offset"), ("/v1/problems/0/trials", {}, "problem_id"),
    ("/v1/problems/abc/trials", {}, "problem_id"), ("/v1/jobs/-1", {}, "job_id"),
]


def test_bad_queries_are_4xx(client: TestClient) -> None:
    for path, params, word in BAD_QUERIES:
        r = client.get(path, params=params)
        assert 400 <= r.status_code < 500, (path, params, r.text)
        assert word in r.text, (path, params, r.text)


def test_bad_worker_bodies_are_4xx(client: TestClient, driver: Any) -> None:
    worker = driver.register()
    dev = driver.device()
    bad: list[tuple[str, Any]] = [
        ("/v1/workers/register", {"name": "x"}),
        ("/v1/workers/register", {"name": "", "device": dev}),
        ("/v1/workers/register", {"name": "x", "device": {**dev, "mode": "tpu"}}),
        ("/v1/workers/register", {"name": "x", "device": {**dev, "gpu_model": ""}}),
        ("/v1/workers/register", {"name": "x", "device": {**dev, "memory_bytes": -1}}),
        ("/v1/workers/register", {"name": "x", "device": {**dev, "backends": ["cuda"]}}),
        ("/v1/workers/register", {"name": "x\x00", "device": dev}),
        (f"/v1/workers/{worker}/lease", {"max_candidates": 0}),
        (f"/v1/workers/{worker}/lease", {"max_candidates": 65}),
        (f"/v1/workers/{worker}/lease", {"max_candidates": "8"}),
        (f"/v1/workers/{worker}/report", {"results": []}),
        (f"/v1/workers/{worker}/report", {"lease_id": "x", "results": [{"candidate_id": 1}]}),
        (f"/v1/workers/{worker}/report", {"lease_id": "x", "results": [
            {"candidate_id": 1, "measurement": {"status": "great"}}]}),
        (f"/v1/workers/{worker}/report", {"lease_id": "x", "results": [
            {"candidate_id": 1, "measurement": {"status": "ok"}}]}),
        (f"/v1/workers/{worker}/report", {"lease_id": "x", "results": [
            {"candidate_id": 2**64, "measurement": {"status": "oom"}}]}),
        (f"/v1/workers/{worker}/report", {"lease_id": "x", "results": [
            {"candidate_id": 1, "measurement": {"status": "ok", "median_us": -3}}]}),
        (f"/v1/workers/{worker}/leases/a%2Fb/renew", None),
        (f"/v1/workers/{worker}/leases/{'x' * 100}/renew", None),
        (f"/v1/workers/{2**64}/lease", {"max_candidates": 1}),
        ("/v1/workers/0/lease", {"max_candidates": 1}),
    ]
    for path, body in bad:
        r = client.post(path, json=body)
        assert 400 <= r.status_code < 500, (path, body, r.text)


def test_report_for_unknown_candidate_is_rejected_not_500(client: TestClient,
                                                          driver: Any) -> None:
    worker = driver.register()
    out = driver.report(worker, "no-such-lease", 12345, driver.fake_failure("oom"))
    assert out == {"accepted": [], "rejected": [{"candidate_id": 12345,
                                                 "reason": "unknown candidate"}]}
    # NaN timings and NULs from a broken kernel are stored as unknown, not a crash.
    driver.submit({"max_trials": 1})
    grant = driver.lease(worker)
    c = grant["candidates"][-1]
    measurement = ('{"status": "wrong_result", "median_us": NaN, "rel_error": Infinity, '
                   '"error": "bad\\u0000", "env": {"x": NaN, "s": "a\\u0000"}}')
    raw = (f'{{"lease_id": "{grant["lease_id"]}", "results": [{{"candidate_id": {c["id"]}, '
           f'"measurement": {measurement}}}]}}')
    r = client.post(f"/v1/workers/{worker}/report", content=raw,
                    headers={"content-type": "application/json"})
    assert r.status_code == 200 and r.json()["accepted"] == [c["id"]], r.text


def test_booleans_are_no_numbers(client: Any) -> None:
    """``false`` where a number is expected is refused, not read as 0 (nor ``true`` as 1)."""
    device = {"gpu_model": "G", "mode": "cuda", "backends": ["cublas"], "memory_bytes": False}
    r = client.post("/v1/workers/register", json={"name": "w", "device": device})
    assert r.status_code == 422 and r.json()["detail"][0]["loc"][-1] == "memory_bytes"
    r = client.post("/v1/jobs", json={"problem": {"m": 8, "n": 8, "k": 8},
                                      "budget": {"max_seconds": True}})
    assert r.status_code == 422 and r.json()["detail"][0]["loc"][-1] == "max_seconds"
    r = client.post("/v1/jobs", json={"problem": {"m": 8, "n": 8, "k": 8},
                                      "policy": {"threshold": False}})
    assert r.status_code == 422 and r.json()["detail"][0]["loc"][-1] == "threshold"
    r = client.post("/v1/jobs", json={"problem": {"m": 8, "n": 8, "k": 8},
                                      "policy": {"force_custom": 1}})
    assert r.status_code == 422 and r.json()["detail"][0]["loc"][-1] == "force_custom"
