"""Precision as a search dimension through the API: a policy that allows fp8 e4m3 for a bf16
GEMM, the 422s of a policy no backend can honour, the bound applied to every lowered
measurement (reported or reused), the fp8 peak in the roofline, and the precision and measured
error of the served kernel in the decision, the job, the trials and ``GET /v1/best`` (with
``exact=true``: the best input-precision kernel).

Measurements are FAKE dicts (no GPU here); the GPU models start with FAKE calibrations, and the
fp8 peak added below is FAKE too (twice the FAKE bf16 peak, as on an H100). The lowered FAKE
errors are about what e4m3 quantisation gives on the stated inputs (0.037,
``docs/benchmarks/fp8_error_cpu_2026-11-24.md``)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient

from db import calibrations
from search.kinds.gemm.spec import GemmProblem

BF16 = {"kind": "gemm", "m": 4096, "n": 4096, "k": 4096, "dtype": "bf16"}
KEY = GemmProblem(m=4096, n=4096, k=4096).key()
#: compute-bound at the FAKE peaks: 171.8 us at 800 TFLOP/s (bf16), 85.9 at 1600 (fp8)
BF16_ROOF_US = 2 * 4096**3 / 800e12 * 1e6
FP8_ROOF_US = 2 * 4096**3 / 1600e12 * 1e6
#: what e4m3 quantisation of both operands costs on the stated inputs (FAKE, as measured)
E4M3_ERROR = 0.037
LOWERED = {"PRECISION": "fp8_e4m3", "SCALES": "row", "Q_BLOCK_R": 4, "Q_BLOCK_K": 512,
           "Q_WARPS": 4, "BLOCK_M": 128, "BLOCK_N": 256, "BLOCK_K": 128, "GROUP_M": 8,
           "num_warps": 8, "PERSISTENT": 0, "num_ctas": 1, "FAST_ACC": 0, "TMA_STORE": 0}


def _allow(bound: float) -> dict[str, Any]:
    return {"threshold": 0.9, "allow": {"fp8_e4m3": {"max_rel_error": bound}}}


@pytest.fixture
def fp8_peak(app: FastAPI, driver: Any) -> None:
    """A FAKE calibration of the test GPU with an fp8 peak, newer than the seeded one."""
    cal = driver.fake_calibration()
    with app.state.flow.db.session() as s:
        calibrations.add_calibration(s, driver.GPU, cal["extra"]["bandwidth_gbs"],
                                     {**cal["extra"]["peak_tflops"], "fp8_e4m3": 1600.0},
                                     cal["env"], datetime(2026, 1, 2, tzinfo=UTC))


@pytest.fixture
def lowered_configs(fake_tuners: Any, driver: Any) -> list[dict[str, Any]]:
    """The fp8 tier's FAKE configurations: lowered ones, as ``fp8_space`` makes them."""
    from tests.conftest import FakeTuner

    configs = [{**LOWERED, "num_stages": s} for s in (2, 3, 4, 5, 6, 7, 8, 9)]
    fake_tuners.tiers[(KEY, driver.GPU, "fp8")] = FakeTuner(configs)
    return configs


