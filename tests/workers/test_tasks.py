"""The calibration and verification tasks through ``execute`` (interpreter on CPU, real on GPU:
the same tests run on both; the GPU host runs them with ``-m gpu`` selected by file)."""

from __future__ import annotations

import pytest
import torch

from search.kinds.gemm.spec import GemmProblem
from search.types import Candidate, Measurement, Status
from workers.execute import execute

CUDA = torch.cuda.is_available()
OPTS = {"interpret": not CUDA, "target_ms": 5.0, "warmup_ms": 1.0}
PROBLEM = GemmProblem(m=33, n=40, k=64, dtype="fp16")
TILE = dict(BLOCK_M=16, BLOCK_N=32, BLOCK_K=16, GROUP_M=1, SPLIT_K=1, num_warps=4, num_stages=2)


def run(task: str, config: dict, problem: GemmProblem = PROBLEM) -> Measurement:
    cand = Candidate.of_task(problem, task, config)
    return Measurement.from_dict(execute(cand.to_dict(), OPTS))


@pytest.mark.parametrize("where", [pytest.param("cuda", marks=pytest.mark.gpu), "any"])
def test_calibration_measures_bandwidth_and_every_precision(where: str) -> None:
    m = run("calibrate", {})
    assert m.status == Status.OK, m.error
    peaks = m.extra["peak_tflops"]
    # fp8 wherever torch._scaled_mm runs: an H100, and torch 2.13's CPU build
    fp8 = {"fp8_e4m3"} if _scaled_mm_runs() else set()
    assert set(peaks) == {"bf16", "fp16", "fp32", "tf32"} | fp8
    assert all(v > 0 for v in peaks.values())
    assert m.extra["bandwidth_gbs"] > 0 and m.bench_s and m.bench_s > 0
    # each precision's peak is the best point of its sustained curve (one point per shape:
    # the median of its passes), and the lowest pass of that shape is kept beside it
    shapes = [tuple(s) for s in m.extra["peak_shapes"]]
    passes = m.extra["passes"]
    assert passes == (3 if CUDA else 1)
    for name, peak in peaks.items():
        points = m.extra["curve"][name]
        assert peak == max(t for _, t in points)
        want = shapes[:1] if name == "fp32" else shapes
        assert [f for f, _ in points] == [2 * a * b * c for a, b, c in want]
        runs = dict((f, ts) for f, ts in m.extra["curve_passes"][name])
        assert all(len(ts) == passes for ts in runs.values())
        assert m.extra["peak_low_tflops"][name] == min(runs[max(points, key=lambda p: p[1])[0]])
        assert 0 < m.extra["peak_low_tflops"][name] <= peak
        assert m.extra["burst_tflops"][name] > 0
    if CUDA:  # an H100-class device: HBM in TB/s, tensor cores in hundreds of TFLOP/s
        assert m.extra["bandwidth_gbs"] > 500 and peaks["bf16"] > 5 * peaks["fp32"]
        assert peaks["fp8_e4m3"] > 1.3 * peaks["bf16"]  # fp8 tensor cores: twice bf16's rate
        assert m.extra["sustain_ms"] >= 100 and len(m.extra["curve"]["bf16"]) == 3
        # the passes agree within what the H100 showed (749-797 TFLOP/s over five passes)
        assert m.extra["peak_low_tflops"]["bf16"] > 0.85 * peaks["bf16"]


def test_calibration_passes_are_a_setting_within_bounds() -> None:
    m = run("calibrate", {"passes": 2})
    assert m.status == Status.OK, m.error
    assert m.extra["passes"] == 2
    assert all(len(ts) == 2 for _, ts in m.extra["curve_passes"]["fp32"])
    for bad in (0, 10, "x", 1.5):
        m = run("calibrate", {"passes": bad})
        assert m.status == Status.INVALID and "passes" in (m.error or ""), bad


def _scaled_mm_runs() -> bool:
    f8 = torch.float8_e4m3fn
    dev = "cuda" if CUDA else "cpu"
    one = torch.ones((), device=dev)
    try:
        torch._scaled_mm(torch.zeros(16, 16, device=dev).to(f8),
                         torch.zeros(16, 16, device=dev).to(f8).t(), scale_a=one, scale_b=one,
                         out_dtype=torch.bfloat16)
    except (RuntimeError, NotImplementedError):
        return False
    return True


