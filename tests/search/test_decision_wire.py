"""A decision as it is stored and served (``Decision.to_dict``), key by key, and the speed-up
over the baseline it states (``Decision.speedup_vs_baseline``) in each of its three cases.

Every field holds a value no other field holds, so a key that took another field's value, a
value dropped or renamed, fails the exact comparison (the mutation run found ``to_dict`` with
no test that pinned it).
"""

from __future__ import annotations

from search.decision.actions import Decision, Pick
from search.decision.evidence import Verdict
from search.roofline import Roofline

LIB = Pick("cublas", {"op": "gemm"}, median_us=100.0, spread_us=1.5, efficiency=0.61,
           candidate_id=44, precision=None, rel_error=0.0011)
CUS = Pick("triton", {"BLOCK_M": 128}, median_us=80.0, spread_us=0.75, efficiency=0.77,
           candidate_id=22, precision="fp8_e4m3", rel_error=0.0375)
REF = Pick("cublas", {}, median_us=96.0, spread_us=2.25, efficiency=0.5, candidate_id=33)
ROOF = Roofline(flops=2_000, bytes=3_000, compute_us=40.0, memory_us=50.0, peak_tflops=790.0,
                bandwidth_gbs=3_000.0)
TRIALS = ({"backend": "cublas", "status": "ok", "median_us": 110.0, "candidate_id": 11},
          {"backend": "cublas", "status": "ok", "median_us": 120.0, "candidate_id": 44},
          {"backend": "cutlass", "status": "ok", "median_us": 90.0, "candidate_id": 55},
          {"backend": "cublas", "status": "wrong_result", "median_us": 10.0,
           "candidate_id": 66})


def _decision(**over: object) -> Decision:
    base: dict[str, object] = dict(
        verdict=Verdict.CUSTOM_WINS, rationale="why", library=LIB, custom=CUS, roofline=ROOF,
        speedup=1.25, verified=True, spend={"library": {"trials": 3.0, "gpu_s": 1.5}},
        tiers=({"tier": "tiles", "ended": "budget"},), policy={"threshold": 1.1},
        library_trials=TRIALS, notes=("a note",), reference=None, baseline="cublas")
    base.update(over)
    return Decision(**base)  # type: ignore[arg-type]


def test_a_pick_is_stored_field_by_field() -> None:
    assert CUS.to_dict() == {"backend": "triton", "config": {"BLOCK_M": 128},
                             "median_us": 80.0, "spread_us": 0.75, "efficiency": 0.77,
                             "candidate_id": 22, "precision": "fp8_e4m3",
                             "rel_error": 0.0375}


def test_a_decision_is_stored_field_by_field() -> None:
    d = _decision()
    got = d.to_dict()
    assert got == {
        "verdict": "custom_wins", "rationale": "why", "chosen": "custom",
        "library": LIB.to_dict(), "custom": CUS.to_dict(),
        "bound": "memory", "attainable_us": 50.0, "roofline": ROOF.to_dict(),
        "speedup": 1.25, "baseline": "cublas",
        # no reference: cuBLAS's best ok first-stage time (110) over the library pick's
        # staged time (its candidate 44: 120), times the decision's speed-up
        "speedup_vs_cublas": 110.0 / 120.0 * 1.25,
        "verified": True, "spend": {"library": {"trials": 3.0, "gpu_s": 1.5}},
        "tiers": [{"tier": "tiles", "ended": "budget"}], "policy": {"threshold": 1.1},
        "library_trials": [dict(t) for t in TRIALS], "notes": ["a note"], "reference": None}
    # containers are copies: the stored dict does not alias the decision's mappings
    assert got["spend"] is not d.spend and got["library"]["config"] is not LIB.config


def test_the_library_chosen_states_library_and_no_custom() -> None:
    got = _decision(verdict=Verdict.LIBRARY_WINS_AFTER_SEARCH, custom=None, roofline=None,
                    speedup=1.0).to_dict()
    assert (got["chosen"], got["custom"], got["bound"], got["attainable_us"],
            got["roofline"]) == ("library", None, None, None, None)


def test_the_speedup_over_the_baseline_in_each_case() -> None:
    # a reference in the verification's rounds: its median over the chosen one's
    assert _decision(reference=REF).speedup_vs_baseline == 96.0 / 80.0
    assert _decision(reference=REF).to_dict()["reference"] == REF.to_dict()
    # no reference, the library pick a CUTLASS op: cuBLAS's best ok first-stage time (110,
    # not the wrong result's 10) over the op's staged time (90), times the speed-up
    cutlass = Pick("cutlass", {}, median_us=90.0, candidate_id=55)
    assert _decision(library=cutlass).speedup_vs_baseline == 110.0 / 90.0 * 1.25
    # the library chosen (cuBLAS's candidate 44, staged at 120): cuBLAS's best ok time over it
    lib = _decision(verdict=Verdict.LIBRARY_SUFFICIENT, custom=None, speedup=1.0)
    assert lib.speedup_vs_baseline == 110.0 / 120.0
    # nothing to state it from: no baseline measured, or no speed-up
    assert _decision(baseline="rocblas").speedup_vs_baseline is None
    assert _decision(speedup=None).speedup_vs_baseline is None
    assert _decision(library=None).speedup_vs_baseline is None
