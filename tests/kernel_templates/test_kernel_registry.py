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


def test_unknown_backend_and_fp8_are_unsupported() -> None:
    p = GemmProblem(m=8, n=8, k=8, dtype="fp32")
    with pytest.raises(Unsupported):
        check_supported("cutlass", p)
    for backend in BACKENDS:
        with pytest.raises(Unsupported):
            check_supported(backend, GemmProblem(m=8, n=8, k=8, dtype="fp8_e4m3"))


def test_cublas_serves_input_dtype_output_only() -> None:
    with pytest.raises(Unsupported):
        check_supported("cublas", GemmProblem(m=8, n=8, k=8, dtype="fp16", out_dtype="fp32"))
    check_supported("triton", GemmProblem(m=8, n=8, k=8, dtype="fp16", out_dtype="fp32"))
    a = torch.randn(4, 4)
    with pytest.raises(Unsupported):
        cublas_matmul(a, a, out=torch.empty(4, 4, dtype=torch.float64))
    assert torch.allclose(cublas_matmul(a, a), a @ a)