def test_calibration_skips_the_fp8_peak_where_scaled_mm_does_not_run(
        monkeypatch: pytest.MonkeyPatch) -> None:
    def no_fp8(*args: object, **kwargs: object) -> torch.Tensor:
        raise RuntimeError("_scaled_mm_out: not implemented for this device (FAKE)")

    monkeypatch.setattr(torch, "_scaled_mm", no_fp8)
    m = run("calibrate", {})
    assert m.status == Status.OK, m.error
    assert set(m.extra["peak_tflops"]) == {"bf16", "fp16", "fp32", "tf32"}
    assert "FAKE" in m.extra["peaks_skipped"]["fp8_e4m3"]


def test_sustained_timing_runs_back_to_back_between_the_cold_and_the_hot_timing() -> None:
    from workers.bench import Timing
    from workers.tasks import _Sustained

    calls: list[str] = []
    times = iter([100.0, 125.0])  # FAKE bench: cold 100 us, then 125 us once "throttled"

    def bench(fns: list) -> Timing:
        calls.append("bench")
        return Timing(next(times), 0.0, 0.0, 1, 0.0, "fake")

    sustained = _Sustained(bench, sustain_ms=2.0)
    sustained("bf16", (1000, 1000, 500), lambda: calls.append("run"))  # 10^9 flops
    # 2 ms of 100 us calls between the two timings; TFLOP/s from each timing
    assert calls == ["bench"] + ["run"] * 20 + ["bench"]
    assert sustained.burst == {"bf16": pytest.approx(10.0)}
    assert sustained.curve() == {"bf16": [[10**9, pytest.approx(8.0)]]}
    assert sustained.peaks() == {"bf16": pytest.approx(8.0)}
    assert sustained.lows() == {"bf16": pytest.approx(8.0)}  # one pass: the peak itself


def test_the_peak_is_the_best_shapes_median_over_passes_and_its_lowest_pass_is_kept() -> None:
    from workers.bench import Timing
    from workers.tasks import _Sustained

    # FAKE sustained timings (us) of two shapes of 10^9 and 2x10^9 flops over three passes:
    # the big shape reads 10, 8, 9 TFLOP/s, the small one 10, 7.5, 7 (an outlier first pass)
    hot = iter([100.0, 2 * 100.0, 1000 / 7.5, 2 * 125.0, 1000 / 7, 2 * 1000 / 9])
    small, big = (1000, 1000, 500), (1000, 1000, 1000)
    sustained = _Sustained(lambda fns: Timing(next(hot), 0.0, 0.0, 1, 0.0, "fake"), 0.0)
    for _ in range(3):
        sustained("bf16", small, lambda: None)
        sustained("bf16", big, lambda: None)
    assert [f for f, _ in sustained.curve()["bf16"]] == [10**9, 2 * 10**9]
    assert sustained.curve_passes()["bf16"][1][1] == pytest.approx([10.0, 8.0, 9.0])
    assert sustained.peaks() == {"bf16": pytest.approx(9.0)}  # big: median of 10, 8, 9
    assert sustained.lows() == {"bf16": pytest.approx(8.0)}  # and its lowest pass
    assert sustained.curve()["bf16"][0][1] == pytest.approx(7.5)  # small: median of 10, 7.5, 7


def _verify_config(custom: dict) -> dict:
    return {"library": {"backend": "cublas", "config": {}},
            "custom": {"backend": "triton", "config": custom}, "rounds": 5,
            "library_id": 1, "custom_id": 2}


@pytest.mark.parametrize("where", [pytest.param("cuda", marks=pytest.mark.gpu), "any"])
def test_verification_rechecks_and_times_both_interleaved(where: str) -> None:
    m = run("verify", _verify_config(TILE))
    assert m.status == Status.OK, m.error
    assert len(m.extra["library_us"]) == len(m.extra["custom_us"]) == 5
    assert all(t > 0 for t in m.extra["library_us"] + m.extra["custom_us"])
    assert m.extra["custom_rel_error"] < 2e-3 and m.extra["library_rel_error"] < 2e-3
    # each round times at most verify_max_reps calls (a few-us kernel would get 500 otherwise)
    assert len(m.extra["round_reps"]) == 10
    assert all(1 <= r <= 100 for r in m.extra["round_reps"])
    if CUDA:
        assert max(m.extra["round_reps"]) == 100


@pytest.mark.parametrize("where", [pytest.param("cuda", marks=pytest.mark.gpu), "any"])
def test_verification_times_cublas_as_the_reference_in_the_same_rounds(where: str) -> None:
    config = {**_verify_config(TILE), "library": {"backend": "triton", "config": TILE},
              "reference": {"backend": "cublas", "config": {}}, "reference_id": 3}
    m = run("verify", config)
    assert m.status == Status.OK, m.error
    for side in ("library", "custom", "reference"):
        assert len(m.extra[f"{side}_us"]) == 5 and all(t > 0 for t in m.extra[f"{side}_us"])
        assert m.extra[f"{side}_rel_error"] < 2e-3
    assert len(m.extra["round_reps"]) == 15 and "reference" in m.extra["order"]


