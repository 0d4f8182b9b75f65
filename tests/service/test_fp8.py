"""fp8 e4m3 problems through the API: the served rules refuse a bad problem by field (422),
and a good one is decided between the library kernels and the Triton fp8 template (the fp8
tier; the tiled tiers say why they do not apply), the rationale saying why. Measurements are
FAKE (no GPU here); the FAKE calibration's fp8 peak is labelled as such below, not taken from a
recorded device."""

from __future__ import annotations

from typing import Any

import pytest
from fastapi.testclient import TestClient

FP8 = {"kind": "gemm", "m": 512, "n": 512, "k": 512, "dtype": "fp8_e4m3", "layout_b": "col"}
#: FAKE fp8 peak of the FAKE calibration (twice its FAKE bf16 peak, as on an H100).
FAKE_FP8_TFLOPS = 1600.0
#: memory: 512x512 fp8 A and B read, bf16 C written, at the FAKE 3000 GB/s; compute: 2*512^3
#: flops at the FAKE fp8 peak. The larger is the roofline.
ATTAINABLE_US = max((2 * 512 * 512 + 512 * 512 * 2) / 3000e9,
                    2 * 512**3 / (FAKE_FP8_TFLOPS * 1e12)) * 1e6
LIBRARY = ("cublas", "cutlass")


def _post(client: TestClient, problem: dict[str, Any], **extra: Any) -> Any:
    return client.post("/v1/jobs", json={"problem": problem, **extra})


@pytest.mark.parametrize(("over", "field", "rule"), [
    ({"layout_b": "row"}, "layout_b", "column-major"),
    ({"layout_a": "col"}, "layout_a", "row-major"),
    ({"batch": 2}, "batch", "batch=1"),
    ({"k": 520}, "k", "multiple of 16"),
    ({"n": 520}, "n", "multiple of 16"),
    ({"out_dtype": "fp8_e4m3"}, "out_dtype", "bf16"),
])
def test_an_fp8_problem_breaking_a_rule_is_refused_naming_the_field(
        client: TestClient, over: dict[str, Any], field: str, rule: str) -> None:
    r = _post(client, {**FP8, **over})
    assert r.status_code == 422, r.text
    detail = r.json()["detail"][0]
    assert detail["loc"] == ["body", "problem", field]
    assert rule in detail["msg"]


def test_an_fp8_job_may_run_on_the_triton_fp8_template_alone(client: TestClient) -> None:
    r = _post(client, FP8, backends=["triton"])
    assert r.status_code == 201, r.text
    assert r.json()["backends"] == ["triton"]


def test_an_fp8_job_defaults_to_bf16_output(client: TestClient) -> None:
    r = _post(client, FP8)
    assert r.status_code == 201, r.text
    job = r.json()
    assert job["problem"]["out_dtype"] == "bf16" and job["problem_key"].endswith(":rc")


def _answer_all(driver: Any, worker: int, times: dict[str, float],
                fp8_peak: float | None) -> list[str]:
    """Lease and answer until nothing is left: kernels with ``times``, the calibration with
    the FAKE peaks (and ``fp8_peak`` when given, as a device with fp8 GEMMs measures it).
    Returns every backend (or task) leased, in order."""
    leased: list[str] = []
    for _ in range(20):
        grant = driver.lease(worker, n=16)
        if not grant["candidates"]:
            return leased
        for c in grant["candidates"]:
            leased.append(c["task"] or c["backend"])
            if c["task"] == "calibrate":
                m = driver.fake_calibration()
                if fp8_peak is not None:
                    m["extra"]["peak_tflops"]["fp8_e4m3"] = fp8_peak
            elif c["task"] == "verify":  # verdict 2, or a library pick confirmed
                extra = {f"{side}_us": [times[c["config"][side]["backend"]]] * 5
                         for side in ("library", "custom", "reference") if side in c["config"]}
                main = extra.get("custom_us", extra["library_us"])[0]
                m = {**driver.fake_ok(main), "extra": extra}
            else:
                m = driver.fake_ok(times[c["backend"]])
            driver.report(worker, grant["lease_id"], c["id"], m)
    raise AssertionError(f"the job never ran out of work: {leased}")


