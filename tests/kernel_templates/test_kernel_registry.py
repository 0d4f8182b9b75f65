"""Backend registry: names map to implementations; what a backend cannot serve is unsupported."""

from __future__ import annotations

import pytest
import torch

from kernel_templates.errors import Unsupported
from kernel_templates.inputs import make_inputs
from kernel_templates.library import cublas_matmul
from kernel_templates.reference import reference_matmul, rel_error
from kernel_templates.registry import BACKENDS, check_supported, make_callable
from search.types import Candidate, GemmProblem

CFG = dict(BLOCK_M=16, BLOCK_N=32, BLOCK_K=16, GROUP_M=1, SPLIT_K=2, num_warps=4, num_stages=2)


@pytest.mark.parametrize(("backend", "config"), [("cublas", {}), ("triton", CFG)])
def test_callable_writes_the_output(backend: str, config: dict, device: str) -> None:
    p = GemmProblem(m=24, n=40, k=64, dtype="fp32", layout_a="col")
    inp = make_inputs(p, device, 0)
    fn = make_callable(Candidate(problem=p, backend=backend, config=config), inp)
    fn()
    assert rel_error(inp.out, reference_matmul(inp.a, inp.b)) < 1e-5


def test_unknown_backend_and_row_major_b_fp8_are_unsupported() -> None:
    p = GemmProblem(m=8, n=8, k=8, dtype="fp32")
    with pytest.raises(Unsupported, match="unknown backend"):
        check_supported("rocblas", p)
    # fp8 is served "TN" only (tests/kernel_templates/test_fp8.py serves it)
    for backend in BACKENDS:
        with pytest.raises(Unsupported):
            check_supported(backend, GemmProblem(m=16, n=16, k=16, dtype="fp8_e4m3"))


def test_cublas_serves_input_dtype_output_only() -> None:
    with pytest.raises(Unsupported):
        check_supported("cublas", GemmProblem(m=8, n=8, k=8, dtype="fp16", out_dtype="fp32"))
    check_supported("triton", GemmProblem(m=8, n=8, k=8, dtype="fp16", out_dtype="fp32"))
    a = torch.randn(4, 4)
    with pytest.raises(Unsupported):
        cublas_matmul(a, a, out=torch.empty(4, 4, dtype=torch.float64))
    assert torch.allclose(cublas_matmul(a, a), a @ a)


# -- cutlass ----------------------------------------------------------------------------------
def test_cutlass_refuses_what_it_cannot_serve_with_the_reason() -> None:
    pytest.importorskip("cutlass_library")
    with pytest.raises(Unsupported, match="fp32 inputs as tf32"):
        check_supported("cutlass", GemmProblem(m=64, n=64, k=64, dtype="fp32"))
    # A row-major with k = 63: no CUTLASS alignment divides the contiguous extent
    with pytest.raises(Unsupported, match="alignment"):
        check_supported("cutlass", GemmProblem(m=64, n=64, k=63, dtype="fp16"))
    check_supported("cutlass", GemmProblem(m=64, n=64, k=64, dtype="fp16"))


def test_cutlass_without_the_extra_is_unsupported(monkeypatch: pytest.MonkeyPatch) -> None:
    import kernel_templates.cutlass.enumerate as en

    monkeypatch.setattr(en, "cutlass_available", lambda: "cutlass_library is not installed")
    with pytest.raises(Unsupported, match="cutlass_library is not installed"):
        check_supported("cutlass", GemmProblem(m=64, n=64, k=64, dtype="fp16"))


def test_cutlass_needs_a_cuda_tensor() -> None:
    pytest.importorskip("cutlass_library")
    p = GemmProblem(m=64, n=64, k=64, dtype="fp16")
    inp = make_inputs(p, "cpu", 0)
    cfg = {"op": "x", "raster": "heuristic", "swizzle": 1, "splits": 1}
    with pytest.raises(Unsupported, match="CUDA GPU"):
        make_callable(Candidate(problem=p, backend="cutlass", config=cfg), inp)
