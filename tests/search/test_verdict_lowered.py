"""Verdict 2 on the verification's rounds for a kernel computing below the input precision:
faster, but with an error on the re-check's fresh inputs over the policy's bound, it loses to
the library; within the bound it wins, and the rationale states its precision."""

from __future__ import annotations

from search.decision import Decide, Evidence, Policy, TierPlan, Trial, Verdict, Verification, plan
from search.decision.actions import Decision
from search.kinds.gemm import GEMM
from search.kinds.gemm.spec import GemmProblem
from tests.search.agent_replay import H100_REPLAY_CALIBRATION

BOUND = 0.03


def _decide(recheck_error: float) -> Decision:
    """Library 20 us; an fp8 custom kernel at 15 us (error 0.01 in the search), re-checked."""
    v = Verification(1, 2, "ok", (20.0,) * 5, (15.0, 15.1, 14.9, 15.0, 15.0),
                     custom_rel_error=recheck_error)
    ev = Evidence(
        problem=GemmProblem(16, 4096, 4096),
        policy=Policy(allow={"fp8_e4m3": {"max_rel_error": BOUND}}),
        calibration=H100_REPLAY_CALIBRATION, library_configs=(("cublas", {}),),
        tiers=(TierPlan("tiles", 1.0),),
        trials=(Trial(1, "cublas", {}, None, "ok", 20.0, 19.8, 20.2),
                Trial(2, "triton", {"x": 1}, "tiles", "ok", 15.0, 14.9, 15.1,
                      rel_error=0.01, precision="fp8_e4m3")),
        verification=v, max_trials=1, roles=GEMM.roles)
    last = plan(ev).actions[-1]
    assert isinstance(last, Decide), last
    return last.decision


def test_over_the_bound_on_the_recheck_the_library_wins() -> None:
    d = _decide(0.05)
    assert d.verdict == Verdict.LIBRARY_WINS_AFTER_SEARCH and d.verified
    assert d.custom is not None and d.custom.rel_error == 0.05
    assert "fp8_e4m3" in d.rationale


def test_within_the_bound_the_faster_lowered_kernel_wins() -> None:
    d = _decide(0.02)
    assert d.verdict == Verdict.CUSTOM_WINS and d.verified
    assert d.custom is not None and d.custom.rel_error == 0.02
    assert "fp8_e4m3" in d.rationale
