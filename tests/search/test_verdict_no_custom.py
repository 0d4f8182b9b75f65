"""Verdict 2 when the custom search ran and no custom kernel came out of it (every trial
failed): the library wins after the search, its pick is served, and the rationale says why."""

from __future__ import annotations

import pytest

from search.decision import Decide, Evidence, Policy, TierPlan, Trial, Verdict, plan
from search.kinds.gemm import GEMM
from search.kinds.gemm.spec import GemmProblem
from tests.search.agent_replay import H100_REPLAY_CALIBRATION


def _all_custom_failed() -> Evidence:
    return Evidence(
        problem=GemmProblem(16, 4096, 4096), policy=Policy(force_custom=True),
        calibration=H100_REPLAY_CALIBRATION, library_configs=(("cublas", {}),),
        tiers=(TierPlan("tiles", 1.0),),
        trials=(Trial(1, "cublas", {}, None, "ok", 20.0, 19.0, 21.0),
                Trial(2, "triton", {"x": 1}, "tiles", "compile_error", None, None, None),
                Trial(3, "triton", {"x": 2}, "tiles", "launch_error", None, None, None)),
        max_trials=2, time_up=True, roles=GEMM.roles)


def test_no_custom_kernel_after_the_search_serves_the_library() -> None:
    last = plan(_all_custom_failed()).actions[-1]
    assert isinstance(last, Decide)
    d = last.decision
    assert d.verdict == Verdict.LIBRARY_WINS_AFTER_SEARCH
    assert d.custom is None
    assert d.library is not None and d.library.backend == "cublas"
    assert d.library.median_us == 20.0 and d.speedup == pytest.approx(1.0)
    assert "No custom kernel ran correctly in 2 trials." in d.rationale, d.rationale
    assert d.policy == Policy(force_custom=True).to_dict()
    assert d.roofline is not None
