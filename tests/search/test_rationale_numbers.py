"""The rationale's numbers agree with each other: no kernel reads "100% of the attainable"
while faster than its own roofline, a CPU's calibration is no roofline, a small peak keeps its
digits, and a backend is named for what it runs on the job's device (issue 17)."""

from __future__ import annotations

import pytest

from search.decision import (
    Decide,
    Evidence,
    Policy,
    Search,
    TierPlan,
    Trial,
    Verdict,
    Verification,
    plan,
    rationale,
)
from search.kinds.attention import ATTENTION
from search.kinds.gemm import GEMM
from search.kinds.gemm.spec import GemmProblem
from search.roofline import FLOOR_SLACK, Calibration, missing_roofline, roofline
from search.types import INTERPRETER_GPU
from tests.search.agent_replay import H100_REPLAY_CALIBRATION, problem_of, run_shape

SQUARE = "gemm:b1:m4096:n4096:k4096:bf16:bf16:fp32:rr"
#: What the calibration task measured on this repository's 2-core CPU machine (a recorded
#: run of `kernelsearch tune --m 64 --n 48 --k 80 --dtype fp16`): a 256^3 fp16 torch.matmul
#: at 0.0028 TFLOP/s and a 32 MiB copy at 8.5 GB/s. torch's CPU matmul then ran the 64x48x80
#: problem in 75.7 us, 2.3x under the 174.6 us "floor" these numbers make.
CPU_CALIBRATION = Calibration(INTERPRETER_GPU, 8.465, {"fp16": 0.0028146, "bf16": 0.0041971},
                              {"mode": "interpreter"})
CPU_PROBLEM = GemmProblem(64, 48, 80, dtype="fp16")
CPU_LIBRARY_US = 75.7


def _cpu_evidence(**kw: object) -> Evidence:
    base: dict[str, object] = dict(
        problem=CPU_PROBLEM, policy=Policy(), calibration=CPU_CALIBRATION,
        library_configs=(("cublas", {}),), tiers=(TierPlan("tiles", 1.0),),
        trials=(Trial(1, "cublas", {}, None, "ok", CPU_LIBRARY_US, 75.5, 77.3),),
        max_trials=2, roles=GEMM.roles_on(INTERPRETER_GPU))
    base.update(kw)
    return Evidence(**base)  # type: ignore[arg-type]


# -- the CPU ----------------------------------------------------------------------------------
def test_a_cpu_calibration_gives_no_roofline_and_says_why() -> None:
    assert not CPU_CALIBRATION.ceilings
    assert roofline(CPU_PROBLEM, CPU_CALIBRATION) is None
    why = missing_roofline(CPU_PROBLEM, CPU_CALIBRATION)
    assert "cpu-interpreter is the CPU" in why and "no ceilings" in why
    # the same numbers under a GPU's name would make a roofline: the device decides
    gpu = Calibration("some GPU", 8.465, {"fp16": 0.0028146})
    assert gpu.ceilings and roofline(CPU_PROBLEM, gpu) is not None


def test_on_the_cpu_the_library_is_not_judged_by_a_bogus_floor() -> None:
    """Before the fix: verdict 1 on the CPU calibration, "cublas takes 75.7 us, 100% of the
    attainable" against a 174.6 us floor at "0 TFLOP/s". Now there is no roofline, so the
    custom stage runs, and the decision says why in the CPU's own words."""
    ev = _cpu_evidence()
    first = plan(ev)
    assert isinstance(first.actions[-1], Search), first
    done = _cpu_evidence(
        trials=(*ev.trials, Trial(2, "triton", {"x": 1}, "tiles", "ok", 90.0, 89.0, 91.0)),
        exhausted_tiers=frozenset({"tiles"}),
        verification=Verification(1, 2, "ok", (75.7,) * 5, (90.0,) * 5))
    d = plan(done).actions[-1]
    assert isinstance(d, Decide)
    assert d.decision.verdict == Verdict.LIBRARY_WINS_AFTER_SEARCH
    assert d.decision.roofline is None and d.decision.library.efficiency is None
    why = d.decision.rationale
    assert "no roofline (cpu-interpreter is the CPU" in why
    assert "torch CPU matmul takes 75.7 us (no roofline to judge it by)" in why
    assert "cublas takes" not in why and "TFLOP/s" not in why and "attainable" not in why