@pytest.mark.parametrize("where", [pytest.param("cuda", marks=pytest.mark.gpu), "any"])
def test_a_library_confirmation_times_the_pick_and_cublas_only(where: str) -> None:
    config = {"library": {"backend": "triton", "config": TILE},
              "reference": {"backend": "cublas", "config": {}}, "rounds": 5,
              "library_id": 2, "reference_id": 1}
    m = run("verify", config)
    assert m.status == Status.OK, m.error
    assert "custom_us" not in m.extra and len(m.extra["round_reps"]) == 10
    for side in ("library", "reference"):
        assert len(m.extra[f"{side}_us"]) == 5 and all(t > 0 for t in m.extra[f"{side}_us"])
        assert m.extra[f"{side}_rel_error"] < 2e-3
    # the measurement's own median is the pick's
    assert m.median_us == sorted(m.extra["library_us"])[2]


def _sloppy(candidate, inputs):
    """A GEMM factory that leaves element 0 of the (poisoned) output unwritten."""
    def call():
        full = torch.matmul(inputs.a, inputs.b)
        inputs.out.view(-1)[1:] = full.view(-1)[1:]
        return inputs.out
    return call


def test_a_pick_wrong_on_the_confirmations_recheck_fails_it(
        monkeypatch: pytest.MonkeyPatch) -> None:
    from kernel_templates import registry

    registry.backends("gemm")  # load the built-in GEMM kernels, then replace one
    monkeypatch.setitem(registry.FACTORIES, ("gemm", "cutlass"), _sloppy)
    config = {"library": {"backend": "cutlass", "config": {}},
              "reference": {"backend": "cublas", "config": {}}, "rounds": 5,
              "library_id": 2, "reference_id": 1}
    m = run("verify", config)
    assert m.status == Status.WRONG_RESULT and m.median_us is None
    assert "library (cutlass)" in (m.error or "")


def test_verification_times_the_runners_up_in_the_same_rotating_rounds() -> None:
    from workers import tasks
    from workers.bench import Timing

    calls = iter(range(1, 100))  # FAKE bench: the n-th timing reads n us

    def bench(fns: list) -> Timing:
        return Timing(float(next(calls)), 0.0, 0.0, 1, 0.0, "fake")

    other = {**TILE, "BLOCK_N": 16}
    config = {**_verify_config(TILE), "runners_up": [{"id": 7, "backend": "triton",
                                                      "config": other}]}
    m = tasks.verify(Candidate.of_task(PROBLEM, "verify", config), {}, bench, CUDA, n_sets=1,
                     seed=7)
    assert m.status == Status.OK, m.error
    # rounds: L C R7, C R7 L, R7 L C, L C R7, C R7 L
    assert m.extra["library_us"] == [1, 6, 8, 10, 15]
    assert m.extra["custom_us"] == [2, 4, 9, 11, 13]
    [runner] = m.extra["runners_up"]
    assert runner["id"] == 7 and runner["us"] == [3, 5, 7, 12, 14]
    assert runner["rel_error"] < 2e-3 and "runner_up_7" in m.extra["order"]
    assert "runners_up_dropped" not in m.extra and "runner_up_7_us" not in m.extra
    assert m.median_us == 9  # the measurement's own median is still the custom side's


def test_a_runner_up_wrong_on_the_recheck_leaves_the_runoff_not_the_verification(
        monkeypatch: pytest.MonkeyPatch) -> None:
    from kernel_templates import registry

    registry.backends("gemm")
    monkeypatch.setitem(registry.FACTORIES, ("gemm", "cutlass"), _sloppy)
    config = {**_verify_config(TILE), "runners_up": [
        {"id": 8, "backend": "cutlass", "config": {}},
        {"id": 9, "backend": "triton", "config": {**TILE, "BLOCK_N": 16}}]}
    m = run("verify", config)
    assert m.status == Status.OK, m.error
    assert [r["id"] for r in m.extra["runners_up"]] == [9]
    assert len(m.extra["runners_up"][0]["us"]) == 5
    [dropped] = m.extra["runners_up_dropped"]
    assert dropped["id"] == 8 and "rel_error" in dropped["reason"]


