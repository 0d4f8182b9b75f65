"""Verdict 2 without a verification, on both sides of ``Policy.verify_margin``: a custom best
within the margin of the library is judged on the search medians, one beyond it is "too far
behind"; and the spend per stage counts each stage's own trials."""

from __future__ import annotations

from search.decision import Decide, Evidence, Policy, TierPlan, Trial, Verdict, plan
from search.decision.actions import Decision
from search.kinds.gemm import GEMM
from search.kinds.gemm.spec import GemmProblem
from tests.search.agent_replay import H100_REPLAY_CALIBRATION


def _decide(custom_us: float) -> Decision:
    """Library 20 us (19-21), one custom kernel at ``custom_us``, the time up."""
    ev = Evidence(
        problem=GemmProblem(16, 4096, 4096), policy=Policy(verify_margin=0.03),
        calibration=H100_REPLAY_CALIBRATION, library_configs=(("cublas", {}),),
        tiers=(TierPlan("tiles", 1.0),),
        trials=(Trial(1, "cublas", {}, None, "ok", 20.0, 19.0, 21.0, gpu_s=0.5),
                Trial(2, "triton", {"x": 1}, "tiles", "ok", custom_us, custom_us - 0.05,
                      custom_us + 0.05, gpu_s=1.25),
                Trial(3, "triton", {"x": 2}, "tiles", "compile_error", gpu_s=0.25)),
        max_trials=2, time_up=True, roles=GEMM.roles)
    last = plan(ev).actions[-1]
    assert isinstance(last, Decide)
    return last.decision


def test_within_the_margin_the_search_medians_decide() -> None:
    d = _decide(20.4)  # 2 % slower, inside the 3 % margin
    assert d.verdict == Verdict.LIBRARY_WINS_AFTER_SEARCH
    assert "Not re-measured" in d.rationale and "too far behind" not in d.rationale


def test_beyond_the_margin_it_is_too_far_behind() -> None:
    d = _decide(21.0)  # 5 % slower
    assert d.verdict == Verdict.LIBRARY_WINS_AFTER_SEARCH
    assert "too far behind" in d.rationale and "Not re-measured" not in d.rationale


def test_the_spend_counts_each_stage_apart() -> None:
    spend = _decide(20.4).spend
    assert spend["library"] == {"trials": 1, "gpu_s": 0.5, "compile_s": 0.0}
    assert spend["custom"] == {"trials": 2, "gpu_s": 1.5}
    assert spend["cutlass"]["trials"] == 0 and spend["verify"]["trials"] == 0