@pytest.mark.parametrize("policy", [{"threshold": 0.9}, {"force_custom": True}])
def test_fp8_is_decided_between_the_library_and_the_fp8_tier(
        client: TestClient, driver: Any, policy: dict[str, Any],
        cutlass_catalogue: dict[str, Any]) -> None:
    job = driver.submit({"max_trials": 8}, problem=FP8, policy=policy)
    w = driver.register(backends=["cublas", "cutlass", "triton"],
                        cutlass_catalogue=cutlass_catalogue)
    # cuBLAS at half the roofline, so custom kernels are searched; the fp8 template is slower
    # than the CUTLASS op
    times = {"cublas": 2 * ATTAINABLE_US, "cutlass": 1.5 * ATTAINABLE_US,
             "triton": 1.8 * ATTAINABLE_US}
    # The seeded calibration predates the fp8 peak, so it is measured again for this job.
    leased = _answer_all(driver, w, times, FAKE_FP8_TFLOPS)
    assert {"calibrate", "cublas", "cutlass", "triton"} <= set(leased)
    state = driver.job(job["id"])
    assert state["status"] == "done" and state["progress"]["trials_done"] > 0
    d = state["decision"]
    assert d["verdict"] == "library_wins_after_search" and d["chosen"] == "library"
    assert d["backend"] == "cutlass" and "e4m3" in d["config"]["op"]
    assert d["precision"] == "fp8_e4m3"  # the problem's own precision: nothing lowered
    assert d["attainable_us"] == pytest.approx(ATTAINABLE_US)
    assert d["efficiency_library"] == pytest.approx(1 / 1.5)
    fp8 = next(t for t in d["tiers"] if t["tier"] == "fp8")
    assert fp8["trials"] > 0 and fp8["best_us"] == pytest.approx(1.8 * ATTAINABLE_US)
    tiled = [t for t in d["tiers"] if t["tier"] in ("tiles", "split_k", "hopper", "precision")]
    assert len(tiled) == 4
    assert all(t["trials"] == 0 and "fp8 tier" in t["reason"] for t in tiled)
    trials = client.get(f"/v1/problems/{state['problem_id']}/trials").json()["items"]
    fp8_trials = [t for t in trials if t["backend"] == "triton"]
    assert fp8_trials and all("PRECISION" not in t["config"] for t in fp8_trials)
    assert {t["precision"] for t in trials} == {"fp8_e4m3"}
    cal = client.get("/v1/calibrations").json()["items"][0]
    assert cal["peak_tflops"]["fp8_e4m3"] == FAKE_FP8_TFLOPS


def test_the_fp8_template_wins_where_it_is_faster(client: TestClient, driver: Any) -> None:
    job = driver.submit({"max_trials": 8}, problem=FP8, policy={"threshold": 0.9})
    w = driver.register()  # cuBLAS and Triton
    leased = _answer_all(driver, w, {"cublas": 2 * ATTAINABLE_US,
                                     "triton": 1.2 * ATTAINABLE_US}, FAKE_FP8_TFLOPS)
    assert "verify" in leased
    d = driver.job(job["id"])["decision"]
    assert d["verdict"] == "custom_wins" and d["backend"] == "triton"
    assert d["precision"] == "fp8_e4m3" and d["rel_error"] == pytest.approx(1e-3)
    assert "computes in" not in d["rationale"]  # the input precision: nothing to disclose


def test_without_an_fp8_peak_the_library_still_decides_with_no_roofline(
        client: TestClient, driver: Any) -> None:
    job = driver.submit({"max_trials": 8}, problem=FP8, policy={"threshold": 0.9})
    w = driver.register()  # cuBLAS and Triton only
    leased = _answer_all(driver, w, {"cublas": 50.0, "triton": 80.0}, fp8_peak=None)
    assert leased[:2] == ["calibrate", "cublas"] and set(leased[2:]) == {"triton"}
    state = driver.job(job["id"])
    assert state["status"] == "done"
    d = state["decision"]
    assert d["verdict"] == "library_wins_after_search" and d["backend"] == "cublas"
    assert d["attainable_us"] is None and d["efficiency_library"] is None
    assert "no roofline" in d["rationale"] and "too far behind" in d["rationale"]
    # the bf16 peaks of that calibration still serve bf16 problems: no new calibration there
    bf16 = driver.submit({"max_trials": 2}, problem={**FP8, "dtype": "bf16", "layout_b": "row"},
                         policy={"threshold": 0.9})
    assert [c["backend"] for c in driver.lease(w)["candidates"]] == ["cublas"]
    assert driver.job(bf16["id"])["stage"] == "library"
