"""The runoff: custom finalists within ``policy.runoff_margin`` of the search's best are timed in
the verification's rounds, and the fastest there is the custom pick (search/decision/planner.py
``runners_up``, verdicts ``_runoff``; the service's verify config and its parse back).

Times are FAKE, shaped like the H100's 32x512x98304 search of 2026-11-27: finalists 0.2-0.5%
apart in the search, whose order the interleaved rounds may change."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from search.decision import (
    Decide,
    Evidence,
    Policy,
    TierPlan,
    Trial,
    Verdict,
    Verification,
    Verify,
    plan,
)
from search.decision.planner import runners_up
from search.kinds.gemm import GEMM
from search.kinds.gemm.spec import GemmProblem
from service.agent_loop import _verification, _verify_config, stored_evidence
from tests.search.agent_replay import H100_REPLAY_CALIBRATION

LIB = Trial(1, "cublas", {}, None, "ok", 42.9, 42.8, 43.0)
BEST = Trial(2, "triton_skinny", {"MODE": "tagged", "BLOCK_K": 128}, "skinny", "ok",
             41.70, 41.6, 41.8)
CLOSE = Trial(3, "triton_skinny", {"MODE": "barrier", "BLOCK_K": 256}, "skinny", "ok",
              41.85, 41.8, 41.9)
SAME = Trial(4, "triton_skinny", {"BLOCK_K": 256, "MODE": "barrier"}, "skinny", "ok",
             41.90, 41.8, 42.0)  # CLOSE's configuration again
WRONG = Trial(5, "triton_skinny", {"MODE": "tagged", "BLOCK_K": 64}, "skinny",
              "wrong_result", 41.75, 41.7, 41.8)
EDGE = Trial(6, "triton_skinny", {"MODE": "barrier", "BLOCK_K": 128}, "skinny", "ok",
             42.50, 42.4, 42.6)  # 1.9% behind BEST
FAR = Trial(7, "triton_skinny", {"MODE": "barrier", "BLOCK_K": 64}, "skinny", "ok",
            42.60, 42.5, 42.7)  # 2.2% behind


def evidence(v: Verification | None, policy: Policy | None = None) -> Evidence:
    return Evidence(
        problem=GemmProblem(32, 512, 98304), policy=policy or Policy(),
        calibration=H100_REPLAY_CALIBRATION, library_configs=(("cublas", {}),),
        tiers=(TierPlan("skinny", 1.0),),
        trials=(LIB, BEST, CLOSE, SAME, WRONG, EDGE, FAR), verification=v, max_trials=6,
        roles=GEMM.roles)


def test_runners_up_are_the_close_correct_distinct_trials_after_the_best() -> None:
    custom = [BEST, CLOSE, SAME, WRONG, EDGE, FAR]
    assert runners_up(custom, BEST, Policy()) == (CLOSE, EDGE)
    assert runners_up(custom, BEST, Policy(runoff=2)) == (CLOSE,)
    assert runners_up(custom, BEST, Policy(runoff=1)) == ()
    assert runners_up(custom, BEST, Policy(runoff_margin=0.0)) == ()
    assert runners_up(custom, BEST, Policy(runoff=8, runoff_margin=0.05)) == (CLOSE, EDGE, FAR)


def test_the_verification_times_the_runners_up_in_its_rounds() -> None:
    action = plan(evidence(None)).actions[-1]
    assert isinstance(action, Verify)
    assert (action.library.id, action.custom.id) == (1, 2)
    assert [t.id for t in action.runners_up] == [3, 6]
    # what the worker is sent: each runner-up's id, backend and configuration
    config = _verify_config(action)
    assert config["custom_id"] == 2 and [r["id"] for r in config["runners_up"]] == [3, 6]
    assert config["runners_up"][0] == {"id": 3, "backend": "triton_skinny",
                                       "config": dict(CLOSE.config)}


def rounds(us: float) -> tuple[float, ...]:
    return (us, us + 0.02, us - 0.02, us + 0.01, us - 0.01)


def decide(v: Verification) -> Decide:
    action = plan(evidence(v)).actions[-1]
    assert isinstance(action, Decide)
    return action


def test_a_runner_up_faster_in_the_rounds_is_the_custom_pick() -> None:
    v = Verification(1, 2, "ok", rounds(42.90), rounds(41.80), custom_rel_error=1.6e-3,
                     runners_up=((3, rounds(41.40), 1.7e-3), (6, rounds(42.40), 1.6e-3)))
    d = decide(v).decision
    assert d.verdict == Verdict.CUSTOM_WINS, d.rationale
    assert d.custom is not None and d.custom.candidate_id == 3
    assert dict(d.custom.config) == dict(CLOSE.config)
    assert d.custom.median_us == pytest.approx(41.40)
    assert d.speedup == pytest.approx(42.90 / 41.40)
    assert "Runoff: 3 custom finalists" in d.rationale
    assert "#3 was the fastest there and is the custom pick instead of #2" in d.rationale
    assert "41.40 in the rounds" in d.rationale and "41.80 in the rounds" in d.rationale
    # the verdict's own sentence is about the winner's rounds
    assert "the custom kernel took 41.40 us" in d.rationale


def test_the_searchs_best_stays_the_pick_when_it_is_fastest_in_the_rounds() -> None:
    v = Verification(1, 2, "ok", rounds(42.90), rounds(41.50),
                     runners_up=((3, rounds(41.60), None), (6, rounds(42.40), None)))
    d = decide(v).decision
    assert d.custom is not None and d.custom.candidate_id == 2
    assert d.custom.median_us == pytest.approx(41.50)
    assert "stays the custom pick" in d.rationale


def test_a_finalist_left_out_of_the_rounds_is_named_with_why() -> None:
    v = Verification(1, 2, "ok", rounds(42.90), rounds(41.50),
                     runners_up=((6, rounds(42.40), None),),
                     runners_up_dropped=((3, "rel_error 0.4 over tolerance 0.01 on the "
                                             "re-check"),))
    d = decide(v).decision
    assert d.custom is not None and d.custom.candidate_id == 2
    assert "Finalist #3 was left out of the rounds: rel_error 0.4" in d.rationale


def test_the_service_reads_the_runoff_back_from_the_verification_measurement() -> None:
    c = SimpleNamespace(config={"library_id": 1, "custom_id": 2}, status="done",
                        failure_reason=None)
    m = SimpleNamespace(status="ok", gpu_s=1.5, error=None, extra={
        "library_us": list(rounds(42.9)), "custom_us": list(rounds(41.8)),
        "custom_rel_error": 1.6e-3,
        "runners_up": [{"id": 3, "us": list(rounds(41.4)), "rel_error": 1.7e-3}],
        "runners_up_dropped": [{"id": 6, "reason": "RuntimeError: out of resources"}]})
    v = _verification(c, m)
    assert v.runners_up == ((3, rounds(41.4), 1.7e-3),)
    assert v.runners_up_dropped == ((6, "RuntimeError: out of resources"),)
    d = decide(v).decision
    assert d.custom is not None and d.custom.candidate_id == 3
    # and the decision's stored evidence keeps every finalist's rounds
    stored = stored_evidence(d, v)["verification"]
    assert stored["runners_up"] == [{"id": 3, "us": list(rounds(41.4)), "rel_error": 1.7e-3}]
    assert stored["runners_up_dropped"] == [{"id": 6,
                                             "reason": "RuntimeError: out of resources"}]
