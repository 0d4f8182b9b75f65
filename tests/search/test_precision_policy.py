"""How a policy judges a lowered kernel's measurement (``Policy.judge``), which precision a GEMM
kernel computes in (``GemmKind.precision_of``), which lower precisions a problem admits
(``lowering_refusal``), the fp8 tier's plan, and the roofline at a lower precision's peak.
Measurements and calibrations are FAKE values."""

from __future__ import annotations

from typing import Any

import pytest

from search.decision import Policy
from search.kinds import get
from search.kinds.gemm import fp8_space
from search.kinds.gemm.spec import GemmProblem
from search.roofline import Calibration, roofline
from search.types import Measurement, Status

GEMM = get("gemm")
BF16 = GemmProblem(m=4096, n=4096, k=4096)
FP8 = GemmProblem(m=4096, n=4096, k=4096, dtype="fp8_e4m3", layout_b="col")


def _allow(bound: float) -> Policy:
    return Policy(allow={"fp8_e4m3": {"max_rel_error": bound}})


def timed(err: float, status: Status = Status.OK, error: str | None = None) -> Measurement:
    return Measurement(status, median_us=100.0, p20_us=99.0, p80_us=101.0, reps=10,
                       rel_error=err, error=error)


def test_a_lowered_measurement_is_judged_against_the_bound() -> None:
    within = _allow(0.05).judge(timed(0.037), "fp8_e4m3")
    assert within.status == Status.OK and within.median_us == 100.0
    over = _allow(0.03).judge(timed(0.037), "fp8_e4m3")
    assert over.status == Status.WRONG_RESULT
    assert over.median_us == 100.0 and over.rel_error == 0.037  # nothing measured is lost
    assert over.error == "rel_error 0.037 over policy.allow.fp8_e4m3.max_rel_error 0.03"
    # judged again under a looser bound (another job reusing it): ok, the old error cleared
    again = _allow(0.05).judge(over, "fp8_e4m3")
    assert again.status == Status.OK and again.error is None
    assert _allow(0.037).judge(timed(0.037), "fp8_e4m3").status == Status.OK  # inclusive


def test_a_lowered_kernel_the_policy_does_not_allow_is_a_wrong_result() -> None:
    got = Policy().judge(timed(0.001), "fp8_e4m3")
    assert got.status == Status.WRONG_RESULT and "does not allow" in (got.error or "")


@pytest.mark.parametrize("precision", [None, "tf32"])
def test_the_input_precision_and_tf32_are_the_workers_to_judge(precision: str | None) -> None:
    m = timed(0.2)  # whatever the worker said stands
    assert _allow(0.03).judge(m, precision) is m


def test_what_the_worker_refused_stays_refused() -> None:
    failed = Measurement(Status.WRONG_RESULT, rel_error=0.9, error="over 0.5")  # never timed
    assert _allow(0.5).judge(failed, "fp8_e4m3") is failed
    crashed = Measurement(Status.CRASHED, error="boom")
    assert _allow(0.5).judge(crashed, "fp8_e4m3") is crashed


@pytest.mark.parametrize(("backend", "config", "problem", "want"), [
    ("triton", {"PRECISION": "fp8_e4m3", "BLOCK_M": 64}, BF16, "fp8_e4m3"),
    ("triton", {"BLOCK_M": 64}, BF16, None),
    ("triton", {"BLOCK_M": 64}, FP8, None),  # an fp8 problem's own precision
    ("triton", {"INPUT_PRECISION": "tf32"}, GemmProblem(m=64, n=64, k=64, dtype="fp32"),
     "tf32"),
    ("triton", {"INPUT_PRECISION": "tf32x3"}, GemmProblem(m=64, n=64, k=64, dtype="fp32"),
     None),
    ("cublas", {"allow_tf32": True}, GemmProblem(m=64, n=64, k=64, dtype="fp32"), "tf32"),
    ("cublas", {}, BF16, None),
    ("cutlass", {"op": "x"}, FP8, None),
])
def test_the_precision_a_gemm_kernel_computes_in(backend: str, config: dict[str, Any],
                                                 problem: GemmProblem,
                                                 want: str | None) -> None:
    assert GEMM.precision_of(problem, backend, config) == want


@pytest.mark.parametrize(("problem", "backends", "words"), [
    (BF16, ("cublas", "triton"), None),
    (GemmProblem(m=64, n=64, k=64, dtype="fp16"), ("triton",), None),
    (GemmProblem(m=64, n=64, k=64, dtype="fp32"), ("cublas", "triton"), "not quantised"),
    (FP8, ("cublas", "triton"), "input precision"),
    (GemmProblem(m=64, n=64, k=64, batch=2), ("triton",), "batch 1 only"),
    (BF16, ("cublas", "cutlass"), "only the triton backend"),
])
def test_which_problems_a_backend_computes_in_fp8(problem: GemmProblem, backends: tuple[str, ...],
                                                  words: str | None) -> None:
    why = GEMM.lowering_refusal(problem, "fp8_e4m3", backends)
    assert (why is None) if words is None else (words in (why or ""))


def test_the_fp8_tier_plan() -> None:
    h100 = {"mode": "cuda", "cc": "9.0"}
    lowered = fp8_space.tier_plan(BF16, allowed={"fp8_e4m3": 0.05}, **h100)
    assert lowered.applicable and lowered.precision == "fp8_e4m3" and "0.05" in lowered.reason
    exact = fp8_space.tier_plan(BF16, allowed={}, **h100)
    assert not exact.applicable and "allows no fp8_e4m3" in exact.reason
    fp8 = fp8_space.tier_plan(FP8, allowed={}, **h100)
    assert fp8.applicable and fp8.precision is None  # the input precision
    a100 = fp8_space.tier_plan(FP8, allowed={}, mode="cuda", cc="8.0")
    assert not a100.applicable and "sm_90" in a100.reason
    assert fp8_space.tier_plan(FP8, allowed={}, mode="interpreter", cc="").applicable
    plans = GEMM.tier_plans(BF16, h100, _allow(0.05))
    assert [p.name for p in plans][-1] == "fp8" and plans[-1].applicable


def test_the_roofline_takes_the_lower_precisions_peak() -> None:
    cal = Calibration("GPU (FAKE)", 3000.0, {"bf16": 800.0, "fp8_e4m3": 1600.0},
                      peak_low_tflops={"fp8_e4m3": 1500.0})
    exact = roofline(BF16, cal)
    lowered = roofline(BF16, cal, lower=("fp8_e4m3",))
    assert exact is not None and lowered is not None
    assert lowered.compute_us == pytest.approx(exact.compute_us / 2)
    assert lowered.lowered_to == "fp8_e4m3" and exact.lowered_to is None
    assert lowered.peak_low_tflops == 1500.0
    assert lowered.bytes == exact.bytes  # the problem's own inputs and output
    # no fp8 peak measured (a device without fp8 GEMMs): the input precision's
    no_fp8 = Calibration("GPU (FAKE)", 3000.0, {"bf16": 800.0})
    fallback = roofline(BF16, no_fp8, lower=("fp8_e4m3",))
    assert fallback is not None and fallback.lowered_to is None
    assert fallback.compute_us == pytest.approx(exact.compute_us)
