"""fp8 in the decision loop: the tiled Triton tiers do not apply (each says why) and the fp8
tier (the Triton fp8 template) does, on sm_90 or in the interpreter; where it does not, the
plan ends with the library's verdict, the rationale naming why; with no fp8 peak there is no
roofline and the library still decides. The calibration here is a FAKE (round numbers,
labelled)."""

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


def _tiers(problem: GemmProblem = FP8, cc: str = "9.0") -> tuple:
    return GEMM.tier_plans(problem, {"mode": "cuda", "cc": cc, "sm_count": 132},
                           Policy(allow_tf32=True))


def test_the_tiled_tiers_do_not_apply_to_fp8_and_each_says_why() -> None:
    tiled = tier_plans(FP8, mode="cuda", cc="9.0", sm_count=132, allow_tf32=True)
    assert [t.name for t in tiled] == ["tiles", "split_k", "hopper", "precision"]
    assert not any(t.applicable for t in tiled)
    assert all("the fp8 tier searches the fp8 template" in t.reason for t in tiled)
    bf16 = _tiers(replace(FP8, dtype="bf16", out_dtype="bf16"))
    assert bf16[0].applicable  # the rule is about fp8, not the shape
    tiers = _tiers()
    assert [t.name for t in tiers][-1] == "fp8" and tiers[-1].applicable
    assert not _tiers(cc="8.0")[-1].applicable  # no TMA, no fp8 wgmma


def test_the_fp8_roofline_uses_the_fp8_peak() -> None:
    rf = roofline(FP8, FAKE_CAL)
    assert rf is not None and rf.bound == "compute"
    assert rf.compute_us == pytest.approx(2 * 4096**3 / 1600e12 * 1e6)
    assert roofline(FP8, replace(FAKE_CAL, peak_tflops={"bf16": 800.0})) is None


def _evidence(calibration: Calibration | None, lib_us: float | None,
              policy: Policy = Policy(), cc: str = "9.0") -> Evidence:
    trials = (Trial(1, "cublas", {}, None, "ok", lib_us, lib_us * 0.99, lib_us * 1.01),
              ) if lib_us is not None else (Trial(1, "cublas", {}),)
    return Evidence(problem=FP8, policy=policy, calibration=calibration,
                    library_configs=(("cublas", {}),), tiers=_tiers(cc=cc), trials=trials,
                    max_trials=32, roles=GEMM.roles)


def test_a_slow_library_searches_the_fp8_tier() -> None:
    attainable = 2 * 4096**3 / 1600e12 * 1e6
    p = plan(_evidence(FAKE_CAL, 2 * attainable))  # 50% of the fp8 roofline
    assert p.stage == Stage.CUSTOM
    assert [a.tier for a in p.actions if isinstance(a, Search)] == ["fp8"]


@pytest.mark.parametrize("policy", [Policy(), Policy(force_custom=True),
                                    Policy(full_search=True)])
def test_without_the_fp8_tier_the_library_is_the_verdict_and_says_why(policy: Policy) -> None:
    attainable = 2 * 4096**3 / 1600e12 * 1e6
    p = plan(_evidence(FAKE_CAL, 2 * attainable, policy, cc="8.9"))  # no sm_90: no tier
    assert p.stage == Stage.DECIDED and not any(isinstance(a, Search) for a in p.actions)
    d = p.actions[-1]
    assert isinstance(d, Decide)
    dec = d.decision
    assert dec.verdict == Verdict.LIBRARY_SUFFICIENT and dec.chosen == "library"
    assert dec.library is not None and dec.library.efficiency == pytest.approx(0.5)
    assert "no custom tier applies" in dec.rationale
    assert "the fp8 tier searches the fp8 template" in dec.rationale
    assert "fp8: needs sm_90" in dec.rationale
    assert [t["tier"] for t in dec.tiers] == ["tiles", "split_k", "hopper", "precision", "fp8"]
    assert all(t["reason"].startswith("skipped:") for t in dec.tiers)


def test_the_library_is_awaited_then_decides_without_a_roofline() -> None:
    no_fp8 = replace(FAKE_CAL, peak_tflops={"bf16": 800.0})
    pending = plan(_evidence(no_fp8, None))
    assert isinstance(pending.actions[-1], Wait)
    # no roofline to judge the library by: the fp8 tier is searched where it applies
    searched = plan(_evidence(no_fp8, 500.0))
    assert [a.tier for a in searched.actions if isinstance(a, Search)] == ["fp8"]
    p = plan(_evidence(no_fp8, 500.0, cc="8.9"))
    d = p.actions[-1]
    assert isinstance(d, Decide) and d.decision.roofline is None
    assert d.decision.verdict == Verdict.LIBRARY_SUFFICIENT
    assert "no roofline" in d.decision.rationale and "500.0 us" in d.decision.rationale
