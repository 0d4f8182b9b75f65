"""fp8 in the decision loop: no Triton tier applies, so the plan never searches and ends with
the library's verdict, the rationale naming why; with no fp8 peak there is no roofline and the
library still decides. The calibration here is a FAKE (round numbers, labelled)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from search.decision import Decide, Evidence, Policy, Search, Stage, Trial, Verdict, Wait, plan
from search.kinds.gemm import GEMM
from search.kinds.gemm.spec import GemmProblem
from search.kinds.gemm.triton_space import tier_plans
from search.roofline import Calibration, roofline

FP8 = GemmProblem(m=4096, n=4096, k=4096, dtype="fp8_e4m3", layout_b="col")
#: FAKE peaks: fp8 twice bf16, as on an H100; not a measurement.
FAKE_CAL = Calibration("gpu", 3000.0, {"bf16": 800.0, "fp16": 800.0, "fp32": 50.0,
                                       "tf32": 400.0, "fp8_e4m3": 1600.0})


def _tiers(problem: GemmProblem = FP8) -> tuple:
    return tier_plans(problem, mode="cuda", cc="9.0", sm_count=132, allow_tf32=True)


def test_no_triton_tier_applies_to_fp8_and_each_says_why() -> None:
    tiers = _tiers()
    assert [t.name for t in tiers] == ["tiles", "split_k", "hopper", "precision"]
    assert not any(t.applicable for t in tiers)
    assert all("no fp8_e4m3 Triton template" in t.reason for t in tiers)
    bf16 = _tiers(replace(FP8, dtype="bf16", out_dtype="bf16"))
    assert bf16[0].applicable  # the rule is about fp8, not the shape


def test_the_fp8_roofline_uses_the_fp8_peak() -> None:
    rf = roofline(FP8, FAKE_CAL)
    assert rf is not None and rf.bound == "compute"
    assert rf.compute_us == pytest.approx(2 * 4096**3 / 1600e12 * 1e6)
    assert roofline(FP8, replace(FAKE_CAL, peak_tflops={"bf16": 800.0})) is None


def _evidence(calibration: Calibration | None, lib_us: float | None,
              policy: Policy = Policy()) -> Evidence:
    trials = (Trial(1, "cublas", {}, None, "ok", lib_us, lib_us * 0.99, lib_us * 1.01),
              ) if lib_us is not None else (Trial(1, "cublas", {}),)
    return Evidence(problem=FP8, policy=policy, calibration=calibration,
                    library_configs=(("cublas", {}),), tiers=_tiers(), trials=trials,
                    max_trials=32, roles=GEMM.roles)


@pytest.mark.parametrize("policy", [Policy(), Policy(force_custom=True),
                                    Policy(full_search=True)])
def test_a_slow_library_is_still_the_verdict_and_the_rationale_says_why(policy: Policy) -> None:
    attainable = 2 * 4096**3 / 1600e12 * 1e6
    p = plan(_evidence(FAKE_CAL, 2 * attainable, policy))  # 50%: bf16 would search
    assert p.stage == Stage.DECIDED and not any(isinstance(a, Search) for a in p.actions)
    d = p.actions[-1]
    assert isinstance(d, Decide)
    dec = d.decision
    assert dec.verdict == Verdict.LIBRARY_SUFFICIENT and dec.chosen == "library"
    assert dec.library is not None and dec.library.efficiency == pytest.approx(0.5)
    assert "no custom tier applies" in dec.rationale
    assert "no fp8_e4m3 Triton template" in dec.rationale
    assert [t["tier"] for t in dec.tiers] == ["tiles", "split_k", "hopper", "precision"]
    assert all(t["reason"].startswith("skipped:") for t in dec.tiers)


def test_the_library_is_awaited_then_decides_without_a_roofline() -> None:
    pending = plan(_evidence(replace(FAKE_CAL, peak_tflops={"bf16": 800.0}), None))
    assert isinstance(pending.actions[-1], Wait)
    p = plan(_evidence(replace(FAKE_CAL, peak_tflops={"bf16": 800.0}), 500.0))
    d = p.actions[-1]
    assert isinstance(d, Decide) and d.decision.roofline is None
    assert d.decision.verdict == Verdict.LIBRARY_SUFFICIENT
    assert "no roofline" in d.decision.rationale and "500.0 us" in d.decision.rationale
