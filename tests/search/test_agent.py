"""The decision loop on the CPU, driven by the replay runner (recorded H100 results, a fake)."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from search.decision import (
    Calibrate,
    Decide,
    Evidence,
    MeasureLibrary,
    Policy,
    Search,
    Stage,
    StopTier,
    TierPlan,
    Trial,
    Verdict,
    Verification,
    Verify,
    Wait,
    plan,
    tier_progress,
)
from search.kinds.gemm import GEMM
from search.kinds.gemm.spec import GemmProblem
from search.kinds.gemm.triton_space import tier_plans
from search.roofline import Calibration, roofline
from tests.search.agent_replay import (
    H100_REPLAY_CALIBRATION,
    ReplayDevice,
    full,
    problem_of,
    recorded,
    run_shape,
)

SQUARE = "gemm:b1:m4096:n4096:k4096:bf16:bf16:fp32:rr"
RAGGED = "gemm:b1:m1000:n3000:k2000:bf16:bf16:fp32:rr"
DECODE = "gemm:b1:m16:n4096:k4096:bf16:bf16:fp32:rr"
LONG_K = "gemm:b1:m64:n64:k65536:bf16:bf16:fp32:rr"
POLICY = Policy()


def custom_trials(decision) -> int:
    return int(decision.spend["custom"]["trials"])


def gpu_s(decision) -> float:
    return sum(v["gpu_s"] for v in decision.spend.values())


# -- roofline ----------------------------------------------------------------------------------
def test_roofline_of_a_compute_bound_and_a_memory_bound_shape() -> None:
    cal = Calibration("gpu", 3000.0, {"bf16": 800.0, "fp32": 50.0, "tf32": 400.0})
    square = roofline(GemmProblem(4096, 4096, 4096), cal)
    assert square is not None and square.bound == "compute"
    assert square.attainable_us == pytest.approx(2 * 4096**3 / 800e12 * 1e6)
    decode = roofline(GemmProblem(16, 4096, 4096), cal)
    assert decode is not None and decode.bound == "memory"
    nbytes = (16 * 4096 + 4096 * 4096 + 16 * 4096) * 2
    assert decode.attainable_us == pytest.approx(nbytes / 3000e9 * 1e6)
    assert decode.efficiency(2 * decode.attainable_us) == pytest.approx(0.5)
    # a little under the floor is at the roofline; far under it refutes the floor: unknown
    assert decode.efficiency(0.95 * decode.attainable_us) == 1.0
    assert decode.efficiency(0.5 * decode.attainable_us) is None
    fp32 = GemmProblem(4096, 4096, 4096, dtype="fp32")
    exact, tf32 = roofline(fp32, cal), roofline(fp32, cal, allow_tf32=True)
    assert exact is not None and tf32 is not None
    assert exact.compute_us == pytest.approx(8 * tf32.compute_us)
    assert roofline(GemmProblem(64, 64, 64, dtype="fp16"), cal) is None  # no fp16 peak
    assert roofline(GemmProblem(64, 64, 64), None) is None


def test_the_rationale_names_the_peak_and_bandwidth_of_the_roofline() -> None:
    d = run_shape(SQUARE, POLICY)
    peak = H100_REPLAY_CALIBRATION.peak("bf16")
    assert f"at {peak:.0f} TFLOP/s" in d.rationale and "at 3000 GB/s" in d.rationale
    assert d.roofline.peak_tflops == pytest.approx(peak)


def test_the_roofline_carries_the_calibrations_lowest_pass() -> None:
    cal = Calibration("gpu", 3000.0, {"bf16": 800.0, "fp32": 50.0, "tf32": 400.0},
                      peak_low_tflops={"bf16": 776.0, "tf32": 380.0})
    square = roofline(GemmProblem(4096, 4096, 4096), cal)
    assert square is not None and square.peak_low_tflops == 776.0
    assert square.attainable_low_peak_us == pytest.approx(square.attainable_us * 800 / 776)
    measured = square.attainable_us / 0.89
    assert square.efficiency(measured) == pytest.approx(0.89)
    assert square.efficiency_at_low_peak(measured) == pytest.approx(0.89 * 800 / 776)
    assert square.to_dict()["peak_low_tflops"] == 776.0
    # memory-bound: the compute peak's noise does not move the floor
    decode = roofline(GemmProblem(16, 4096, 4096), cal)
    assert decode is not None and decode.bound == "memory"
    assert decode.efficiency_at_low_peak(100.0) == decode.efficiency(100.0)
    # fp32 run as tf32: the low pass of the precision that sets the peak; none kept: the peak
    assert cal.peak_low("fp32", allow_tf32=True) == 380.0 and cal.peak_low("fp32") == 50.0
    assert Calibration.from_dict(cal.to_dict()) == cal


def test_calibration_goes_stale_when_the_toolkit_changes() -> None:
    cal = Calibration("gpu", 1.0, {"bf16": 1.0},
                      {"driver": "580", "cuda": "13.0", "torch": "2.11"})
    assert cal.matches({"driver": "580", "cuda": "13.0", "torch": "2.11", "triton": "3.6"})
    assert not cal.matches({"driver": "590", "cuda": "13.0", "torch": "2.11"})
    assert Calibration.from_dict(cal.to_dict()) == cal


def test_policy_rejects_out_of_range_values_by_name() -> None:
    with pytest.raises(ValueError, match="policy.threshold"):
        Policy(threshold=1.5)
    with pytest.raises(ValueError, match="policy.verify_rounds"):
        Policy(verify_rounds=3)
    assert Policy.from_dict({"threshold": 0.8, "unknown": 1}).threshold == 0.8


# -- the stages, replayed ----------------------------------------------------------------------
def test_library_near_the_roofline_stops_after_stage_one() -> None:
    d = run_shape(SQUARE, POLICY)
    assert d.verdict == Verdict.LIBRARY_SUFFICIENT
    assert custom_trials(d) == 0 and d.custom is None and d.chosen == "library"
    assert d.library is not None and d.library.efficiency >= 0.9
    assert "sufficient" in d.rationale and "compute-bound" in d.rationale


def test_library_at_half_the_roofline_searches() -> None:
    attainable = roofline(problem_of(SQUARE), H100_REPLAY_CALIBRATION).attainable_us
    d = run_shape(SQUARE, POLICY, library_us=2 * attainable)
    assert custom_trials(d) > 0
    assert d.library is not None and d.library.efficiency == pytest.approx(0.5, abs=0.02)
    # The recorded Triton kernels are ~1.9x faster than this (slowed) library: custom wins.
    assert d.verdict == Verdict.CUSTOM_WINS and d.verified and d.chosen == "custom"
    assert d.speedup is not None and d.speedup > 1.5


def test_a_library_within_the_calibrations_noise_of_the_threshold_is_sufficient() -> None:
    # the calibration's lowest pass 3% under its median peak: a compute-bound library at 88%
    # of the roofline reads 90.7% against that pass, within the noise of the 90% threshold
    peak = H100_REPLAY_CALIBRATION.peak("bf16")
    noisy = replace(H100_REPLAY_CALIBRATION, peak_low_tflops={"bf16": 0.97 * peak})
    attainable = roofline(problem_of(SQUARE), noisy).attainable_us
    d = run_shape(SQUARE, POLICY, library_us=attainable / 0.88, calibration=noisy)
    assert d.verdict == Verdict.LIBRARY_SUFFICIENT and custom_trials(d) == 0
    assert d.library.efficiency == pytest.approx(0.88)
    assert "within the calibration's own noise" in d.rationale
    assert f"(lowest calibration pass {0.97 * peak:.0f})" in d.rationale
    # the same library without the passes' spread, or further under the threshold: searched
    assert custom_trials(run_shape(SQUARE, POLICY, library_us=attainable / 0.88)) > 0
    assert custom_trials(run_shape(SQUARE, POLICY, library_us=attainable / 0.86,
                                   calibration=noisy)) > 0
    # a memory-bound library's floor is the bandwidth: the compute peak's noise is no excuse
    decode = roofline(problem_of(DECODE), noisy).attainable_us
    d2 = run_shape(DECODE, POLICY, library_us=decode / 0.88, calibration=noisy)
    assert custom_trials(d2) > 0 and d2.verdict != Verdict.LIBRARY_SUFFICIENT


def test_forced_custom_searches_even_when_the_library_is_sufficient() -> None:
    d = run_shape(SQUARE, replace(POLICY, force_custom=True))
    assert custom_trials(d) > 0
    assert d.verdict == Verdict.LIBRARY_WINS_AFTER_SEARCH  # recorded Triton: 184 us vs 177


def test_custom_faster_only_within_noise_keeps_the_library() -> None:
    trials = recorded()[DECODE]
    best = min(t["median_us"] for t in trials if t["backend"] == "triton" and t["status"] == "ok")
    # A library 0.5% slower than the best custom kernel, whose spread is wider than that.
    d = ReplayDevice(problem_of(DECODE), trials, POLICY, library_us=best * 1.005).run()
    assert d.verified, d.rationale
    assert d.verdict == Verdict.LIBRARY_WINS_AFTER_SEARCH and d.chosen == "library"
    assert d.custom is not None and d.custom.median_us < d.library.median_us
    assert "tie" in d.rationale and d.speedup == 1.0


def test_custom_faster_beyond_the_spread_wins() -> None:
    d = run_shape(DECODE, POLICY)
    assert d.verdict == Verdict.CUSTOM_WINS and d.verified
    fastest = min((t for t in recorded()[DECODE] if t["backend"] == "triton"
                   and t["status"] == "ok"), key=lambda t: t["median_us"])
    assert d.custom is not None and dict(d.custom.config) == fastest["config"]
    assert d.speedup == pytest.approx(d.library.median_us / d.custom.median_us)
    assert d.library.median_us - d.custom.median_us > max(d.library.spread_us,
                                                          d.custom.spread_us)


def test_a_wrong_result_never_wins() -> None:
    trials = recorded()[DECODE]
    ok = [t for t in trials if t["backend"] == "triton" and t["status"] == "ok"]
    fastest = min(ok, key=lambda t: t["median_us"])
    key = json.dumps(fastest["config"], sort_keys=True)
    # Recorded as wrong_result during the search: never picked, the next best is.
    d = ReplayDevice(problem_of(DECODE), trials, POLICY,
                     overrides={key: {"status": "wrong_result"}}).run()
    assert d.custom is not None and dict(d.custom.config) != fastest["config"]
    # Correct in the search but wrong on the interleaved re-check: the library is kept.
    v = Verification(1, 2, "wrong_result", error="max rel error 0.5")
    ev = _finished_evidence(v)
    d2 = plan(ev).actions[-1]
    assert isinstance(d2, Decide)
    assert d2.decision.verdict == Verdict.LIBRARY_WINS_AFTER_SEARCH
    assert "verification failed" in d2.decision.rationale


def _finished_evidence(v: Verification | None, time_up: bool = False) -> Evidence:
    """A search over: library 20 us (id 1), custom best 15 us (id 2)."""
    return Evidence(
        problem=GemmProblem(16, 4096, 4096), policy=POLICY, calibration=H100_REPLAY_CALIBRATION,
        library_configs=(("cublas", {}),), tiers=(TierPlan("tiles", 1.0),),
        trials=(Trial(1, "cublas", {}, None, "ok", 20.0, 19.8, 20.2),
                Trial(2, "triton", {"x": 1}, "tiles", "ok", 15.0, 14.9, 15.1),
                Trial(3, "triton", {"x": 2}, "tiles", "ok", 16.0, 15.9, 16.1)),
        verification=v, max_trials=2, time_up=time_up, roles=GEMM.roles)


def test_verification_is_requested_then_decides() -> None:
    p = plan(_finished_evidence(None))
    assert p.stage == Stage.VERIFY and isinstance(p.actions[-1], Verify)
    assert (p.actions[-1].library.id, p.actions[-1].custom.id) == (1, 2)
    assert p.actions[-1].reference is None  # the library's pick is cuBLAS itself
    pending = plan(_finished_evidence(Verification(1, 2)))
    assert isinstance(pending.actions[-1], Wait)
    done = plan(_finished_evidence(Verification(1, 2, "ok", (20.0,) * 5, (15.0, 15.1, 14.9,
                                                                           15.0, 15.0))))
    d = done.actions[-1].decision
    assert d.verdict == Verdict.CUSTOM_WINS and d.speedup == pytest.approx(20 / 15)


def test_time_up_decides_on_the_search_medians_without_verifying() -> None:
    d = plan(_finished_evidence(None, time_up=True)).actions[-1]
    assert isinstance(d, Decide) and not d.decision.verified
    assert d.decision.verdict == Verdict.CUSTOM_WINS and "time budget" in d.decision.rationale


def test_first_plan_calibrates_and_measures_the_library_at_once() -> None:
    ev = Evidence(problem=GemmProblem(64, 64, 4096), policy=POLICY, calibration=None,
                  library_configs=(("cublas", {}),), tiers=(TierPlan("tiles", 1.0),),
                  max_trials=8, roles=GEMM.roles)
    p = plan(ev)
    assert p.stage == Stage.LIBRARY
    kinds = [type(a) for a in p.actions]
    assert kinds == [Calibrate, MeasureLibrary, Wait]
    # A pending calibration is not asked for twice.
    p2 = plan(replace(ev, calibration_pending=True, trials=(Trial(1, "cublas", {}),)))
    assert [type(a) for a in p2.actions] == [Wait]
    # Forced custom does not wait for the library's verdict.
    p3 = plan(replace(ev, policy=replace(POLICY, force_custom=True)))
    # no more in flight than the tier's probe needs before its gate can judge
    assert isinstance(p3.actions[-1], Search) and p3.actions[-1].n == POLICY.probe


def test_without_calibration_the_agent_searches_and_says_why() -> None:
    ev = Evidence(problem=problem_of(DECODE), policy=POLICY, calibration=None,
                  calibration_failed=True,
                  library_configs=(("cublas", {}),), tiers=(TierPlan("tiles", 1.0),),
                  trials=(Trial(1, "cublas", {}, None, "ok", 18.7, 18.6, 18.8),), max_trials=4,
                      roles=GEMM.roles)
    p = plan(ev)
    assert isinstance(p.actions[-1], Search)
    # ... and, once the search is over, the decision says there was no roofline to judge by
    done = replace(ev, trials=(*ev.trials,
                               Trial(2, "triton", {"x": 1}, "tiles", "ok", 18.0, 17.9, 18.1)),
                   exhausted_tiers=frozenset({"tiles"}), verification=Verification(
                       1, 2, "ok", (18.7,) * 5, (18.0,) * 5))
    d = plan(done).actions[-1]
    assert isinstance(d, Decide) and d.decision.roofline is None
    assert "no roofline" in d.decision.rationale and d.decision.library.efficiency is None


# -- tiers and budgets -------------------------------------------------------------------------
def test_full_search_spends_the_whole_budget_and_the_agent_far_less_where_it_cannot_pay() -> None:
    agent, baseline = run_shape(RAGGED, POLICY), run_shape(RAGGED, full(POLICY))
    # the baseline spends all it can: the whole recording of the one applicable tier
    recorded_tiles = [t for t in recorded()[RAGGED] if t["backend"] == "triton"
                      and t["config"]["SPLIT_K"] == 1]
    assert custom_trials(baseline) == len(recorded_tiles) > 40
    assert agent.verdict == baseline.verdict == Verdict.LIBRARY_WINS_AFTER_SEARCH
    assert gpu_s(agent) <= 0.25 * gpu_s(baseline)
    assert "not promising" in agent.rationale


@pytest.mark.parametrize("key", [DECODE, "gemm:b1:m128:n14336:k4096:bf16:bf16:fp32:rr"])
def test_agent_speedup_within_three_percent_of_the_full_search(key: str) -> None:
    agent, baseline = run_shape(key, POLICY), run_shape(key, full(POLICY))
    assert agent.verdict == baseline.verdict == Verdict.CUSTOM_WINS
    assert agent.speedup >= 0.97 * baseline.speedup
    assert gpu_s(agent) < gpu_s(baseline)


def test_tier_budgets_roll_over_and_inapplicable_tiers_are_explained() -> None:
    d = run_shape(DECODE, POLICY)
    tiers = {t["tier"]: t for t in d.tiers}
    assert tiers["tiles"]["trials"] + tiers["split_k"]["trials"] <= 64
    # the tiles tier stalled early: split-K's budget is what the tiles tier left of 64
    assert "stalled" in tiers["tiles"]["reason"]
    assert tiers["tiles"]["trials"] < tiers["tiles"]["budget"]
    assert tiers["split_k"]["budget"] == 64 - tiers["tiles"]["trials"]
    # unsplit kernels are hopeless on 64x64x65536 (8 CTAs for 132 SMs): split-K alone runs
    # and gets the whole budget; the unsplit tiers say why they were skipped
    long_k = {t["tier"]: t for t in run_shape(LONG_K, POLICY).tiers}
    assert long_k["split_k"]["budget"] == 64 and long_k["split_k"]["trials"] > 0
    assert long_k["tiles"]["trials"] == 0
    assert long_k["tiles"]["reason"].startswith("skipped: without a split at most 8 CTAs")
    ragged = run_shape(RAGGED, POLICY)
    skipped = {t["tier"]: t for t in ragged.tiers}["split_k"]
    assert skipped["trials"] == 0 and skipped["reason"].startswith("skipped")


def test_patience_ends_a_stalled_tier_and_stop_tier_cancels_its_pending() -> None:
    pol = replace(POLICY, patience=3, probe=100)
    trials = [Trial(1, "cublas", {}, None, "ok", 30.0, 29.9, 30.1)]
    trials += [Trial(i, "triton", {"i": i}, "tiles", "ok", 29.0, 28.9, 29.1) for i in (2, 3, 4, 5)]
    trials += [Trial(6, "triton", {"i": 6}, "tiles")]  # pending
    ev = Evidence(problem=GemmProblem(16, 4096, 4096), policy=pol,
                  calibration=H100_REPLAY_CALIBRATION, library_configs=(("cublas", {}),),
                  tiers=(TierPlan("tiles", 1.0), TierPlan("split_k", 1.0)), trials=tuple(trials),
                  max_trials=20, roles=GEMM.roles)
    progress = {p.name: p for p in tier_progress(ev)}
    assert progress["tiles"].ended and "stalled" in progress["tiles"].reason
    p = plan(ev)
    assert any(isinstance(a, StopTier) and a.tier == "tiles" for a in p.actions)
    search = p.actions[-1]
    assert isinstance(search, Search) and search.tier == "split_k" and search.n == 20 - 5


def test_library_notes_reach_the_rationale_and_every_library_trial_is_listed() -> None:
    cal = Calibration("gpu", 3000.0, {"bf16": 800.0, "fp16": 800.0, "fp32": 50.0})
    p = GemmProblem(4096, 4096, 4096)
    rf = roofline(p, cal)
    cut = {"op": "cutlass3x_x", "raster": "heuristic", "swizzle": 1, "splits": 1}
    # tune_library off: a sufficient library ends the job without the CUTLASS search (and,
    # confirm_library off, without re-measuring the pick beside cuBLAS: see below)
    ev = Evidence(problem=p, policy=replace(POLICY, tune_library=False, confirm_library=False),
                  calibration=cal,
                  library_configs=(("cublas", {}), ("cutlass", cut)),
                  library_notes=("CUTLASS skipped: a reason.",),
                  trials=(Trial(1, "cublas", {}, None, "ok", rf.attainable_us * 2),
                          Trial(2, "cutlass", cut, None, "ok", rf.attainable_us / 0.95)),
                  custom_allowed=False, roles=GEMM.roles)
    d = plan(ev).actions[-1]
    assert isinstance(d, Decide)
    d = d.decision
    assert d.library.backend == "cutlass" and d.verdict == Verdict.LIBRARY_SUFFICIENT
    assert d.rationale.endswith("CUTLASS skipped: a reason.")
    out = d.to_dict()
    assert [t["backend"] for t in out["library_trials"]] == ["cublas", "cutlass"]
    assert out["notes"] == ["CUTLASS skipped: a reason."]


def test_in_flight_trials_never_exceed_what_the_probe_or_the_stall_rule_needs() -> None:
    pol = replace(POLICY, patience=4, probe=3)
    lib = Trial(1, "cublas", {}, None, "ok", 30.0, 29.9, 30.1)

    def ev(*custom: Trial) -> Evidence:
        return Evidence(problem=GemmProblem(16, 4096, 4096), policy=pol,
                        calibration=H100_REPLAY_CALIBRATION, library_configs=(("cublas", {}),),
                        tiers=(TierPlan("tiles", 1.0),), trials=(lib, *custom), max_trials=50,
                            roles=GEMM.roles)

    first = plan(ev()).actions[-1]
    assert isinstance(first, Search) and first.n == 3  # the probe
    out = [Trial(i, "triton", {"i": i}, "tiles") for i in (2, 3, 4)]
    assert isinstance(plan(ev(*out)).actions[-1], Wait)  # the gate needs their results
    done = [Trial(i, "triton", {"i": i}, "tiles", "ok", 29.0 - i, 1, 1) for i in (2, 3, 4)]
    nxt = plan(ev(*done)).actions[-1]
    assert isinstance(nxt, Search) and nxt.n == 4  # the stall rule could need 4 more


def test_a_refinement_tier_that_cannot_close_the_gap_is_skipped() -> None:
    lib = Trial(1, "cublas", {}, None, "ok", 20.0, 19.9, 20.1)
    tiles = [Trial(i, "triton", {"i": i}, "tiles", "ok", 30.0, 29.9, 30.1) for i in range(2, 8)]
    ev = Evidence(problem=GemmProblem(1000, 3000, 2000), policy=POLICY,
                  calibration=H100_REPLAY_CALIBRATION, library_configs=(("cublas", {}),),
                  tiers=(TierPlan("tiles", 1.0), TierPlan("hopper", 1.0, max_gain=0.10)),
                  trials=(lib, *tiles), max_trials=40, roles=GEMM.roles)
    progress = {p.name: p for p in tier_progress(ev)}
    assert progress["hopper"].ended and progress["hopper"].created == 0
    assert "even a 10% gain" in progress["hopper"].reason
    d = plan(ev).actions[-1]
    assert isinstance(d, Decide) and d.decision.spend["custom"]["trials"] == 6
    # with a bounded gain that could close it, the tier runs
    close = replace(ev, trials=(lib, *[replace(t, median_us=22.5) for t in tiles]))
    assert isinstance(plan(close).actions[-1], Search)


@pytest.mark.parametrize(("m", "n", "k", "unsplit"), [
    (64, 64, 65536, False),   # 8 CTAs unsplit; 128 splits fill the SMs
    (128, 128, 65536, False),  # 32 CTAs: still under a quarter of 132
    (64, 64, 512, True),      # split-K applies but two splits of 8 CTAs fill nothing either
    (256, 256, 65536, True),  # 128 CTAs of 16x32: unsplit kernels can fill the SMs
    (16, 4096, 4096, True),
])
def test_unsplit_tiers_are_skipped_only_where_split_k_alone_can_fill_the_sms(
        m: int, n: int, k: int, unsplit: bool) -> None:
    plans = {t.name: t for t in tier_plans(GemmProblem(m, n, k), mode="cuda", cc="9.0",
                                           sm_count=132, allow_tf32=False)}
    assert plans["split_k"].applicable
    assert plans["tiles"].applicable is unsplit and plans["hopper"].applicable is unsplit
    if not unsplit:
        assert "CTAs" in plans["tiles"].reason and "on the 132 SMs" in plans["tiles"].reason
        assert plans["hopper"].reason == plans["tiles"].reason


# -- the library confirmation (policy.confirm_library) --------------------------------------
# FAKE timings in the range an H100 measured on 8192^3 bf16 (run 9,
# docs/benchmarks/agent_h100_2026-11-24.md: first-stage medians 1395-1583 us, interleaved
# rounds 1450-1789 us); which kernel wins the rounds is what each test sets.
BIG = GemmProblem(8192, 8192, 8192)
BIG_CAL = Calibration("gpu", 3000.0, {"bf16": 773.1, "fp16": 773.1, "fp32": 50.0})
OP = {"op": "cutlass3x_sm90_x", "raster": "heuristic", "swizzle": 1, "splits": 1}


def _big(*trials: Trial, verification: Verification | None = None,
         policy: Policy = POLICY) -> Evidence:
    return Evidence(problem=BIG, policy=replace(policy, tune_library=False),
                    calibration=BIG_CAL, library_configs=(("cublas", {}), ("cutlass", OP)),
                    tiers=(TierPlan("tiles", 1.0),), trials=trials, verification=verification,
                    max_trials=64, roles=GEMM.roles)


CUBLAS_T = Trial(1, "cublas", {}, None, "ok", 1418.5, 1416.0, 1421.0)
OP_T = Trial(2, "cutlass", OP, None, "ok", 1414.0, 1412.0, 1417.0)


def test_a_sufficient_library_confirms_its_pick_against_cublas_interleaved() -> None:
    ev = _big(CUBLAS_T, OP_T)
    p = plan(ev)
    v = p.actions[-1]
    assert p.stage == Stage.VERIFY and isinstance(v, Verify)
    assert v.library.id == OP_T.id and v.custom is None and v.reference is not None
    assert v.reference.id == CUBLAS_T.id and v.rounds == POLICY.verify_rounds
    # while it runs, the plan waits; nothing is decided
    out = Verification(OP_T.id, None, reference_id=CUBLAS_T.id)
    assert isinstance(plan(_big(CUBLAS_T, OP_T, verification=out)).actions[-1], Wait)
    done = replace(out, status="ok", library_us=(1422.0, 1487.0, 1398.0, 1402.0, 1402.0),
                   reference_us=(1541.0, 1507.0, 1504.0, 1591.0, 1564.0), gpu_s=1.2)
    d = plan(_big(CUBLAS_T, OP_T, verification=done)).actions[-1]
    assert isinstance(d, Decide)
    dec = d.decision
    assert dec.verdict == Verdict.LIBRARY_SUFFICIENT and not dec.verified
    assert dec.library is not None and dec.library.backend == "cutlass"
    # the spread is the range of the middle rounds: 1487 and 1398 are left out
    assert dec.library.median_us == 1402.0 and dec.library.spread_us == 1422.0 - 1402.0
    assert dec.reference is not None and dec.reference.median_us == 1541.0
    # the speed-up over cuBLAS comes from the one set of rounds, not from the stage timings
    assert dec.speedup_vs_baseline == pytest.approx(1541.0 / 1402.0)
    assert dec.speedup == 1.0 and dec.spend["verify"] == {"trials": 1, "gpu_s": 1.2}
    assert "Interleaved over 5 rounds" in dec.rationale and "cutlass is the library's pick" \
        in dec.rationale
    assert dec.to_dict()["reference"]["backend"] == "cublas"


def test_cublas_faster_in_the_confirmation_is_the_pick() -> None:
    done = Verification(OP_T.id, None, "ok", (1430.0, 1431.0, 1429.0, 1432.0, 1430.0),
                        reference_id=CUBLAS_T.id,
                        reference_us=(1420.0, 1419.0, 1421.0, 1418.0, 1420.0))
    dec = plan(_big(CUBLAS_T, OP_T, verification=done)).actions[-1].decision
    assert dec.library.backend == "cublas" and dec.library.median_us == 1420.0
    assert dec.speedup_vs_baseline == 1.0
    assert "cuBLAS is the library's pick" in dec.rationale


def test_a_pick_wrong_on_the_confirmations_recheck_never_stays_the_pick() -> None:
    bad = Verification(OP_T.id, None, "wrong_result", gpu_s=0.3, reference_id=CUBLAS_T.id,
                       error="library (cutlass) rel_error 0.5 over tolerance 0.01")
    dec = plan(_big(CUBLAS_T, OP_T, verification=bad)).actions[-1].decision
    assert dec.verdict == Verdict.LIBRARY_SUFFICIENT
    assert dec.library.backend == "cublas" and dec.library.median_us == CUBLAS_T.median_us
    assert dec.reference is None and "failed (wrong_result" in dec.rationale


def test_no_confirmation_without_a_close_rival_or_when_the_policy_is_off() -> None:
    slow_op = replace(OP_T, median_us=CUBLAS_T.median_us * (1 + POLICY.verify_margin) + 1)
    d = plan(_big(CUBLAS_T, slow_op)).actions[-1]
    assert isinstance(d, Decide) and d.decision.library.backend == "cublas"
    assert d.decision.reference is None
    # cuBLAS ahead but within verify_margin: still confirmed (either may be faster)
    close = replace(OP_T, median_us=CUBLAS_T.median_us * 1.02)
    assert isinstance(plan(_big(CUBLAS_T, close)).actions[-1], Verify)
    off = plan(_big(CUBLAS_T, OP_T, policy=replace(POLICY, confirm_library=False))).actions[-1]
    assert isinstance(off, Decide) and off.decision.library.backend == "cutlass"
    assert off.decision.reference is None
    # cuBLAS alone: nothing to confirm
    only = Evidence(problem=BIG, policy=POLICY, calibration=BIG_CAL,
                    library_configs=(("cublas", {}),), tiers=(TierPlan("tiles", 1.0),),
                    trials=(CUBLAS_T,), max_trials=64, roles=GEMM.roles)
    assert isinstance(plan(only).actions[-1], Decide)


def test_a_confirmation_is_not_taken_for_the_custom_verification() -> None:
    """Under the threshold the custom stage runs; a stored confirmation (no custom side) never
    stands for verdict 2, which asks for its own."""
    slow = replace(CUBLAS_T, median_us=2000.0, p20_us=1990.0, p80_us=2010.0)
    op = replace(OP_T, median_us=1990.0, p20_us=1985.0, p80_us=1995.0)
    cus = Trial(3, "triton", {"BLOCK_M": 128}, "tiles", "ok", 1500.0, 1495.0, 1505.0)
    conf = Verification(op.id, None, "ok", (1990.0,) * 5, reference_id=slow.id,
                        reference_us=(2000.0,) * 5)
    ev = replace(_big(slow, op, cus, verification=conf,
                      policy=replace(POLICY, cutlass_trials=0)),
                 exhausted_tiers=frozenset({"tiles"}))
    v = plan(ev).actions[-1]
    assert isinstance(v, Verify) and v.custom is not None and v.custom.id == cus.id


def test_a_search_without_verdict_two_confirms_the_library_pick_too() -> None:
    """The custom best is too far behind to be re-measured: the library stands, and which
    library kernel (and its speed-up over cuBLAS) is settled interleaved, as after verdict 1."""
    slow = replace(CUBLAS_T, median_us=2000.0, p20_us=1990.0, p80_us=2010.0)
    op = replace(OP_T, median_us=1990.0, p20_us=1985.0, p80_us=1995.0)
    cus = Trial(3, "triton", {"BLOCK_M": 128}, "tiles", "ok", 2500.0, 2490.0, 2510.0)
    pol = replace(POLICY, cutlass_trials=0)
    ev = replace(_big(slow, op, cus, policy=pol), exhausted_tiers=frozenset({"tiles"}))
    v = plan(ev).actions[-1]
    assert isinstance(v, Verify) and v.custom is None and v.library.id == op.id
    conf = Verification(op.id, None, "ok", (1950.0, 1960.0, 1955.0, 1948.0, 1952.0),
                        reference_id=slow.id,
                        reference_us=(2100.0, 2110.0, 2090.0, 2105.0, 2095.0))
    d = plan(replace(ev, verification=conf)).actions[-1]
    assert isinstance(d, Decide)
    dec = d.decision
    assert dec.verdict == Verdict.LIBRARY_WINS_AFTER_SEARCH and not dec.verified
    assert dec.library.backend == "cutlass" and dec.library.median_us == 1952.0
    assert dec.speedup == 1.0 and dec.speedup_vs_baseline == pytest.approx(2100.0 / 1952.0)
    assert "too far behind" in dec.rationale and "Interleaved over 5 rounds" in dec.rationale
    assert "verification failed" not in dec.rationale


def test_one_disturbed_round_does_not_turn_a_clear_gap_into_a_tie() -> None:
    # FAKE rounds modelled on an H100 job (2026-11-27, 999x2047x1537): medians 25.3 us
    # (custom) and 32.1 us (library), one round's spread over 700 us. The medians decide, and
    # the spread leaves out each side's extreme round.
    v = Verification(1, 2, "ok", library_us=(32.1, 32.0, 32.2, 749.5, 32.1),
                     custom_us=(25.3, 25.2, 25.4, 25.3, 25.3))
    d = plan(_finished_evidence(v)).actions[-1]
    assert isinstance(d, Decide)
    assert d.decision.verdict == Verdict.CUSTOM_WINS, d.decision.rationale
    assert d.decision.library.spread_us == pytest.approx(0.1)
    # a gap inside the middle rounds' spread is still a tie
    v2 = Verification(1, 2, "ok", library_us=(32.1, 30.0, 33.4, 749.5, 32.1),
                      custom_us=(31.9, 30.2, 33.0, 31.5, 31.8))
    d2 = plan(_finished_evidence(v2)).actions[-1]
    assert d2.decision.verdict == Verdict.LIBRARY_WINS_AFTER_SEARCH
    assert "tie" in d2.decision.rationale
