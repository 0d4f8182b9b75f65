"""The correctness check itself: error measure, tolerances, poisoned outputs."""

from __future__ import annotations

import math

import torch

from kernel_templates.gemm.inputs import make_inputs
from kernel_templates.gemm.reference import reference_matmul, rel_error, tolerance
from search.kinds.gemm.spec import GemmProblem


def test_rel_error_basic() -> None:
    ref = torch.ones(4, 4, dtype=torch.float64)
    assert rel_error(ref.clone(), ref) == 0.0
    assert math.isclose(rel_error(ref * 1.01, ref), 0.01, rel_tol=1e-9)


def test_nan_or_inf_is_infinite_error() -> None:
    ref = torch.randn(8, 8, dtype=torch.float64)
    out = ref.clone().to(torch.float32)
    out[3, 5] = float("nan")
    assert rel_error(out, ref) == math.inf
    out[3, 5] = float("inf")
    assert rel_error(out, ref) == math.inf


def test_poisoned_output_catches_one_unwritten_element() -> None:
    p = GemmProblem(m=16, n=16, k=32, dtype="fp32")
    inp = make_inputs(p, "cpu", 3)
    assert torch.isnan(inp.out).all()
    full = torch.matmul(inp.a, inp.b)
    inp.out.view(-1)[:-1] = full.view(-1)[:-1]  # a "kernel" that forgets the last element
    assert rel_error(inp.out, reference_matmul(inp.a, inp.b)) > tolerance(p)
    inp.out.copy_(full)
    assert rel_error(inp.out, reference_matmul(inp.a, inp.b)) <= tolerance(p)


def test_tolerances() -> None:
    assert tolerance(GemmProblem(m=8, n=8, k=8, dtype="bf16")) == 1e-2
    assert tolerance(GemmProblem(m=8, n=8, k=8, dtype="fp16")) == 2e-3
    assert tolerance(GemmProblem(m=8, n=8, k=8, dtype="fp32")) == 1e-4
    long_k = tolerance(GemmProblem(m=8, n=8, k=1 << 24, dtype="fp32"))
    assert 1e-4 < long_k < 3e-3
    assert tolerance(GemmProblem(m=8, n=8, k=8, dtype="fp16", out_dtype="bf16")) == 1e-2


def test_inputs_are_fresh_laid_out_and_scaled() -> None:
    p = GemmProblem(m=8, n=12, k=256, batch=2, dtype="fp16", layout_a="col")
    one, two = make_inputs(p, "cpu", 1), make_inputs(p, "cpu", 2)
    assert not torch.equal(one.a, two.a)
    assert torch.equal(one.a, make_inputs(p, "cpu", 1).a)
    assert one.a.shape == (2, 8, 256) and one.a.stride() == (8 * 256, 1, 8)
    assert one.b.shape == (2, 256, 12) and one.b.stride(2) == 1
    assert (one.a != 0).float().mean() > 0.99
    c = reference_matmul(one.a, one.b)
    assert 0.5 < float(c.std()) < 2.0  # products are about N(0, 1) for any K