def _run(driver: Any, worker: int, *, lib_us: float, exact_us: float, fp8_us: float,
         fp8_error: float, recheck_error: float | None = None,
         until_verify: bool = False, only_lowered: bool = False) -> list[dict[str, Any]]:
    """Lease and answer until nothing is left (FAKE): cuBLAS at ``lib_us``, the input-precision
    Triton tiers at ``exact_us``, lowered candidates at ``fp8_us`` with ``fp8_error`` (and
    ``recheck_error`` on the verification's fresh inputs; ``until_verify``: it is leased, never
    answered, so the job stays undecided; ``only_lowered``: every other kernel crashes).
    Returns every leased candidate."""
    leased: list[dict[str, Any]] = []
    for _ in range(40):
        grant = driver.lease(worker)
        if not grant["candidates"]:
            return leased
        for c in grant["candidates"]:
            leased.append(c)
            if c["task"] == "verify" and until_verify:
                return leased
            if c["task"] == "verify":
                sides = {s: c["config"][s] for s in ("library", "custom", "reference")
                         if s in c["config"]}
                us = {s: _time(v["backend"], v["config"], lib_us, exact_us, fp8_us)
                      for s, v in sides.items()}
                extra: dict[str, Any] = {f"{s}_us": [t] * 5 for s, t in us.items()}
                if "custom" in sides and "PRECISION" in sides["custom"]["config"]:
                    extra["custom_rel_error"] = recheck_error if recheck_error is not None \
                        else fp8_error
                m = {**driver.fake_ok(us.get("custom", us["library"])), "extra": extra}
            elif c["task"] is not None:
                m = driver.answer(c)
            elif only_lowered and "PRECISION" not in c["config"]:
                m = driver.fake_failure("crashed")
            else:
                m = driver.fake_ok(_time(c["backend"], c["config"], lib_us, exact_us, fp8_us))
                if "PRECISION" in c["config"]:
                    m["rel_error"] = fp8_error
            driver.report(worker, grant["lease_id"], c["id"], m)
    raise AssertionError("the job never ran out of work")


def _time(backend: str, config: dict[str, Any], lib_us: float, exact_us: float,
          fp8_us: float) -> float:
    if backend == "cublas":
        return lib_us
    return fp8_us if "PRECISION" in config else exact_us


def _best(client: TestClient, **params: Any) -> Any:
    return client.get("/v1/best", params={"m": 4096, "n": 4096, "k": 4096, "dtype": "bf16",
                                          **params})


# -- 422: a policy no backend can honour --------------------------------------------------------
@pytest.mark.parametrize(("problem", "extra", "words"), [
    ({**BF16, "dtype": "fp32"}, {}, "fp32 inputs are not quantised"),
    ({**BF16, "dtype": "fp8_e4m3", "layout_b": "col"}, {}, "input precision"),
    ({**BF16, "batch": 2}, {}, "batch 1 only"),
    (BF16, {"backends": ["cublas", "cutlass"]}, "only the triton backend"),
    ({"kind": "attention", "batch": 1, "heads": 4, "s_q": 64, "s_kv": 64, "d": 64,
      "dtype": "bf16"}, {}, "no attention backend computes"),
])
def test_a_precision_no_backend_computes_is_refused_naming_it(
        client: TestClient, problem: dict[str, Any], extra: dict[str, Any], words: str) -> None:
    r = client.post("/v1/jobs", json={"problem": problem, "policy": _allow(0.03), **extra})
    assert r.status_code == 422, r.text
    (detail,) = r.json()["detail"]
    assert detail["loc"] == ["body", "policy", "allow", "fp8_e4m3"]
    assert words in detail["msg"]


@pytest.mark.parametrize(("allow", "loc"), [
    ({"fp8_e4m3": {"max_rel_error": -0.1}}, ["allow", "fp8_e4m3", "max_rel_error"]),
    ({"fp8_e4m3": {"max_rel_error": 3}}, ["allow", "fp8_e4m3", "max_rel_error"]),
    ({"fp8_e5m2": {"max_rel_error": 0.1}}, ["allow", "fp8_e5m2", "[key]"]),
])
def test_a_bad_bound_or_an_unknown_precision_is_refused(client: TestClient,
                                                        allow: dict[str, Any],
                                                        loc: list[str]) -> None:
    r = client.post("/v1/jobs", json={"problem": BF16, "policy": {"allow": allow}})
    assert r.status_code == 422, r.text
    assert r.json()["detail"][0]["loc"] == ["body", "policy", *loc]
    # a re-opened problem is held to the same rules
    ok = client.post("/v1/jobs", json={"problem": BF16})
    problem_id = ok.json()["problem_id"]
    r = client.post(f"/v1/problems/{problem_id}/reopen", json={"policy": {"allow": allow}})
    assert r.status_code == 422 and r.json()["detail"][0]["loc"][-len(loc):] == loc


