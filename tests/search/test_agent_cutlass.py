"""The CUTLASS search in the decision loop, on the CPU.

The replay device serves recorded H100 cuBLAS and Triton results; the CUTLASS results here are
FAKE (no recording has any), chosen to put the library below or near the threshold.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from search.decision import (
    Decide,
    Decision,
    Evidence,
    Policy,
    Search,
    Stage,
    StopTier,
    Trial,
    Verdict,
    Verification,
    Verify,
    Wait,
    cutlass_progress,
    plan,
)
from search.kinds.gemm import CUTLASS_TIER, GEMM
from search.roofline import roofline
from tests.search.agent_replay import (
    H100_REPLAY_CALIBRATION,
    ReplayDevice,
    problem_of,
    recorded,
    replay_tiers,
)

SQUARE = "gemm:b1:m4096:n4096:k4096:bf16:bf16:fp32:rr"
PROBLEM = problem_of(SQUARE)
ATTAINABLE = roofline(PROBLEM, H100_REPLAY_CALIBRATION).attainable_us


def op(i: int, **knobs: Any) -> dict[str, Any]:
    return {"op": f"fake_search_op_{i}", "raster": "heuristic", "swizzle": 1, "splits": 1,
            **knobs}


def device(policy: Policy, search: list[tuple[dict[str, Any], float, float]],
           seed_us: float = 1.6) -> ReplayDevice:
    """cuBLAS at half the roofline, the CUTLASS first stage at ``seed_us`` x the attainable."""
    return ReplayDevice(PROBLEM, recorded()[SQUARE], policy, library_us=2 * ATTAINABLE,
                        cutlass_seed_us=seed_us * ATTAINABLE, cutlass_search=search)


def stages(dev: ReplayDevice) -> list[str]:
    """The searches in the order the agent asked for them."""
    out = []
    for line in dev.log:
        if "Search(tier=" in line:
            tier = line.split("Search(tier=")[1].split("'")[1]
            if not out or out[-1] != tier:
                out.append(tier)
    return out


def test_the_cutlass_search_runs_before_triton_and_its_best_can_end_the_job() -> None:
    # the third search trial reaches 98% of the roofline: the library is now sufficient
    search = [(op(1), 1.5 * ATTAINABLE, 60.0), (op(1, swizzle=2), 1.4 * ATTAINABLE, 0.0),
              (op(2), ATTAINABLE / 0.98, 60.0)] + [(op(3, swizzle=w), 1.5 * ATTAINABLE, 0.0)
                                                   for w in (2, 4, 8)]
    dev = device(Policy(), search)
    d = dev.run()
    assert stages(dev) == [CUTLASS_TIER]
    assert d.verdict == Verdict.LIBRARY_SUFFICIENT and d.custom is None
    assert d.library is not None and d.library.backend == "cutlass"
    assert dict(d.library.config) == op(2)  # found by the search, not in the first stage
    assert d.spend["custom"]["trials"] == 0
    assert d.spend["cutlass"]["trials"] >= 3 and d.spend["cutlass"]["compile_s"] >= 120.0
    assert d.spend["library"]["compile_s"] == 120.0  # the two first-stage CUTLASS ops
    assert "CUTLASS search" in d.rationale
    assert d.tiers[0]["tier"] == CUTLASS_TIER and d.tiers[0]["side"] == "library"
    searched = [t for t in d.library_trials if t["search"]]
    assert searched and all(t["backend"] == "cutlass" for t in searched)
    # over cuBLAS (2.0x the attainable in this fake): its time over the CUTLASS pick's
    assert d.speedup == 1.0
    assert d.speedup_vs_baseline == pytest.approx(2.0 * 0.98)
    assert d.to_dict()["speedup_vs_cublas"] == d.speedup_vs_baseline


def test_triton_must_beat_the_cutlass_best_which_is_the_library_in_verdict_two() -> None:
    # CUTLASS improves the library to 1.3x the attainable (under the threshold): the Triton
    # tiers run after it, against that best
    search = [(op(1), 1.3 * ATTAINABLE, 60.0)] + [
        (op(1, swizzle=w, raster=r), 1.35 * ATTAINABLE, 0.0)
        for r in ("heuristic", "along_m", "along_n") for w in (2, 4, 8)]
    dev = device(Policy(), search)
    d = dev.run()
    assert stages(dev)[0] == CUTLASS_TIER and "tiles" in stages(dev)
    assert CUTLASS_TIER not in stages(dev)[1:]  # never back once Triton started
    assert d.library is not None and d.library.backend == "cutlass"
    assert dict(d.library.config) == op(1)
    assert d.spend["custom"]["trials"] > 0
    assert d.tiers[0]["tier"] == CUTLASS_TIER
    assert d.tiers[0]["reason"].startswith("stalled")  # 8 trials without a gain
    # the recorded Triton kernels beat 1.3x the attainable: custom wins against CUTLASS
    assert d.verdict == Verdict.CUSTOM_WINS and d.verified
    # cuBLAS ran in the verification's rounds beside the CUTLASS pick: the speed-up over it is
    # its interleaved median over the custom kernel's, never its search time over a verified one
    (verify,) = [line for line in dev.log if "Verify(" in line]
    assert "backend='cublas'" in verify.split("reference=Trial(")[1].split(",")[1]
    assert d.reference is not None and d.reference.backend == "cublas"
    assert d.reference.median_us == pytest.approx(2.0 * ATTAINABLE)  # FAKE rounds' median
    assert d.speedup_vs_baseline == pytest.approx(d.reference.median_us / d.custom.median_us)
    assert d.to_dict()["reference"]["backend"] == "cublas"
    assert "cublas ran in the same rounds for reference" in d.rationale


def _verified(reference_us: float, library_us: float, custom_us: float) -> Decision:
    """A decision on a FAKE verification (times in units of 10 us: cuBLAS about half the
    roofline): cuBLAS (id 1, 40 in the first stage), a CUTLASS pick (id 2, 38), a custom kernel
    (id 3, 37.8 in the search)."""
    jitter = (1.0, 0.99, 1.01, 0.995, 1.005)
    u = 10.0

    def rounds(x: float) -> tuple[float, ...]:
        return tuple(x * u * j for j in jitter)

    ev = Evidence(
        problem=PROBLEM, policy=Policy(cutlass_trials=0),
        calibration=H100_REPLAY_CALIBRATION,
        library_configs=(("cublas", {}), ("cutlass", op(1))), tiers=replay_tiers(PROBLEM),
        trials=(Trial(1, "cublas", {}, None, "ok", 40.0 * u, 39.8 * u, 40.2 * u),
                Trial(2, "cutlass", op(1), None, "ok", 38.0 * u, 37.8 * u, 38.2 * u),
                Trial(3, "triton", {"x": 1}, "tiles", "ok", 37.8 * u, 37.6 * u, 38.0 * u)),
        exhausted_tiers=frozenset(t.name for t in replay_tiers(PROBLEM)), max_trials=1,
        verification=Verification(2, 3, "ok", rounds(library_us), rounds(custom_us), 1.0, None,
                                  1, rounds(reference_us)), roles=GEMM.roles)
    action = plan(replace(ev, verification=None)).actions[-1]
    assert isinstance(action, Verify) and action.reference is not None
    assert (action.library.id, action.custom.id, action.reference.id) == (2, 3, 1)
    (decide,) = plan(ev).actions
    assert isinstance(decide, Decide)
    return decide.decision


def test_cublas_faster_than_the_cutlass_pick_interleaved_is_the_library_side() -> None:
    # interleaved, cuBLAS (38.0) beats the CUTLASS pick (39.6) the stage timings made: the
    # custom kernel (39.0) must beat cuBLAS, and does not
    d = _verified(reference_us=38.0, library_us=39.6, custom_us=39.0)
    assert d.verdict == Verdict.LIBRARY_WINS_AFTER_SEARCH
    assert d.library is not None and d.library.backend == "cublas"
    assert d.library.candidate_id == 1 and d.library.median_us == pytest.approx(380.0)
    assert d.speedup_vs_baseline == pytest.approx(1.0)
    assert "was faster than the library's pick cutlass" in d.rationale
    # cuBLAS slower: the CUTLASS pick stays the library side, and the custom kernel beats it
    d2 = _verified(reference_us=41.0, library_us=39.6, custom_us=37.0)
    assert d2.verdict == Verdict.CUSTOM_WINS and d2.library.backend == "cutlass"
    assert d2.speedup_vs_baseline == pytest.approx(41.0 / 37.0)
    assert d2.speedup == pytest.approx(39.6 / 37.0)


def test_full_search_spends_the_cutlass_trial_budget_and_zero_trials_disables_it() -> None:
    search = [(op(i), 1.5 * ATTAINABLE, 60.0) for i in range(30)]
    dev = device(Policy(full_search=True, cutlass_trials=10), search)
    d = dev.run()
    assert d.spend["cutlass"]["trials"] == 10  # no stall stop under full_search
    assert d.spend["cutlass"]["compile_s"] == 600.0
    off = device(Policy(cutlass_trials=0), search)
    d = off.run()
    assert CUTLASS_TIER not in stages(off) and d.spend["cutlass"]["trials"] == 0
    no_cutlass = ReplayDevice(PROBLEM, recorded()[SQUARE], Policy(), library_us=2 * ATTAINABLE)
    no_cutlass.run()
    assert CUTLASS_TIER not in stages(no_cutlass)


def _ev(*search: Trial, policy: Policy = Policy(), exhausted: bool = False) -> Evidence:
    lib = (Trial(1, "cublas", {}, None, "ok", 2 * ATTAINABLE),
           Trial(2, "cutlass", op(0), None, "ok", 1.6 * ATTAINABLE, compile_s=60.0))
    return Evidence(PROBLEM, policy, H100_REPLAY_CALIBRATION,
                    library_configs=(("cublas", {}), ("cutlass", op(0))),
                    tiers=replay_tiers(PROBLEM),
                    trials=(*lib, *search),
                    exhausted_tiers=frozenset({CUTLASS_TIER} if exhausted else ()),
                        roles=GEMM.roles)


def test_the_search_action_carries_the_compile_seconds_left_and_exhaustion_ends_it() -> None:
    pol = Policy(cutlass_compile_s=200.0, cutlass_trials=6)
    p = plan(_ev(Trial(3, "cutlass", op(1), CUTLASS_TIER, "ok", 1.5 * ATTAINABLE,
                       compile_s=70.0), policy=pol))
    assert p.stage == Stage.CUTLASS
    (action,) = [a for a in p.actions if isinstance(a, Search)]
    assert action.tier == CUTLASS_TIER and action.compile_left_s == pytest.approx(130.0)
    assert action.n == 5
    # the tuner found nothing untried within the compile budget: over, pending ones cancelled
    ev = _ev(Trial(3, "cutlass", op(1), CUTLASS_TIER, "ok", 1.5 * ATTAINABLE, compile_s=70.0),
             Trial(4, "cutlass", op(1, swizzle=2), CUTLASS_TIER), policy=pol, exhausted=True)
    assert isinstance(plan(ev).actions[-1], Wait)  # its last trial is still out
    done = replace(ev, trials=(*ev.trials[:-1], replace(ev.trials[-1], status="ok",
                                                        median_us=1.5 * ATTAINABLE)))
    prog = cutlass_progress(done)
    assert prog is not None and prog.ended and "compile budget" in prog.reason
    assert prog.compile_s == 70.0 and prog.compile_budget_s == 200.0
    assert any(isinstance(a, Search) and a.tier == "tiles" for a in plan(done).actions)
    # time up with trials out: the search stops and says so once they are in
    over = replace(ev, exhausted_tiers=frozenset(), time_up=True)
    assert not any(isinstance(a, Search) for a in plan(over).actions)
    assert not any(isinstance(a, StopTier) for a in plan(over).actions)


def test_policy_rejects_bad_cutlass_budgets_by_name() -> None:
    with pytest.raises(ValueError, match="policy.cutlass_trials"):
        Policy(cutlass_trials=-1)
    with pytest.raises(ValueError, match="policy.cutlass_compile_s"):
        Policy(cutlass_compile_s=-5.0)
    with pytest.raises(ValueError, match="policy.cutlass_compile_s"):
        Policy(cutlass_compile_s=float("inf"))
    pol = Policy.from_dict({"cutlass_trials": 3, "cutlass_compile_s": 120})
    assert (pol.cutlass_trials, pol.cutlass_compile_s) == (3, 120)
    assert Policy().to_dict()["cutlass_trials"] == 12


def test_a_cutlass_search_that_cannot_beat_the_library_is_skipped() -> None:
    """First-stage CUTLASS 30% behind cuBLAS (FAKE, like the H100's 29.5 us vs 24.0 us at
    1000x3000x2000): a 10% gain would still lose, so the agent goes straight to the custom
    tiers and says why; the full search still runs it."""
    search = [(op(i), 2.5 * ATTAINABLE, 0.0) for i in range(12)]
    dev = device(Policy(), search, seed_us=2.6)  # cuBLAS at 2.0x the attainable
    d = dev.run()
    assert CUTLASS_TIER not in stages(dev)
    cut = next(t for t in d.tiers if t["tier"] == CUTLASS_TIER)
    assert cut["trials"] == 0 and cut["reason"].startswith("skipped: the first stage's best")
    assert d.spend["cutlass"]["trials"] == 0
    full = device(Policy(full_search=True), search, seed_us=2.6)
    full.run()
    assert stages(full)[0] == CUTLASS_TIER
    # within reach of the library (1.05x behind), the search runs
    near = device(Policy(), search, seed_us=2.1)
    near.run()
    assert stages(near)[0] == CUTLASS_TIER


def test_a_sufficient_first_wave_ends_the_job_before_the_other_seeds_are_measured() -> None:
    """Without ``tune_library``: cuBLAS at 98% of the roofline, FAKE CUTLASS seeds 10% faster:
    the first wave is cuBLAS and the best-ranked seed, it reaches the threshold, and the job
    ends there naming the seed it did not measure; ``first_cutlass_seeds=0`` measures cuBLAS
    alone, and a wave as large as the seeds measures them all at once."""
    def dev(policy: Policy) -> ReplayDevice:
        return ReplayDevice(PROBLEM, recorded()[SQUARE], replace(policy, tune_library=False),
                            library_us=ATTAINABLE / 0.98,
                            cutlass_seed_us=ATTAINABLE / 0.98 / 1.1, cutlass_search=[])

    first = dev(Policy())
    d = first.run()
    asked = [line for line in first.log if "MeasureLibrary" in line]
    assert len(asked) == 1 and "cublas" in asked[0] and "fake_op_0" in asked[0]
    assert "fake_op_1" not in asked[0]
    assert d.verdict == Verdict.LIBRARY_SUFFICIENT and d.library is not None
    assert d.library.backend == "cutlass"  # the faster library kernel of the wave
    assert sorted(t["backend"] for t in d.library_trials) == ["cublas", "cutlass"]
    assert "The other CUTLASS seed was not measured" in d.rationale
    assert "first_cutlass_seeds=1" in d.rationale

    alone = dev(Policy(first_cutlass_seeds=0))
    d = alone.run()
    assert [t["backend"] for t in d.library_trials] == ["cublas"]
    assert d.library is not None and d.library.backend == "cublas"
    assert "The 2 other CUTLASS seeds were not measured" in d.rationale

    both = dev(Policy(first_cutlass_seeds=2))
    d = both.run()
    assert len([line for line in both.log if "MeasureLibrary" in line]) == 1
    assert sorted(t["backend"] for t in d.library_trials) == ["cublas", "cutlass", "cutlass"]
    assert "not measured" not in d.rationale


def test_a_first_wave_short_of_the_threshold_releases_the_other_seeds() -> None:
    """Without ``tune_library``: cuBLAS at 50%, the first seed at 1.6x the attainable: the
    other seed is measured next (one request each), then the CUTLASS search; a job without
    CUTLASS seeds is unaffected."""
    dev = device(Policy(tune_library=False), [(op(1), 1.5 * ATTAINABLE, 0.0)], seed_us=1.6)
    d = dev.run()
    asked = [line for line in dev.log if "MeasureLibrary" in line]
    assert len(asked) == 2 and "fake_op_1" not in asked[0] and "cublas" not in asked[1]
    assert "fake_op_1" in asked[1]
    assert sum(t["backend"] == "cutlass" and not t["search"] for t in d.library_trials) == 2
    assert "not measured" not in d.rationale


def test_tune_library_searches_cutlass_before_a_sufficient_verdict() -> None:
    """cuBLAS at 98% of the roofline and FAKE CUTLASS seeds 4% faster (over 100%, as fp8's
    seeds read on the H100, and the searched op 6% under the floor: within FLOOR_SLACK, so at
    the roofline): the library is sufficient from the first measurement on, yet by
    default every seed is measured at once and the CUTLASS search runs until it stalls, so its
    4%-faster op (found second, as run 7's full search found fp8's ping-pong op) is the
    library's pick; no custom kernel is tried. Without ``tune_library`` the job ends on the
    first wave's seed."""
    seed_us = ATTAINABLE / 0.98 / 1.04
    search = [(op(1), seed_us * 1.02, 0.0), (op(2), seed_us / 1.04, 0.0)] + [
        (op(2, swizzle=w, raster=r), seed_us / 1.035, 0.0)
        for r in ("heuristic", "along_m", "along_n") for w in (2, 4, 8)]

    def dev(policy: Policy) -> ReplayDevice:
        return ReplayDevice(PROBLEM, recorded()[SQUARE], policy, library_us=ATTAINABLE / 0.98,
                            cutlass_seed_us=seed_us, cutlass_search=search)

    tuned = dev(Policy())
    d = tuned.run()
    asked = [line for line in tuned.log if "MeasureLibrary" in line]
    assert len(asked) == 1 and "fake_op_0" in asked[0] and "fake_op_1" in asked[0]
    assert stages(tuned) == [CUTLASS_TIER]
    assert d.verdict == Verdict.LIBRARY_SUFFICIENT and d.custom is None
    assert d.library is not None and dict(d.library.config) == op(2)
    assert d.library.median_us == pytest.approx(seed_us / 1.04)
    assert d.spend["custom"]["trials"] == 0
    # it ran until its stall rule: the gain on the second trial, then `patience` without one
    assert d.spend["cutlass"]["trials"] == 2 + Policy().patience
    assert d.tiers[0]["tier"] == CUTLASS_TIER and d.tiers[0]["reason"].startswith("stalled")
    assert "CUTLASS search (library side)" in d.rationale
    assert d.speedup_vs_baseline == pytest.approx(ATTAINABLE / 0.98 / (seed_us / 1.04))

    untuned = dev(Policy(tune_library=False))
    d = untuned.run()
    assert CUTLASS_TIER not in stages(untuned)
    assert d.verdict == Verdict.LIBRARY_SUFFICIENT and d.library is not None
    assert d.library.config["op"] == "fake_op_0" and d.spend["cutlass"]["trials"] == 0