def test_rounds_after_the_first_are_timed_with_the_rewarmed_bench(
        monkeypatch: pytest.MonkeyPatch) -> None:
    import workers.execute as ex
    from workers import tasks
    from workers.bench import Timing

    used: list[str] = []

    def bench(name: str):
        def call(fns: list) -> Timing:
            used.append(name)
            return Timing(10.0, 10.0, 10.0, 1, 0.0, "fake")
        return call

    cand = Candidate.of_task(PROBLEM, "verify", _verify_config(TILE))
    m = tasks.verify(cand, {}, bench("first"), CUDA, n_sets=1, seed=7,
                     rewarmed=bench("later"))
    assert m.status == Status.OK, m.error
    assert used == ["first"] * 2 + ["later"] * 8  # two contenders, five rounds
    # the worker hands verify a copy of its bench with the short warm-up
    seen: list = []
    real = tasks.verify

    def spy(*args, **kw):
        seen.extend([args[2], args[6]])
        return real(*args, **kw)

    monkeypatch.setattr(tasks, "verify", spy)
    cand = Candidate.of_task(PROBLEM, "verify", _verify_config(TILE))
    opts = {**OPTS, "warmup_ms": 20.0, "verify_rewarm_ms": 2.0}
    assert Measurement.from_dict(ex.execute(cand.to_dict(), opts)).status == Status.OK
    first, later = seen
    assert later is not None and later is not first
    if CUDA:
        assert (first.warmup_ms, later.warmup_ms) == (20.0, 2.0)


def test_verification_rotates_the_order_of_the_contenders_round_by_round() -> None:
    from workers import tasks
    from workers.bench import Timing

    calls = iter(range(1, 100))  # FAKE bench: the n-th timing reads n us

    def bench(fns: list) -> Timing:
        return Timing(float(next(calls)), 0.0, 0.0, 1, 0.0, "fake")

    config = {**_verify_config(TILE), "reference": {"backend": "cublas", "config": {}}}
    cand = Candidate.of_task(PROBLEM, "verify", config)
    m = tasks.verify(cand, {}, bench, CUDA, n_sets=1, seed=7)
    assert m.status == Status.OK, m.error
    # rounds: L C R, C R L, R L C, L C R, C R L
    assert m.extra["library_us"] == [1, 6, 8, 10, 15]
    assert m.extra["custom_us"] == [2, 4, 9, 11, 13]
    assert m.extra["reference_us"] == [3, 5, 7, 12, 14]
    # two contenders alternate as before: L C, C L, ...
    calls = iter(range(1, 100))
    m2 = tasks.verify(Candidate.of_task(PROBLEM, "verify", _verify_config(TILE)),
                      {}, bench, CUDA, n_sets=1, seed=7)
    assert m2.extra["library_us"] == [1, 4, 5, 8, 9] and "reference_us" not in m2.extra


def test_verification_rounds_are_timed_under_the_verify_rep_cap(
        monkeypatch: pytest.MonkeyPatch) -> None:
    import workers.execute as ex

    seen: list[tuple[int, int]] = []
    real = ex._bench

    def spy(opts: ex.ExecuteOptions, cuda: bool) -> object:
        seen.append((opts.max_reps, opts.min_reps))
        return real(opts, cuda)

    monkeypatch.setattr(ex, "_bench", spy)
    cand = Candidate.of_task(PROBLEM, "verify", _verify_config(TILE))
    m = Measurement.from_dict(execute(cand.to_dict(), {**OPTS, "verify_max_reps": 40}))
    assert m.status == Status.OK, m.error
    assert seen == [(40, 10)]
    # a search measurement keeps the full cap
    seen.clear()
    execute(Candidate(PROBLEM, "triton", TILE).to_dict(), OPTS)
    assert seen == [(500, 10)]


def test_verification_fails_clearly_on_a_contender_it_cannot_run() -> None:
    # (a wrong result on the re-check is the agent's business: tests/search/test_agent.py)
    m = run("verify", {**_verify_config(TILE), "custom": {"backend": "nope", "config": {}}})
    assert m.status == Status.UNSUPPORTED and "nope" in (m.error or "")
    bad = run("verify", {"rounds": 5})
    assert bad.status == Status.INVALID and "library.backend" in (bad.error or "")


def test_the_child_dispatches_on_the_task_not_the_backend() -> None:
    unknown = run("defragment", {})
    assert unknown.status == Status.INVALID and "defragment" in (unknown.error or "")
    # a task's name in the backend field is no task: the old wire form is refused as a kernel
    legacy = Measurement.from_dict(execute(
        Candidate(PROBLEM, "calibrate").to_dict(), OPTS))
    assert legacy.status == Status.UNSUPPORTED and not legacy.extra