def test_the_policy_is_stored_with_its_allowance(client: TestClient) -> None:
    r = client.post("/v1/jobs", json={"problem": BF16, "policy": _allow(0.05)})
    assert r.status_code == 201, r.text
    assert r.json()["policy"]["allow"] == {"fp8_e4m3": {"max_rel_error": 0.05}}


# -- the search --------------------------------------------------------------------------------
def test_exact_mode_is_unchanged_and_says_why_fp8_was_not_tried(
        client: TestClient, driver: Any, fp8_peak: None, lowered_configs: Any) -> None:
    job = driver.submit({"max_trials": 4}, problem=BF16, policy={"threshold": 0.9})
    w = driver.register()
    # cuBLAS at 95% of the bf16 roofline: sufficient, whatever fp8 could do
    leased = _run(driver, w, lib_us=BF16_ROOF_US / 0.95, exact_us=200.0, fp8_us=100.0,
                  fp8_error=E4M3_ERROR)
    assert [c["backend"] for c in leased] == ["cublas"]
    d = driver.job(job["id"])["decision"]
    assert d["verdict"] == "library_sufficient" and d["precision"] == "bf16"
    assert d["rel_error"] == pytest.approx(1e-3)
    assert d["roofline"]["lowered_to"] is None
    assert d["roofline"]["compute_us"] == pytest.approx(BF16_ROOF_US)


def test_with_fp8_allowed_the_roofline_is_the_fp8_one_and_fp8_is_served(
        client: TestClient, driver: Any, fp8_peak: None, lowered_configs: Any) -> None:
    job = driver.submit({"max_trials": 6}, problem=BF16, policy=_allow(0.05))
    w = driver.register()
    lib_us = BF16_ROOF_US / 0.95  # sufficient at the bf16 peak, half of fp8's
    leased = _run(driver, w, lib_us=lib_us, exact_us=lib_us * 1.2, fp8_us=lib_us / 1.4,
                  fp8_error=E4M3_ERROR, recheck_error=0.038)
    lowered = [c for c in leased if c["backend"] == "triton" and "PRECISION" in c["config"]]
    assert lowered, "the fp8 tier made no candidate"
    state = driver.job(job["id"])
    d = state["decision"]
    assert d["roofline"]["lowered_to"] == "fp8_e4m3"
    assert d["roofline"]["compute_us"] == pytest.approx(FP8_ROOF_US)
    assert "fp8_e4m3 peak: the policy allows it" in d["rationale"]
    assert d["verdict"] == "custom_wins" and d["verified"]
    assert d["backend"] == "triton" and d["config"]["PRECISION"] == "fp8_e4m3"
    # the served error is the larger of the trial's and the re-check's
    assert d["precision"] == "fp8_e4m3" and d["rel_error"] == pytest.approx(0.038)
    assert d["custom"]["precision"] == "fp8_e4m3" and d["custom"]["rel_error"] == 0.038
    assert "computes in fp8_e4m3" in d["rationale"] and "0.038" in d["rationale"]
    assert state["best"]["precision"] == "fp8_e4m3"
    assert state["best"]["rel_error"] == pytest.approx(E4M3_ERROR)
    fp8 = next(t for t in d["tiers"] if t["tier"] == "fp8")
    assert fp8["trials"] == len(lowered)
    # the trials say what each computed in
    trials = client.get(f"/v1/problems/{job['problem_id']}/trials",
                        params={"limit": 100}).json()["items"]
    by_precision = {(t["backend"], "PRECISION" in t["config"]): t["precision"] for t in trials}
    assert by_precision == {("cublas", False): "bf16", ("triton", False): "bf16",
                            ("triton", True): "fp8_e4m3"}
    # GET /v1/best serves the decision's fp8 kernel, with its precision and error; exact
    # mode the best bf16 one (cuBLAS: the bf16 Triton tiers were slower)
    best = _best(client).json()
    assert best["backend"] == "triton" and best["precision"] == "fp8_e4m3"
    assert best["rel_error"] == pytest.approx(E4M3_ERROR) and best["decision"]["id"] == d["id"]
    assert best["speedup"] == pytest.approx(d["speedup"])
    exact = _best(client, exact="true").json()
    assert exact["backend"] == "cublas" and exact["precision"] == "bf16"
    assert exact["candidate_id"] == d["library"]["candidate_id"]
    assert exact["speedup"] == pytest.approx(1.0)
    assert exact["decision"]["precision"] == "fp8_e4m3"  # the decision, as it stands


