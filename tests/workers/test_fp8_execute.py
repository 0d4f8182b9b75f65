"""fp8 candidates through ``execute``: scaled inputs, the dequantised reference, the check."""

from __future__ import annotations

import pytest
import torch

from kernel_templates import registry
from search.kinds.gemm.spec import GemmProblem
from search.types import Candidate, Measurement, Status
from workers.execute import execute

CUDA = torch.cuda.is_available()
OPTS = {"interpret": not CUDA, "target_ms": 5.0, "warmup_ms": 1.0}
FP8 = GemmProblem(m=40, n=48, k=96, dtype="fp8_e4m3", layout_b="col")


TILE = dict(BLOCK_M=16, BLOCK_N=32, BLOCK_K=32, GROUP_M=1, SPLIT_K=1, num_warps=4, num_stages=2)


def run(backend: str, config: dict | None = None, problem: GemmProblem = FP8) -> Measurement:
    cand = Candidate(problem=problem, backend=backend, config=config or {})
    return Measurement.from_dict(execute(cand.to_dict(), OPTS))


def test_cublas_fp8_runs_scaled_mm_and_passes_the_check() -> None:
    m = run("cublas")
    if m.status == Status.LAUNCH_ERROR and not CUDA:
        pytest.skip(f"no CPU torch._scaled_mm in this torch: {m.error}")
    assert m.status == Status.OK, m.error
    assert m.rel_error is not None and 0 < m.rel_error <= 1e-2
    assert m.median_us is not None and m.median_us > 0


def test_a_kernel_that_ignores_the_scales_is_a_wrong_result(
        monkeypatch: pytest.MonkeyPatch) -> None:
    def unscaled(candidate: Candidate, inputs: object) -> object:
        a, b, out = inputs.a, inputs.b, inputs.out  # type: ignore[attr-defined]
        return lambda: out.copy_(a.float() @ b.float())

    registry.backends("gemm")  # load the built-in GEMM kernels, then replace one
    monkeypatch.setitem(registry.FACTORIES, ("gemm", "cublas"), unscaled)
    m = run("cublas")
    assert m.status == Status.WRONG_RESULT and m.rel_error is not None and m.rel_error > 0.5


def test_triton_fp8_runs_its_fp8_template_and_passes_the_check() -> None:
    fp8_tile = {k: v for k, v in TILE.items() if k != "SPLIT_K"}
    m = run("triton", fp8_tile)
    assert m.status == Status.OK, m.error
    assert m.rel_error is not None and 0 < m.rel_error <= 1e-2
    # the tiled template's keys are not the fp8 template's: invalid, naming the key
    bad = run("triton", TILE)
    assert bad.status == Status.INVALID and "SPLIT_K" in (bad.error or "")
