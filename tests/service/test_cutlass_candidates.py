"""CUTLASS as a library backend in the decision loop: its best-ranked ops are measured in the
first stage next to cuBLAS, then searched (policy tune_library), on workers that advertise it
only; a problem it cannot serve is skipped with the reason in the decision. Measurements are
FAKE (no GPU, no nvcc here)."""

from __future__ import annotations

from typing import Any

import pytest
from fastapi.testclient import TestClient

from search.kinds.gemm import library
from service import catalogues

AGENT = {"threshold": 0.9}
ATTAINABLE_US = (2 * 512 * 512 * 2 + 512 * 512 * 2) / 3000e9 * 1e6  # see test_decisions.py
WITH_CUTLASS = ["cublas", "cutlass", "triton"]
#: every GEMM backend: what a job allows when it names none
EVERY = ["cublas", "cublaslt", "cutlass", "repaired", "triton", "triton_repair",
         "triton_streamk", "triton_skinny"]


@pytest.fixture(autouse=True)
def _fresh_cache() -> None:
    library.clear_cache()
    catalogues.clear_cache()


def _answer(driver: Any, worker: int, grant: dict[str, Any], times: dict[str, float]) -> None:
    for c in grant["candidates"]:
        t = times.get(c["backend"])
        driver.report(worker, grant["lease_id"], c["id"],
                      driver.answer(c, (lambda _c, t=t: t) if t is not None else None))


def test_a_cutlass_worker_measures_cutlass_library_candidates_first(
        client: TestClient, driver: Any, fake_tuners: Any,
        cutlass_catalogue: dict[str, Any]) -> None:
    job = driver.submit({"max_trials": 8}, policy=AGENT)
    w = driver.register(backends=WITH_CUTLASS, cutlass_catalogue=cutlass_catalogue)
    grant = driver.lease(w, n=16)
    # the library stage: cuBLAS and every CUTLASS seed at once, no Triton
    first = grant["candidates"]
    assert sorted(c["backend"] for c in first) == ["cublas"] + ["cutlass"] * 6
    ops = [c["config"] for c in first if c["backend"] == "cutlass"]
    assert all(set(cfg) == {"op", "raster", "swizzle", "splits"} for cfg in ops)
    assert all(cfg["op"].startswith("cutlass3x_sm90_") and "_f16_" in cfg["op"] for cfg in ops)
    assert len({cfg["op"] for cfg in ops}) == 6
    # the CUTLASS seeds at 95% of the roofline: the library (CUTLASS) is sufficient, and the
    # CUTLASS search (library side) still runs before verdict 1, until it stalls; the FAKE
    # CUTLASS tuner proposes knob variants of the first seed
    fake_tuners.cutlass_configs = [{**ops[0], "raster": r, "swizzle": w}
                                   for r in ("heuristic", "along_m", "along_n")
                                   for w in (1, 2, 4, 8) if (r, w) != ("heuristic", 1)]
    _answer(driver, w, grant, {"cublas": 2 * ATTAINABLE_US, "cutlass": ATTAINABLE_US / 0.95})
    searched, confirmed = 0, 0
    for _ in range(20):
        grant = driver.lease(w, n=16)
        if not grant["candidates"]:
            break
        if {c["task"] for c in grant["candidates"]} == {"verify"}:
            # last: the CUTLASS pick confirmed against cuBLAS in one set of rounds
            assert "custom" not in grant["candidates"][0]["config"]
            confirmed += len(grant["candidates"])
            _answer(driver, w, grant, {})
            continue
        assert {c["backend"] for c in grant["candidates"]} == {"cutlass"}  # no Triton
        searched += len(grant["candidates"])
        _answer(driver, w, grant, {"cutlass": ATTAINABLE_US / 0.9})  # none faster
    state = driver.job(job["id"])
    assert state["status"] == "done"
    d = state["decision"]
    assert d["verdict"] == "library_sufficient" and d["backend"] == "cutlass"
    assert d["config"]["op"] in {cfg["op"] for cfg in ops}
    assert "cutlass takes" in d["rationale"] and "CUTLASS search (library side)" in d["rationale"]
    assert searched == d["spend"]["cutlass"]["trials"] == 8  # the stall rule: patience 8
    assert confirmed == d["spend"]["verify"]["trials"] == 1
    assert d["reference"]["backend"] == "cublas"
    assert d["speedup_vs_cublas"] == pytest.approx(2 * 0.95)
    listed = d["library_trials"]
    assert sorted(t["backend"] for t in listed if not t["search"]) == ["cublas"] + ["cutlass"] * 6
    assert sum(t["search"] for t in listed) == searched
    assert all(t["status"] == "ok" and t["median_us"] > 0 for t in listed)
    assert state["library_best"]["backend"] == "cutlass"
    assert d["notes"] == []


def test_a_sufficient_first_wave_ends_the_job_without_the_other_seeds(
        client: TestClient, driver: Any, cutlass_catalogue: dict[str, Any]) -> None:
    """Without tune_library: verdict 1 on cuBLAS and the best-ranked seed."""
    job = driver.submit({"max_trials": 8}, policy={**AGENT, "tune_library": False})
    w = driver.register(backends=WITH_CUTLASS, cutlass_catalogue=cutlass_catalogue)
    grant = driver.lease(w, n=16)
    assert sorted(c["backend"] for c in grant["candidates"]) == ["cublas", "cutlass"]
    _answer(driver, w, grant, {"cublas": ATTAINABLE_US / 0.95, "cutlass": ATTAINABLE_US / 0.9})
    state = driver.job(job["id"])
    assert state["status"] == "done"
    d = state["decision"]
    assert d["verdict"] == "library_sufficient" and d["backend"] == "cublas"
    assert sorted(t["backend"] for t in d["library_trials"]) == ["cublas", "cutlass"]
    assert "The 5 other CUTLASS seeds were not measured" in d["rationale"]
    # the policy can ask for every seed at once
    job = driver.submit({"max_trials": 8},
                        policy={**AGENT, "tune_library": False, "first_cutlass_seeds": 6},
                        problem={"kind": "gemm", "m": 1024, "n": 512, "k": 512,
                                 "dtype": "fp16"})
    grant = driver.lease(w, n=16)
    assert sorted(c["backend"] for c in grant["candidates"]) == ["cublas"] + ["cutlass"] * 6