def test_exact_mode_serves_a_faster_bf16_custom_kernel(client: TestClient, driver: Any,
                                                      fp8_peak: None,
                                                      lowered_configs: Any) -> None:
    driver.submit({"max_trials": 6}, problem=BF16, policy=_allow(0.05))
    w = driver.register()
    lib_us = BF16_ROOF_US / 0.95
    _run(driver, w, lib_us=lib_us, exact_us=lib_us * 0.97, fp8_us=lib_us / 1.4,
         fp8_error=E4M3_ERROR)
    exact = _best(client, exact="true").json()
    assert exact["backend"] == "triton" and exact["precision"] == "bf16"
    assert "PRECISION" not in exact["config"]
    assert exact["median_us"] == pytest.approx(lib_us * 0.97)
    assert exact["library"]["backend"] == "cublas"
    assert exact["speedup"] == pytest.approx(1 / 0.97)


def test_before_a_decision_exact_mode_leaves_lowered_kernels_out(
        client: TestClient, driver: Any, fp8_peak: None, lowered_configs: Any) -> None:
    job = driver.submit({"max_trials": 6}, problem=BF16, policy=_allow(0.05))
    w = driver.register()
    lib_us = BF16_ROOF_US / 0.95
    _run(driver, w, lib_us=lib_us, exact_us=lib_us * 0.99, fp8_us=lib_us / 1.4,
         fp8_error=E4M3_ERROR, until_verify=True)
    assert driver.job(job["id"])["decision"] is None
    best = _best(client).json()  # the fastest correct measurement: a lowered one
    assert best["precision"] == "fp8_e4m3" and best["decision"] is None
    assert best["rel_error"] == pytest.approx(E4M3_ERROR)
    exact = _best(client, exact="true").json()
    assert exact["precision"] == "bf16" and exact["backend"] == "triton"
    assert exact["median_us"] == pytest.approx(lib_us * 0.99)
    assert exact["speedup"] == pytest.approx(1 / 0.99)


def test_exact_mode_is_a_404_when_only_lowered_kernels_ran(
        client: TestClient, driver: Any, fp8_peak: None, lowered_configs: Any) -> None:
    assert _best(client, exact="true").status_code == 404  # never tuned
    job = driver.submit({"max_trials": 6}, problem=BF16,
                        policy={**_allow(0.05), "force_custom": True})
    w = driver.register()
    _run(driver, w, lib_us=200.0, exact_us=200.0, fp8_us=100.0, fp8_error=E4M3_ERROR,
         only_lowered=True)
    d = driver.job(job["id"])["decision"]
    assert d["verdict"] == "custom_wins" and d["precision"] == "fp8_e4m3"
    assert "only correct one" in d["rationale"] and "computes in fp8_e4m3" in d["rationale"]
    assert _best(client).json()["precision"] == "fp8_e4m3"
    r = _best(client, exact="true")
    assert r.status_code == 404 and "computing in its input precision" in r.text
    assert _best(client, exact="maybe").status_code == 422


