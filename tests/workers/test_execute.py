"""``execute`` end to end in-process (interpreter on CPU) and the one exception classifier."""

from __future__ import annotations

import pytest
import torch
from triton.compiler.errors import CompilationError
from triton.runtime.errors import OutOfResources

from kernel_templates import registry
from kernel_templates.errors import InvalidConfig, Unsupported
from search.kinds.gemm.spec import GemmProblem
from search.types import Candidate, Measurement, Status
from workers.execute import classify, execute

GOOD = dict(BLOCK_M=16, BLOCK_N=32, BLOCK_K=16, GROUP_M=1, SPLIT_K=2, num_warps=4, num_stages=2)
PROBLEM = GemmProblem(m=33, n=40, k=64, dtype="fp16")
OPTS = {"interpret": not torch.cuda.is_available(), "target_ms": 5.0, "warmup_ms": 1.0}


def run(backend: str, config: dict, problem: GemmProblem = PROBLEM, **opts) -> Measurement:
    cand = Candidate(problem=problem, backend=backend, config=config)
    return Measurement.from_dict(execute(cand.to_dict(), {**OPTS, **opts}))


@pytest.mark.parametrize(("backend", "config"), [("triton", GOOD), ("cublas", {})])
def test_good_candidate_is_ok_and_timed(backend: str, config: dict) -> None:
    m = run(backend, config)
    assert m.status == Status.OK, m.error
    assert m.median_us > 0 and m.p20_us <= m.median_us <= m.p80_us and m.reps >= 3
    assert m.rel_error is not None and m.rel_error < 2e-3
    assert m.compile_s is not None and m.bench_s is not None
    assert m.env["mode"] in ("cuda", "interpreter") and "seed" in m.env


def test_fresh_seed_per_candidate() -> None:
    assert run("cublas", {}).env["seed"] != run("cublas", {}).env["seed"]


def test_statically_infeasible_is_invalid() -> None:
    m = run("triton", {**GOOD, "BLOCK_M": 24})
    assert m.status == Status.INVALID and "power of two" in m.error
    assert run("triton", {"BLOCK_M": 16}).status == Status.INVALID


def test_unsupported() -> None:
    assert run("rocblas", {}).status == Status.UNSUPPORTED
    fp8 = GemmProblem(m=16, n=32, k=32, dtype="fp8_e4m3")
    assert run("triton", GOOD, problem=fp8).status == Status.UNSUPPORTED


def test_wrong_result_is_caught_and_not_timed(monkeypatch: pytest.MonkeyPatch) -> None:
    def sloppy(candidate, inputs):
        def call():
            full = torch.matmul(inputs.a, inputs.b)
            inputs.out.view(-1)[1:] = full.view(-1)[1:]  # element 0 stays NaN
            return inputs.out
        return call

    registry.backends("gemm")  # load the built-in GEMM kernels, then replace one
    monkeypatch.setitem(registry.FACTORIES, ("gemm", "cublas"), sloppy)
    m = run("cublas", {})
    assert m.status == Status.WRONG_RESULT and m.median_us is None and m.reps == 0
    assert m.rel_error == float("inf")


def test_a_call_that_says_what_it_resolved_to_is_recorded(monkeypatch: pytest.MonkeyPatch
                                                          ) -> None:
    # a library call picking its kernel at run time (cuBLASLt's rank -> algorithm) names it
    def resolving(candidate, inputs):
        def call():
            return torch.matmul(inputs.a, inputs.b, out=inputs.out)
        call.resolved = {"algo_id": 66, "describe": "algo 66, tile 400 (128x80)"}
        return call

    registry.backends("gemm")
    assert run("cublas", {}).extra == {}  # a call that names nothing records nothing
    monkeypatch.setitem(registry.FACTORIES, ("gemm", "cublas"), resolving)
    m = run("cublas", {})
    assert m.status == Status.OK, m.error
    assert m.extra["resolved"] == {"algo_id": 66, "describe": "algo 66, tile 400 (128x80)"}


def test_classify() -> None:
    assert classify(Unsupported("x")) == Status.UNSUPPORTED
    assert classify(InvalidConfig("x")) == Status.INVALID
    assert classify(OutOfResources(300000, 232448, "shared memory")) == Status.INVALID
    assert classify(OutOfResources(300, 255, "registers")) == Status.COMPILE_ERROR
    assert classify(CompilationError("src", None, "boom")) == Status.COMPILE_ERROR
    assert classify(torch.cuda.OutOfMemoryError("CUDA out of memory")) == Status.OOM
    illegal = RuntimeError("CUDA error: an illegal memory access was encountered")
    assert classify(illegal) == Status.CRASHED
    assert classify(RuntimeError("Triton Error [CUDA]: invalid argument")) == Status.LAUNCH_ERROR


@pytest.mark.gpu
def test_gpu_statuses() -> None:
    huge = dict(BLOCK_M=256, BLOCK_N=256, BLOCK_K=256, GROUP_M=1, SPLIT_K=1, num_warps=8,
                num_stages=6)
    p = GemmProblem(m=512, n=512, k=512, dtype="bf16")
    # Statically rejected (shared memory), so it never reaches the compiler...
    assert run("triton", huge, problem=p).status == Status.INVALID
    # ... and when the static check is skipped the compiler's refusal is classified too.
    m = run("triton", huge, problem=p, check_constraints=False)
    assert m.status in (Status.INVALID, Status.COMPILE_ERROR), m.error


# -- cutlass ----------------------------------------------------------------------------------
CUTLASS_CFG = {"op": "none", "raster": "heuristic", "swizzle": 1, "splits": 1}


def test_cutlass_is_a_clear_status_never_an_exception() -> None:
    m = run("cutlass", CUTLASS_CFG)
    if OPTS["interpret"]:
        assert m.status == Status.UNSUPPORTED and "CUDA GPU" in m.error, m.error
    else:  # a GPU host: the made-up op is refused before anything compiles
        assert m.status in (Status.INVALID, Status.UNSUPPORTED), m.error
    fp32 = run("cutlass", CUTLASS_CFG, problem=GemmProblem(m=32, n=32, k=32, dtype="fp32"))
    assert fp32.status == Status.UNSUPPORTED and "tf32" in fp32.error


def test_cutlass_errors_are_classified() -> None:
    from kernel_templates.gemm.cutlass import CompileError

    assert classify(CompileError("nvcc failed (1) for 1 op(s): x")) == Status.COMPILE_ERROR
    assert classify(CompileError("nvcc is not usable")) == Status.COMPILE_ERROR
    from kernel_templates.gemm.cutlass.runtime import CutlassError

    assert classify(CutlassError("op", 7, "launch")) == Status.LAUNCH_ERROR