def test_a_worker_without_cutlass_never_gets_cutlass_candidates(
        client: TestClient, driver: Any) -> None:
    job = driver.submit({"max_trials": 8}, policy=AGENT)
    assert job["backends"] == EVERY  # the default: every backend
    w = driver.register()  # advertises cublas and triton only
    grant = driver.lease(w, n=16)
    assert [c["backend"] for c in grant["candidates"]] == ["cublas"]
    assert driver.job(job["id"])["backends"] == EVERY
    _answer(driver, w, grant, {"cublas": ATTAINABLE_US / 0.95})
    d = driver.job(job["id"])["decision"]
    assert [t["backend"] for t in d["library_trials"]] == ["cublas"]


def test_a_problem_cutlass_cannot_serve_is_skipped_with_the_reason(
        client: TestClient, driver: Any, cutlass_catalogue: dict[str, Any]) -> None:
    fp32 = {"kind": "gemm", "m": 512, "n": 512, "k": 512, "dtype": "fp32"}
    job = driver.submit({"max_trials": 8}, problem=fp32, policy=AGENT)
    w = driver.register(backends=WITH_CUTLASS, cutlass_catalogue=cutlass_catalogue)
    grant = driver.lease(w, n=16)
    assert [c["backend"] for c in grant["candidates"]] == ["cublas"]
    # cuBLAS near the fp32 roofline (50 TFLOP/s FAKE peak): sufficient, and the rationale
    # says why CUTLASS was not measured
    fp32_us = 2 * 512 ** 3 / 50e12 * 1e6
    _answer(driver, w, grant, {"cublas": fp32_us / 0.95})
    d = driver.job(job["id"])["decision"]
    assert d["verdict"] == "library_sufficient"
    assert "CUTLASS skipped" in d["rationale"] and "tf32" in d["rationale"]
    assert d["notes"] and "tf32" in d["notes"][0]


def test_a_cutlass_worker_without_a_catalogue_gets_no_cutlass_candidates(
        client: TestClient, driver: Any) -> None:
    """The service never enumerates CUTLASS itself: without a declared catalogue for the GPU
    model there is nothing to measure, and the decision says why."""
    job = driver.submit({"max_trials": 8}, policy=AGENT)
    w = driver.register(backends=WITH_CUTLASS)  # offers CUTLASS, declares no operations
    grant = driver.lease(w, n=16)
    assert [c["backend"] for c in grant["candidates"]] == ["cublas"]
    _answer(driver, w, grant, {"cublas": ATTAINABLE_US / 0.95})
    d = driver.job(job["id"])["decision"]
    assert "declared a CUTLASS operation catalogue" in d["rationale"]


def test_a_malformed_catalogue_is_refused_at_registration(client: TestClient,
                                                          driver: Any) -> None:
    r = client.post("/v1/workers/register", json={
        "name": "w", "device": driver.device(backends=WITH_CUTLASS),
        "catalogues": {"gemm/cutlass": {"families": [{"family": ["bf16"], "ops": []}]}}})
    assert r.status_code == 422, r.text
    detail = r.json()["detail"][0]
    assert detail["loc"] == ["body", "catalogues"] and "gemm/cutlass" in detail["msg"]


def test_a_catalogue_whose_built_list_is_not_names_is_refused(client: TestClient,
                                                               driver: Any) -> None:
    from search.kinds.gemm.cutlass_catalogue import Catalogue

    body = {**Catalogue(()).encode(), "built": "cutlass3x_op"}
    r = client.post("/v1/workers/register", json={
        "name": "w", "device": driver.device(backends=WITH_CUTLASS),
        "catalogues": {"gemm/cutlass": body}})
    assert r.status_code == 422, r.text
    assert "built must be a list of operation names" in r.json()["detail"][0]["msg"]
    r = client.post("/v1/workers/register", json={
        "name": "w", "device": driver.device(backends=WITH_CUTLASS),
        "catalogues": {"gemm/cutlass": {**body, "built": ["cutlass3x_op"]}}})
    assert r.status_code == 200, r.text


def test_a_catalogue_is_declared_under_kind_and_backend(client: TestClient,
                                                        driver: Any) -> None:
    """A catalogue its kind does not check is stored as declared; a key that is not
    ``"<kind>/<backend>"``, or names no registered kind, is refused, naming the field."""
    device = driver.device(backends=WITH_CUTLASS)
    r = client.post("/v1/workers/register", json={
        "name": "w", "device": device, "catalogues": {"gemm/fancy": {"anything": [1, 2]}}})
    assert r.status_code == 200, r.text
    r = client.post("/v1/workers/register", json={
        "name": "w", "device": device, "catalogues": {"toy/fancy": {"anything": [1, 2]}}})
    assert r.status_code == 422 and "unknown problem kind 'toy'" in r.text, r.text
    r = client.post("/v1/workers/register", json={
        "name": "w", "device": device, "catalogues": {"cutlass": {}}})
    assert r.status_code == 422, r.text
    assert r.json()["detail"][0]["loc"][:2] == ["body", "catalogues"]