def test_lowered_kernels_over_the_bound_are_wrong_results_with_their_error(
        client: TestClient, driver: Any, fp8_peak: None, lowered_configs: Any) -> None:
    # a budget that leaves the fp8 tier more trials than its probe (6)
    job = driver.submit({"max_trials": 30}, problem=BF16, policy=_allow(0.03))
    w = driver.register()
    lib_us = BF16_ROOF_US / 0.95
    _run(driver, w, lib_us=lib_us, exact_us=lib_us * 1.2, fp8_us=lib_us / 1.4,
         fp8_error=E4M3_ERROR)
    state = driver.job(job["id"])
    d = state["decision"]
    assert d["chosen"] == "library" and d["precision"] == "bf16"
    fp8 = next(t for t in d["tiers"] if t["tier"] == "fp8")
    assert fp8["best_us"] is None and "no correct kernel" in fp8["reason"]
    trials = client.get(f"/v1/problems/{job['problem_id']}/trials",
                        params={"limit": 100}).json()["items"]
    lowered = [t for t in trials if t["precision"] == "fp8_e4m3"]
    assert lowered and all(t["status"] == "wrong_result" for t in lowered)
    for t in lowered:  # nothing measured is lost: the time and the error stay
        assert t["rel_error"] == pytest.approx(E4M3_ERROR)
        assert t["median_us"] == pytest.approx(lib_us / 1.4)
        assert "over policy.allow.fp8_e4m3.max_rel_error 0.03" in t["error"]
    assert _best(client).json()["precision"] == "bf16"


def test_an_error_over_the_bound_on_the_recheck_keeps_the_library(
        client: TestClient, driver: Any, fp8_peak: None, lowered_configs: Any) -> None:
    job = driver.submit({"max_trials": 6}, problem=BF16, policy=_allow(0.05))
    w = driver.register()
    lib_us = BF16_ROOF_US / 0.95
    _run(driver, w, lib_us=lib_us, exact_us=lib_us * 1.2, fp8_us=lib_us / 1.4,
         fp8_error=0.045, recheck_error=0.052)
    d = driver.job(job["id"])["decision"]
    assert d["verified"] and d["verdict"] == "library_wins_after_search"
    assert d["chosen"] == "library" and d["precision"] == "bf16"
    assert "over the policy's bound of 0.05" in d["rationale"]
    assert d["custom"]["rel_error"] == pytest.approx(0.052)


def test_a_stored_lowered_measurement_is_judged_again_under_the_next_jobs_bound(
        client: TestClient, driver: Any, fp8_peak: None, lowered_configs: Any,
        fake_tuners: Any) -> None:
    first = driver.submit({"max_trials": 8}, problem=BF16, policy=_allow(0.03))
    w = driver.register()
    lib_us = BF16_ROOF_US / 0.95
    _run(driver, w, lib_us=lib_us, exact_us=lib_us * 1.2, fp8_us=lib_us / 1.4,
         fp8_error=E4M3_ERROR)
    tuner = fake_tuners.tiers[(KEY, driver.GPU, "fp8")]
    told = [m for m in tuner.recorded.values()]
    assert told and all(str(m.status) == "wrong_result" for m in told)
    measured = len(told)
    # the same configurations again, under a looser bound: not measured again, told as ok
    tuner._next = 0
    r = client.post(f"/v1/problems/{first['problem_id']}/reopen",
                    json={"budget": {"max_trials": 8}, "policy": _allow(0.05)})
    assert r.status_code == 201, r.text
    _run(driver, w, lib_us=lib_us, exact_us=lib_us * 1.2, fp8_us=lib_us / 1.4,
         fp8_error=E4M3_ERROR)
    reused = list(tuner.reused.values())
    assert len(reused) >= measured
    assert all(str(m.status) == "ok" and m.error is None for m in reused[:measured])
    assert all(m.rel_error == pytest.approx(E4M3_ERROR) for m in reused[:measured])