def test_verdict_one_waits_for_the_last_cutlass_results_once_the_search_has_ended() -> None:
    """The search stalled while two of its trials were still out: with ``tune_library`` the
    plan stops the tier and waits for them (one may be the library's best), never deciding
    nor starting a custom tier meanwhile."""
    seed = {"op": "fake_op_0", "raster": "heuristic", "swizzle": 1, "splits": 1}
    lib_us = ATTAINABLE / 0.95
    done = [Trial(1, "cublas", {}, None, "ok", lib_us, lib_us * 0.99, lib_us * 1.01),
            Trial(2, "cutlass", seed, None, "ok", lib_us, lib_us * 0.99, lib_us * 1.01)]
    done += [Trial(3 + i, "cutlass", op(i), CUTLASS_TIER, "ok", lib_us * 1.1)
             for i in range(Policy().patience)]
    out = [Trial(20, "cutlass", op(20), CUTLASS_TIER), Trial(21, "cutlass", op(21), CUTLASS_TIER)]
    # (confirm_library off: the confirmation that follows has its tests in test_agent.py)
    ev = Evidence(problem=PROBLEM, policy=Policy(confirm_library=False),
                  calibration=H100_REPLAY_CALIBRATION,
                  library_configs=(("cublas", {}), ("cutlass", seed)),
                  tiers=replay_tiers(PROBLEM), trials=(*done, *out), max_trials=64,
                      roles=GEMM.roles)
    p = plan(ev)
    assert p.stage == Stage.CUTLASS
    assert any(isinstance(a, StopTier) and a.tier == CUTLASS_TIER for a in p.actions)
    assert isinstance(p.actions[-1], Wait)
    # once they are in without a gain, verdict 1 is asked
    slow = replace(out[1], status="ok", median_us=lib_us * 1.2)
    late = replace(ev, trials=(*done, replace(out[0], status="cancelled"), slow))
    d = plan(late).actions[-1]
    assert isinstance(d, Decide) and d.decision.verdict == Verdict.LIBRARY_SUFFICIENT
    assert d.decision.library is not None and d.decision.library.median_us == lib_us
    # a late gain over the library best restarts the stall count: the search goes on
    fast = replace(out[1], status="ok", median_us=lib_us / 1.05)
    again = plan(replace(ev, trials=(*done, replace(out[0], status="cancelled"), fast)))
    assert isinstance(again.actions[-1], Search) and again.actions[-1].tier == CUTLASS_TIER
