"""Kernel registry: (kind, backend) maps to implementations; what a backend cannot serve is
unsupported; a kind registered from outside runs through the same check."""

from __future__ import annotations

from dataclasses import dataclass

import pytest
import torch

from kernel_templates.errors import Unsupported
from kernel_templates.gemm.cublas import cublas_matmul
from kernel_templates.gemm.inputs import make_inputs
from kernel_templates.gemm.reference import reference_matmul, rel_error
from kernel_templates.registry import KernelKind, backends, check_supported, make_callable
from search.kinds.gemm.spec import GemmProblem
from search.types import Candidate

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
    for backend in backends("gemm"):
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
    import kernel_templates.gemm.cutlass.enumerate as en

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


# -- a kind registered from outside: no GEMM code involved -----------------------------------
@dataclass(frozen=True)
class _Scale:
    """A toy problem kind: ``out = 2 * x`` of ``n`` floats."""

    n: int
    kind: str = "toy_scale"


@dataclass
class _ScaleInputs:
    x: torch.Tensor
    out: torch.Tensor


def _toy_kind() -> KernelKind:
    def make(problem: _Scale, device: str, seed: int) -> _ScaleInputs:
        gen = torch.Generator(device=device).manual_seed(seed)
        x = torch.randn(problem.n, generator=gen, device=device)
        return _ScaleInputs(x, torch.full_like(x, float("nan")))

    return KernelKind("toy_scale", make_inputs=make,
                      reference=lambda problem, inp: 2 * inp.x.double(), rel_error=rel_error,
                      tolerance=lambda problem, config: 1e-6)


def test_a_new_kind_registers_and_runs_through_the_shared_check(
        monkeypatch: pytest.MonkeyPatch) -> None:
    from kernel_templates import registry
    from workers.checking import checked_calls, fresh_inputs

    monkeypatch.setitem(registry.KINDS, "toy_scale", _toy_kind())
    monkeypatch.setitem(registry.FACTORIES, ("toy_scale", "torch"),
                        lambda cand, inp: lambda: torch.mul(inp.x, 2, out=inp.out))
    monkeypatch.setitem(registry.FACTORIES, ("toy_scale", "forgetful"),
                        lambda cand, inp: lambda: inp.out[1:].copy_(2 * inp.x[1:]))
    problem = _Scale(n=37)
    assert registry.backends("toy_scale") == ("forgetful", "torch")
    with pytest.raises(Unsupported, match="unknown backend 'triton'"):
        check_supported("triton", problem)
    sets, ref = fresh_inputs(problem, "cpu", seed=3, n_sets=2)
    assert not torch.equal(sets[0].x, sets[1].x)  # fresh inputs per set
    toy = Candidate(problem, "torch")  # type: ignore[arg-type]
    _, err, tol = checked_calls(toy, sets, ref, cuda=False)
    assert err <= tol
    # the output is poisoned before the run, so the element the kernel forgets fails
    forgetful = Candidate(problem, "forgetful")  # type: ignore[arg-type]
    _, err, _ = checked_calls(forgetful, sets, ref, cuda=False)
    assert err == float("inf")


def test_an_unknown_kind_is_unsupported() -> None:
    with pytest.raises(Unsupported, match="no kernels for problem kind 'nope'"):
        check_supported("torch", _Scale(n=1, kind="nope"))
