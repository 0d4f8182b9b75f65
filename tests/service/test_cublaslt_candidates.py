"""cuBLASLt's other ranked algorithms as library candidates in the decision loop: measured in
the first wave beside cuBLAS on workers that offer ``cublaslt``; a faster one is the library's
pick while cuBLAS's own stays the reference of every speed-up; a rank the worker refuses
(``invalid``) is data, not a failure. Measurements are FAKE (no GPU here)."""

from __future__ import annotations

from typing import Any

from fastapi.testclient import TestClient

from search.kinds.gemm import library
from search.kinds.gemm.spec import GemmProblem

AGENT = {"threshold": 0.9}
ATTAINABLE_US = (2 * 512 * 512 * 2 + 512 * 512 * 2) / 3000e9 * 1e6  # see test_decisions.py
WITH_LT = ["cublas", "cublaslt", "triton"]


def _invalid(c: dict[str, Any]) -> dict[str, Any]:
    return {"status": "invalid", "median_us": None, "p20_us": None, "p80_us": None, "reps": 0,
            "rel_error": None, "compile_s": None, "bench_s": None,
            "error": f"InvalidConfig: cuBLASLt ranks 3 algorithms for this problem; rank "
                     f"{c['config']['rank']} does not exist", "env": {"fake": True}}


def test_ranked_algorithms_are_library_candidates_and_cublas_stays_the_reference(
        client: TestClient, driver: Any) -> None:
    job = driver.submit({"max_trials": 8}, policy=AGENT)
    assert "cublaslt" in job["backends"]  # the default: every backend
    w = driver.register(backends=WITH_LT)
    grant = driver.lease(w, n=32)
    first = grant["candidates"]
    # the first wave: cuBLAS's own pick, then every planned rank, no Triton yet
    planned = len(library.cublaslt_configs(GemmProblem(512, 512, 512, dtype="fp16")))
    assert [c["backend"] for c in first] == ["cublas"] + ["cublaslt"] * planned
    problem = GemmProblem(**{k: v for k, v in driver.PROBLEM.items() if k != "kind"})
    assert [c["config"] for c in first[1:]] == list(library.cublaslt_configs(problem))
    # cuBLAS's pick twice the floor, rank 2 at 95% of it, ranks past 2 missing on this shape
    for c in first:
        cfg = c["config"]
        if c["backend"] == "cublas":
            result = driver.answer(c, lambda _c: 2 * ATTAINABLE_US)
        elif cfg.get("rank", 0) > 2:
            result = _invalid(c)
        else:
            t = ATTAINABLE_US / 0.95 if cfg == {"rank": 2} else 1.5 * ATTAINABLE_US
            result = driver.answer(c, lambda _c, t=t: t)
        driver.report(w, grant["lease_id"], c["id"], result)
    for _ in range(5):  # the library pick confirmed against cuBLAS, if the loop asks
        grant = driver.lease(w, n=16)
        if not grant["candidates"]:
            break
        for c in grant["candidates"]:
            driver.report(w, grant["lease_id"], c["id"], driver.answer(c))
    state = driver.job(job["id"])
    assert state["status"] == "done"
    d = state["decision"]
    assert d["verdict"] == "library_sufficient"
    assert d["backend"] == "cublaslt" and d["config"] == {"rank": 2}
    assert d["reference"]["backend"] == "cublas"
    assert abs(d["speedup_vs_cublas"] - 2 * 0.95) < 0.05
    listed = {(t["backend"], tuple(sorted(t["config"].items()))): t["status"]
              for t in d["library_trials"]}
    assert listed[("cublaslt", (("rank", 3),))] == "invalid"
    assert listed[("cublaslt", (("rank", 2),))] == "ok"
    best = client.get("/v1/best", params={"kind": "gemm", "m": 512, "n": 512, "k": 512,
                                          "dtype": "fp16"}).json()
    assert best["backend"] == "cublaslt" and best["config"] == {"rank": 2}
    assert "cublaslt takes" in d["rationale"], d["rationale"]


def test_a_worker_without_cublaslt_gets_none_of_its_candidates(
        client: TestClient, driver: Any) -> None:
    driver.submit({"max_trials": 8}, policy=AGENT)
    w = driver.register()  # advertises cublas and triton only, as an interpreter worker would
    grant = driver.lease(w, n=32)
    assert [c["backend"] for c in grant["candidates"]] == ["cublas"]

