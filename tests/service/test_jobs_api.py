"""The /v1 contract for users: jobs, best, problems and trials (worker side driven by fakes)."""

from __future__ import annotations

from typing import Any

from fastapi.testclient import TestClient


def test_create_job_dedups_problem(client: TestClient, driver: Any) -> None:
    a = driver.submit({"max_trials": 4})
    assert a["status"] == "queued"
    assert a["problem_key"] == "gemm:b1:m512:n512:k512:fp16:fp16:fp32:rr"
    assert a["budget"] == {"max_trials": 4, "max_seconds": None}
    assert a["backends"] == ["cublas", "cublaslt", "cutlass", "repaired", "triton",
                             "triton_repair", "triton_streamk", "triton_skinny"]
    assert a["progress"] == {"trials_done": 0, "trials_budget": 4, "elapsed_s": None,
                             "outstanding": 0}
    same = dict(driver.PROBLEM, batch=1, out_dtype="fp16", layout_a="row")
    b = driver.submit(problem=same)
    assert b["id"] != a["id"] and b["problem_id"] == a["problem_id"]
    assert b["budget"]["max_trials"] == 8  # default_max_trials when the budget is omitted
    other = driver.submit(problem=dict(driver.PROBLEM, layout_b="col"))
    assert other["problem_id"] != a["problem_id"]
    assert driver.job(a["id"])["problem_key"] == a["problem_key"]


def test_a_submitted_jobs_answer_is_its_view(client: TestClient, driver: Any) -> None:
    """POST /v1/jobs answers with the new job as GET /v1/jobs/{id} shows it (built from the
    submission's transaction, not read back): waiting for a worker, then not."""
    lonely = driver.submit({"max_trials": 4})
    assert lonely["waiting"] and "no worker" in lonely["waiting"]
    assert lonely == driver.job(lonely["id"])
    driver.register("w-view")
    seen = driver.submit({"max_trials": 4}, problem=dict(driver.PROBLEM, m=1024))
    assert seen["waiting"] is None and seen["problem_id"] != lonely["problem_id"]
    assert seen == driver.job(seen["id"])


def test_unknown_ids_are_404(client: TestClient) -> None:
    for method, path in (("GET", "/v1/jobs/999"), ("POST", "/v1/jobs/999/cancel"),
                         ("GET", "/v1/problems/999/trials"),
                         ("POST", "/v1/workers/999/lease"),
                         ("POST", "/v1/workers/999/leases/abc/renew"),
                         ("GET", f"/v1/jobs/{2**70}")):
        r = client.request(method, path, json={} if method == "POST" else None)
        assert r.status_code in (404, 422), (path, r.text)
        assert r.status_code == 404 or "less than or equal" in r.text
    assert "not found" in client.get("/v1/jobs/999").json()["detail"]


def test_list_jobs_newest_first_and_paginated(client: TestClient, driver: Any) -> None:
    ids = [driver.submit({"max_trials": 1})["id"] for _ in range(5)]
    page = client.get("/v1/jobs", params={"limit": 2, "offset": 1}).json()
    assert page["total"] == 5 and page["limit"] == 2 and page["offset"] == 1
    assert [j["id"] for j in page["items"]] == [ids[3], ids[2]]
    assert client.get("/v1/jobs", params={"limit": 0}).status_code == 422
    assert client.get("/v1/jobs", params={"offset": -1}).status_code == 422


def test_cancel(client: TestClient, driver: Any) -> None:
    job = driver.submit({"max_trials": 4})
    worker = driver.register()
    grant = driver.lease(worker, n=2)
    assert len(grant["candidates"]) == 2
    r = client.post(f"/v1/jobs/{job['id']}/cancel")
    assert r.status_code == 200 and r.json()["status"] == "cancelled"
    assert r.json()["progress"]["outstanding"] == 0
    assert client.post(f"/v1/jobs/{job['id']}/cancel").status_code == 409
    # Nothing of a cancelled job is handed out again.
    assert driver.lease(worker)["candidates"] == []
    # A measurement that was already running is still kept, once.
    c = grant["candidates"][0]
    assert driver.report(worker, grant["lease_id"], c["id"], driver.fake_ok(50.0))["accepted"] \
        == [c["id"]]
    again = driver.report(worker, grant["lease_id"], c["id"], driver.fake_ok(50.0))
    assert again["rejected"][0]["reason"].endswith("already reported")


def test_best_404_then_answer(client: TestClient, driver: Any) -> None:
    query = {"m": 512, "n": 512, "k": 512, "dtype": "fp16"}
    r = client.get("/v1/best", params=query)
    assert r.status_code == 404
    assert "submit a job with POST /v1/jobs" in r.json()["detail"]
    assert "512x512x512 fp16" in r.json()["detail"]
    job = driver.submit({"max_trials": 2})
    worker = driver.register()
    grant = driver.lease(worker)
    by_backend = {c["backend"]: c for c in grant["candidates"]}
    assert set(by_backend) == {"cublas", "triton"}
    assert grant["candidates"][0]["backend"] == "cublas"  # the library baseline goes first
    times = {}
    for i, c in enumerate(grant["candidates"]):
        times[c["id"]] = 100.0 if c["backend"] == "cublas" else 80.0 + i
        status = driver.fake_ok(times[c["id"]])
        driver.report(worker, grant["lease_id"], c["id"], status)
    driver.times.update(times)
    assert driver.job(job["id"])["stage"] == "verify"  # custom is faster: re-measure both
    assert driver.run_all(worker) == 0  # answers the verification task
    best = client.get("/v1/best", params=query).json()
    assert best["backend"] == "triton" and best["median_us"] == min(times.values())
    assert best["decision"]["verdict"] == "custom_wins" and best["decision"]["verified"]
    assert best["gpu"] == driver.GPU and best["library"]["median_us"] == 100.0
    assert best["problem_key"] == job["problem_key"]
    assert best["tflops"] == 2 * 512**3 / (best["median_us"] * 1e-6) / 1e12
    assert client.get("/v1/best", params={**query, "gpu": driver.GPU}).json() == best
    assert client.get("/v1/best", params={**query, "gpu": "other"}).status_code == 404
    state = driver.job(job["id"])
    assert state["status"] == "done" and state["gpu"] == driver.GPU
    assert state["best"]["candidate_id"] == best["candidate_id"]
    assert state["library_best"]["backend"] == "cublas"
    assert state["custom_best"]["backend"] == "triton"
    assert state["speedup"] == state["library_best"]["median_us"] / state["best"]["median_us"]
    assert state["progress"]["trials_done"] == 2