def test_an_fp8_job_on_the_cpu_keeps_the_library_and_names_it() -> None:
    fp8 = GemmProblem(64, 48, 96, dtype="fp8_e4m3", layout_b="col")
    ev = _cpu_evidence(problem=fp8, tiers=(TierPlan("tiles", 1.0, False, "no fp8 template"),),
                       calibration=Calibration(INTERPRETER_GPU, 8.465, {"fp8_e4m3": 0.089}))
    d = plan(ev).actions[-1]
    assert isinstance(d, Decide) and d.decision.verdict == Verdict.LIBRARY_SUFFICIENT
    assert d.decision.roofline is None
    assert d.decision.rationale.startswith("no roofline (cpu-interpreter is the CPU")
    assert "torch CPU matmul takes 75.7 us (no roofline to judge it by)" in d.decision.rationale


def test_backends_are_named_for_what_runs_them_on_the_cpu() -> None:
    cpu, gpu = GEMM.roles_on(INTERPRETER_GPU), GEMM.roles_on("NVIDIA H100 80GB HBM3")
    assert cpu.label("cublas") == "torch CPU matmul" and cpu.baseline_label == "torch CPU matmul"
    assert gpu.label("cublas") == "cublas" and gpu.baseline_label == "cuBLAS"
    assert GEMM.label("cublas", INTERPRETER_GPU) == "torch CPU matmul"
    assert ATTENTION.label("sdpa_math", INTERPRETER_GPU) == "torch CPU math SDPA"
    assert ATTENTION.label("sdpa_cudnn", "NVIDIA H100 80GB HBM3") == "sdpa_cudnn"


# -- a GPU's roofline ---------------------------------------------------------------------------
def test_a_time_far_under_the_floor_refutes_it_and_the_job_searches() -> None:
    """A library at half the floor's time: the calibration underestimates the device; the old
    loop read it as "100% of the attainable" and stopped at verdict 1."""
    attainable = roofline(problem_of(SQUARE), H100_REPLAY_CALIBRATION).attainable_us
    d = run_shape(SQUARE, Policy(), library_us=0.5 * attainable)
    assert d.verdict != Verdict.LIBRARY_SUFFICIENT and d.spend["custom"]["trials"] > 0
    assert d.library is not None and d.library.efficiency is None
    assert f"50% under the {attainable:.1f} us the roofline allows" in d.rationale
    assert "efficiency is unknown" in d.rationale and "refresh the calibration" in d.rationale
    assert "100% of the attainable" not in d.rationale


def test_a_time_a_little_under_the_floor_is_at_the_roofline() -> None:
    attainable = roofline(problem_of(SQUARE), H100_REPLAY_CALIBRATION).attainable_us
    us = attainable * (1 - FLOOR_SLACK / 2)
    d = run_shape(SQUARE, Policy(), library_us=us)
    assert d.verdict == Verdict.LIBRARY_SUFFICIENT
    assert d.library is not None and d.library.efficiency == 1.0
    assert f"cublas takes {us:.1f} us, at the roofline (5% under its {attainable:.1f} us" \
        in d.rationale
    assert "100% of the attainable" not in d.rationale


@pytest.mark.parametrize("fraction", [0.5, 0.8, 1.0, 1.25])
def test_a_share_never_exceeds_what_the_times_say(fraction: float) -> None:
    rf = roofline(problem_of(SQUARE), H100_REPLAY_CALIBRATION)
    assert rf is not None
    text = rationale.share(rf, rf.attainable_us * fraction)
    if fraction >= 1.0:
        assert text == f"{1 / fraction:.0%} of the attainable"
    else:
        assert "of the attainable" not in text and "under" in text


def test_a_share_just_under_the_threshold_never_reads_as_the_threshold() -> None:
    # seen on an H100: "45.1 us (90% of the attainable, under the 90% threshold)"
    rf = roofline(problem_of(SQUARE), H100_REPLAY_CALIBRATION)
    assert rf is not None
    us = rf.attainable_us / 0.8996
    assert rationale.share(rf, us, 0.9) == "89.9% of the attainable"
    assert rationale.share(rf, us) == "90% of the attainable"  # no threshold: plain rounding
    assert rationale.share(rf, rf.attainable_us / 0.85, 0.9) == "85% of the attainable"
    assert rationale.share(rf, rf.attainable_us / 0.9, 0.9) == "90% of the attainable"
    d = run_shape(SQUARE, Policy(threshold=0.9), library_us=us)
    assert "(89.9% of the attainable, under the 90% threshold)" in d.rationale


def test_a_small_peak_keeps_its_digits() -> None:
    rf = roofline(CPU_PROBLEM, Calibration("a small device", 8.465, {"fp16": 0.0028146}))
    text = rationale.roofline(rf)
    assert "at 0.00281 TFLOP/s" in text and "at 8.46 GB/s" in text
    assert "at 0 TFLOP/s" not in text
