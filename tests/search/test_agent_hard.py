"""The decision loop on an unaligned shape with the repair planned: the repaired library is the
library's side, plain cuBLAS stays the baseline every pick is re-measured against, and the
decision says which library kernel it weighed. Timings are FAKE (invented in the range the
issue quotes for 999x2047x1537 on an H100: cuBLAS 73 us, the aligned product 20 us)."""

from __future__ import annotations

from dataclasses import replace

from search.decision import (
    Decide,
    Evidence,
    Policy,
    Search,
    Stage,
    Trial,
    Verdict,
    Verification,
    Verify,
    plan,
)
from search.kinds.gemm import GEMM
from search.kinds.gemm.spec import GemmProblem
from search.roofline import Calibration

P = GemmProblem(999, 2047, 1537)
CAL = Calibration("H100 (FAKE)", 3000.0, {"bf16": 780.0})
H100 = {"mode": "cuda", "cc": "9.0", "sm_count": 132, "memory_bytes": 80 << 30}
BACKENDS = ["cublas", "repaired", "triton", "triton_repair"]
POLICY = Policy()

CUBLAS = Trial(1, "cublas", {}, None, "ok", 73.0, 72.5, 73.5)
REPAIRED = Trial(2, "repaired", {"inner": "cublas", "b_layout": "kmajor"}, None, "ok",
                 30.0, 29.8, 30.2)
REPAIRED_ROW = Trial(3, "repaired", {"inner": "cublas", "b_layout": "row"}, None, "ok",
                     31.0, 30.8, 31.2)


def evidence(*trials: Trial, verification: Verification | None = None) -> Evidence:
    lib = GEMM.library_plan(P, POLICY, BACKENDS, "H100", lambda _: None, seeds=6)
    return Evidence(problem=P, policy=POLICY, calibration=CAL, library_configs=lib.configs,
                    library_notes=lib.notes, tiers=GEMM.tier_plans(P, H100, POLICY),
                    trials=trials, verification=verification, max_trials=16,
                    roles=GEMM.roles)


def test_the_repaired_library_is_measured_first_then_the_repair_tier_searches() -> None:
    first = plan(evidence())
    wanted = {(b, c.get("b_layout")) for a in first.actions
              for b, c in getattr(a, "candidates", ())}
    assert {("cublas", None), ("repaired", "row"), ("repaired", "kmajor")} <= wanted
    searching = plan(evidence(CUBLAS, REPAIRED, REPAIRED_ROW))
    assert searching.stage == Stage.CUSTOM
    assert isinstance(searching.actions[-1], Search) and searching.actions[-1].tier == "repair"


def test_a_repaired_custom_kernel_is_verified_against_the_repaired_library_and_cublas() -> None:
    custom = Trial(4, "triton_repair", {"INNER": "tiles", "B_LAYOUT": "row"}, "repair", "ok",
                   26.0, 25.9, 26.1)
    done = evidence(CUBLAS, REPAIRED, REPAIRED_ROW, custom)
    # a budget of one trial: the repair tier spent it, the search is over
    done = replace(done, max_trials=1)
    v = plan(done).actions[-1]
    assert isinstance(v, Verify)
    assert v.library.id == REPAIRED.id and v.custom.id == custom.id
    assert v.reference is not None and v.reference.id == CUBLAS.id  # plain cuBLAS
    rounds = Verification(REPAIRED.id, custom.id, "ok", (30.1, 30.0, 30.2, 30.1, 30.0),
                          (26.0, 26.1, 25.9, 26.0, 26.0), reference_id=CUBLAS.id,
                          reference_us=(73.1, 73.0, 72.9, 73.2, 73.0))
    d = plan(replace(done, verification=rounds)).actions[-1]
    assert isinstance(d, Decide)
    dec = d.decision
    assert dec.verdict == Verdict.CUSTOM_WINS
    assert dec.library.backend == "repaired" and dec.reference.backend == "cublas"
    assert dec.reference.median_us == 73.0 and dec.custom.backend == "triton_repair"
    assert "aligned copies (repaired" in dec.rationale  # which library it weighed
    assert "ran in the same rounds for reference" in dec.rationale


def test_a_sufficient_repaired_library_is_confirmed_against_plain_cublas() -> None:
    fast = Trial(2, "repaired", {"inner": "cublas", "b_layout": "kmajor"}, None, "ok",
                 8.5, 8.4, 8.6)  # 95% of the roofline (8.06 us)
    p = plan(evidence(CUBLAS, fast, REPAIRED_ROW))
    v = p.actions[-1]
    assert isinstance(v, Verify) and v.custom is None
    assert v.library.id == fast.id and v.reference.id == CUBLAS.id
    ok = Verification(fast.id, None, "ok", (8.5,) * 5, reference_id=CUBLAS.id,
                      reference_us=(73.0,) * 5)
    d = plan(evidence(CUBLAS, fast, REPAIRED_ROW, verification=ok)).actions[-1]
    assert isinstance(d, Decide) and d.decision.verdict == Verdict.LIBRARY_SUFFICIENT
    assert d.decision.library.backend == "repaired"
    assert d.decision.reference.backend == "cublas"