def test_best_prefers_real_gpu_and_ignores_wrong_results(client: TestClient,
                                                         driver: Any) -> None:
    query = {"m": 512, "n": 512, "k": 512, "dtype": "fp16"}
    driver.submit({"max_trials": 1}, gpu=driver.GPU)
    driver.submit({"max_trials": 1}, gpu="cpu-interpreter", backends=["triton"])
    gpu_worker = driver.register("gpu")
    cpu_worker = driver.register("cpu", gpu="cpu-interpreter", mode="interpreter",
                                 backends=["triton"], memory_bytes=0)
    g = driver.lease(gpu_worker)
    for c in g["candidates"]:  # the GPU's results: a fast wrong one and a slower right one
        m = (driver.fake_failure("wrong_result") | {"median_us": 1.0}
             if c["backend"] == "triton" else driver.fake_ok(100.0))
        driver.report(gpu_worker, g["lease_id"], c["id"], m)
    i = driver.lease(cpu_worker)
    assert [c["backend"] for c in i["candidates"]] == ["triton"]
    driver.report(cpu_worker, i["lease_id"], i["candidates"][0]["id"], driver.fake_ok(5000.0))
    best = client.get("/v1/best", params=query).json()
    assert best["gpu"] == driver.GPU and best["backend"] == "cublas"
    interp = client.get("/v1/best", params={**query, "gpu": "cpu-interpreter"}).json()
    assert interp["median_us"] == 5000.0 and interp["library"] is None


def test_problems_and_trials_pages(client: TestClient, driver: Any) -> None:
    job = driver.submit({"max_trials": 3})
    driver.submit({"max_trials": 1}, problem=dict(driver.PROBLEM, m=1024))
    worker = driver.register()
    slower = lambda c: 100.0 if c["backend"] == "cublas" else 200.0 + c["id"]  # noqa: E731
    # cuBLAS + Triton trials of both jobs; the custom kernels lose, so nothing is re-verified
    assert driver.run_all(worker, median_of=slower) == 4 + 2
    problems = client.get("/v1/problems", params={"limit": 1}).json()
    assert problems["total"] == 2 and len(problems["items"]) == 1
    assert problems["items"][0]["key"].startswith("gemm:b1:m1024")
    first = client.get("/v1/problems", params={"offset": 1}).json()["items"][0]
    assert first["id"] == job["problem_id"] and first["measurements"] == 4
    trials = client.get(f"/v1/problems/{job['problem_id']}/trials",
                        params={"limit": 3}).json()
    assert trials["total"] == 4 and len(trials["items"]) == 3
    t = trials["items"][0]
    assert {"config", "status", "median_us", "p20_us", "p80_us", "compile_s", "bench_s",
            "trial_number", "gpu", "created_at"} <= set(t)
    assert t["env"] == {"fake": True}  # the environment the worker reported is kept
    rest = client.get(f"/v1/problems/{job['problem_id']}/trials",
                      params={"offset": 3}).json()["items"]
    assert [x["backend"] for x in rest] == ["cublas"]


def test_openapi_docs(client: TestClient) -> None:
    assert client.get("/docs").status_code == 200
    paths = client.get("/openapi.json").json()["paths"]
    for path in ("/v1/jobs", "/v1/jobs/{job_id}", "/v1/jobs/{job_id}/cancel", "/v1/best",
                 "/v1/problems", "/v1/problems/{problem_id}/trials", "/v1/workers/register",
                 "/v1/workers/{worker_id}/lease",
                 "/v1/workers/{worker_id}/leases/{lease_id}/renew",
                 "/v1/workers/{worker_id}/report"):
        assert path in paths


def test_openapi_documents_the_problem_fields_of_best(client: TestClient) -> None:
    params = {p["name"]: p for p in
              client.get("/openapi.json").json()["paths"]["/v1/best"]["get"]["parameters"]}
    # GEMM's fields (the default kind) and attention's, each optional, with its bounds
    for name in ("m", "n", "k", "dtype", "layout_b", "heads", "s_kv", "causal"):
        assert params[name]["in"] == "query" and params[name]["required"] is False, name
    assert params["m"]["schema"]["type"] == "integer" and params["m"]["schema"]["minimum"] == 1
    assert "gemm" in params["m"]["description"] and "attention" in params["heads"]["description"]
    # a field of both kinds takes either kind's schema
    dtypes = [set(o["enum"]) for o in params["dtype"]["schema"]["anyOf"]]
    assert {"bf16", "fp16", "fp32", "fp8_e4m3"} in dtypes and {"bf16", "fp16", "fp32"} in dtypes
    assert {"kind", "gpu", "exact"} <= set(params)
