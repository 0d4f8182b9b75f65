"""Verdict 2 on the search medians (time up, no re-measurement) respects the spread: a custom
kernel faster than the library by less than the p20-p80 spread is a tie, and ties go to the
library; faster by more than the spread, it wins."""

from __future__ import annotations

import pytest

from search.decision import Decide, Evidence, Policy, TierPlan, Trial, Verdict, plan
from search.kinds.gemm import GEMM
from search.kinds.gemm.spec import GemmProblem
from tests.search.agent_replay import H100_REPLAY_CALIBRATION


def _time_up(custom_us: float) -> Evidence:
    """Library 20 us with spread 2 us (19-21); one custom kernel with a 0.1 us spread."""
    return Evidence(
        problem=GemmProblem(16, 4096, 4096), policy=Policy(),
        calibration=H100_REPLAY_CALIBRATION, library_configs=(("cublas", {}),),
        tiers=(TierPlan("tiles", 1.0),),
        trials=(Trial(1, "cublas", {}, None, "ok", 20.0, 19.0, 21.0),
                Trial(2, "triton", {"x": 1}, "tiles", "ok", custom_us, custom_us - 0.05,
                      custom_us + 0.05)),
        max_trials=1, time_up=True, roles=GEMM.roles)


def _decision(custom_us: float):
    last = plan(_time_up(custom_us)).actions[-1]
    assert isinstance(last, Decide)
    assert not last.decision.verified
    return last.decision


def test_faster_by_less_than_the_spread_keeps_the_library() -> None:
    d = _decision(18.1)  # 1.9 us faster, spread 2 us: a tie
    assert d.verdict == Verdict.LIBRARY_WINS_AFTER_SEARCH
    assert d.library is not None and d.library.backend == "cublas"
    assert d.speedup == pytest.approx(1.0)


def test_faster_by_more_than_the_spread_wins() -> None:
    d = _decision(17.9)  # 2.1 us faster, spread 2 us
    assert d.verdict == Verdict.CUSTOM_WINS
    assert d.custom is not None and d.custom.backend == "triton"
    assert d.speedup == pytest.approx(20.0 / 17.9)
