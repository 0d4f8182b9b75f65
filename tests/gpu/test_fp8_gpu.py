"""The Triton fp8 template and its quantisation on the GPU (sm_90), through the worker's own
path where a candidate is measured (``workers.execute``: static check, fresh inputs, a
NaN-poisoned output, the float64 reference, then the timing).

- the quantisation kernels bit for bit against the torch definition (the GPU's cast rounds
  like torch's);
- fp8 problems: the search's seeds and every variant within the fp8 tolerance, and close to
  ``torch._scaled_mm`` on the same inputs;
- the accumulation setting does something: fp32 promotion (``FAST_ACC=0``) errs less than
  the tensor cores' own accumulator over a long K;
- bf16 lowered to fp8: the error e4m3 rounding gives on the stated inputs (~0.037), well under
  the worker's lenient check, so the policy's bound decides;
- the panel quantisation (``Q_MODE="panel"``: both operands in one launch) bit for bit the
  two-pass one, alone and through ``lowered_matmul``, whose products are then identical; so
  too whole rows (``Q_MODE="whole_rows"``);
- block scaling (``SCALES="block"``): its one-pass quantisation bit for bit the definition, its
  product that of the fp8 copies it made."""

from __future__ import annotations

from typing import Any

import pytest
import torch

from kernel_templates.gemm.fp8 import lowered_matmul
from kernel_templates.gemm.fp8_quant import (
    BLOCK_ROWS,
    GROUP,
    quantise,
    quantise_blocks,
    quantise_groups,
    quantise_pair_panel,
    quantise_rows,
    quantise_rows_panel,
    quantise_whole_rows,
)
from kernel_templates.gemm.inputs import make_inputs
from kernel_templates.gemm.reference import FP8_TOLERANCE, rel_error
from search.kinds.gemm import fp8_space
from search.kinds.gemm.spec import GemmProblem
from search.types import Candidate, Measurement, Status
from workers.execute import execute

pytestmark = pytest.mark.gpu

OPTS = {"target_ms": 2.0, "warmup_ms": 1.0, "min_reps": 3, "max_reps": 20}
F8 = torch.float8_e4m3fn
FP8_SHAPES = [(4096, 4096, 4096), (1000, 3008, 2048), (16, 4096, 8192), (8192, 8192, 8192)]
VARIANTS: list[dict[str, Any]] = [
    dict(BLOCK_M=128, BLOCK_N=256, BLOCK_K=128, GROUP_M=8, num_warps=8, num_stages=3),
    dict(BLOCK_M=128, BLOCK_N=256, BLOCK_K=128, GROUP_M=8, num_warps=8, num_stages=3,
         PERSISTENT=1, TMA_STORE=1, FAST_ACC=1),
    dict(BLOCK_M=128, BLOCK_N=128, BLOCK_K=128, GROUP_M=8, num_warps=8, num_stages=4,
         PERSISTENT=1, FAST_ACC=0),
    dict(BLOCK_M=128, BLOCK_N=128, BLOCK_K=128, GROUP_M=8, num_warps=8, num_stages=4,
         num_ctas=2),
    dict(BLOCK_M=64, BLOCK_N=128, BLOCK_K=128, GROUP_M=1, num_warps=4, num_stages=4),
    dict(BLOCK_M=16, BLOCK_N=128, BLOCK_K=128, GROUP_M=1, num_warps=4, num_stages=4),
]


def measure(problem: GemmProblem, config: dict[str, Any]) -> Measurement:
    got = Measurement.from_dict(execute(Candidate(problem, "triton", config).to_dict(), OPTS))
    assert got.status == Status.OK, (config, got.status, got.error)
    assert got.rel_error is not None and got.median_us is not None
    return got


def _torch_quantise(x: torch.Tensor, scales: str) -> tuple[torch.Tensor, torch.Tensor]:
    x = x.float()
    amax = x.abs().amax(dim=1) if scales == "row" else x.abs().amax().reshape(1)
    nonzero, ones = amax > 0, torch.ones_like(amax)
    scale = torch.where(nonzero, amax / torch.full_like(amax, 448.0), ones)
    inv = torch.where(nonzero, torch.full_like(amax, 448.0) / torch.where(nonzero, amax, ones),
                      ones)
    y = x * (inv[:, None] if scales == "row" else inv)
    return y.clamp(-448, 448).to(F8), scale


@pytest.mark.parametrize("scales", ["row", "tensor"])
@pytest.mark.parametrize(("r", "k", "transposed"), [(4096, 4096, False), (3000, 2000, True),
                                                    (16, 8192, False)])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_quantisation_is_bitwise_the_definition_on_the_gpu(scales: str, r: int, k: int,
                                                           transposed: bool,
                                                           dtype: torch.dtype) -> None:
    g = torch.Generator(device="cuda").manual_seed(r + k)
    shape = (k, r) if transposed else (r, k)
    x = torch.randn(shape, generator=g, device="cuda").to(dtype)
    x = x.T if transposed else x
    q, s = quantise(x, scales, block_r=4, block_k=512, num_warps=4)
    want_q, want_s = _torch_quantise(x, scales)
    assert torch.equal(s, want_s)
    assert torch.equal(q.view(torch.uint8), want_q.view(torch.uint8))


@pytest.mark.parametrize(("m", "n", "k"), FP8_SHAPES)
def test_the_fp8_template_on_fp8_problems(m: int, n: int, k: int) -> None:
    p = GemmProblem(m=m, n=n, k=k, dtype="fp8_e4m3", layout_b="col")
    configs = fp8_space.seeds(p)[:4] + [v for v in VARIANTS if v["BLOCK_M"] <= max(16, 2 * m)]
    for config in configs:
        got = measure(p, config)
        assert got.rel_error <= FP8_TOLERANCE, (config, got.rel_error)


def test_the_fp8_template_agrees_with_scaled_mm() -> None:
    from kernel_templates.gemm.fp8 import scaled_matmul

    p = GemmProblem(m=4096, n=4096, k=4096, dtype="fp8_e4m3", layout_b="col")
    inp = make_inputs(p, "cuda", 11)
    assert inp.scale_a is not None and inp.scale_b is not None
    ours = scaled_matmul(inp.a, inp.b, inp.scale_a, inp.scale_b, VARIANTS[0], inp.out).clone()
    theirs = torch._scaled_mm(inp.a, inp.b, scale_a=inp.scale_a, scale_b=inp.scale_b,
                              out_dtype=torch.bfloat16)
    assert rel_error(ours, theirs.double()) < 5e-3  # both bf16-rounded fp32 sums


def test_fp32_promotion_errs_less_than_the_tensor_cores_own_accumulator() -> None:
    p = GemmProblem(m=512, n=512, k=32768, dtype="fp8_e4m3", layout_b="col")
    base = dict(BLOCK_M=128, BLOCK_N=128, BLOCK_K=128, GROUP_M=8, num_warps=8, num_stages=4)
    errors = {}
    for fast in (0, 1):
        got = Measurement.from_dict(execute(
            Candidate(p, "triton", {**base, "FAST_ACC": fast}).to_dict(),
            {**OPTS, "seed": 5}))  # the same inputs for both
        assert got.status == Status.OK and got.rel_error is not None, got.error
        errors[fast] = got.rel_error
    assert errors[0] < errors[1], errors


@pytest.mark.parametrize(("m", "n", "k"), [(4096, 4096, 4096), (8192, 8192, 8192),
                                           (1000, 3000, 2000)])
@pytest.mark.parametrize("layouts", ["rr", "cc"])
def test_bf16_lowered_to_fp8(m: int, n: int, k: int, layouts: str) -> None:
    lay = {"r": "row", "c": "col"}
    p = GemmProblem(m=m, n=n, k=k, dtype="bf16", layout_a=lay[layouts[0]],
                    layout_b=lay[layouts[1]])
    first = next(s for s in fp8_space.seeds(p) if s["Q_MODE"] == "whole_rows")
    for config in fp8_space.seeds(p)[:3] + [{**first, "Q_MODE": "panel"},
                                             {**first, "Q_MODE": "two_pass"},
                                             {**first, "Q_MODE": "two_pass", "SCALES": "tensor"}]:
        got = measure(p, config)
        assert 0.02 < got.rel_error < 0.06, (config, got.rel_error)


def _gpu_operand(r: int, k: int, transposed: bool, dtype: torch.dtype, seed: int) -> torch.Tensor:
    """Normal values with an all-zero row, a row 1e3 times larger and one among e4m3's
    subnormals; ``transposed``: a view of a ``[K, R]`` matrix (rows contiguous across rows)."""
    g = torch.Generator(device="cuda").manual_seed(seed)
    x = torch.randn((k, r) if transposed else (r, k), generator=g, device="cuda").to(dtype)
    x = x.T if transposed else x
    x[1] = 0
    x[2] *= 1e3
    x[3, 5] = 1e-3 * float(x[3].abs().max())
    return x


PANEL_TILES = [(16, 256, 4, 2), (16, 256, 4, 1), (8, 512, 4, 3), (32, 128, 8, 2),
               (64, 64, 4, 2)]


@pytest.mark.parametrize(("block_r", "block_k", "warps", "stages"), PANEL_TILES)
@pytest.mark.parametrize(("r", "k", "transposed"), [(4096, 4096, False), (4096, 4096, True),
                                                    (3000, 2000, True), (16, 8192, False),
                                                    (8192, 8192, True)])
@pytest.mark.parametrize("programs", [None, 7])
def test_panels_are_bitwise_the_two_pass_path_on_the_gpu(r: int, k: int, transposed: bool,
                                                         block_r: int, block_k: int, warps: int,
                                                         stages: int,
                                                         programs: int | None) -> None:
    x = _gpu_operand(r, k, transposed, torch.bfloat16, seed=r + k)
    want_q, want_s = quantise_rows(x, block_r=4, block_k=512, num_warps=4)
    q, s = quantise_rows_panel(x, block_r=block_r, block_k=block_k, num_warps=warps,
                               programs=programs, stages=stages)
    torch.cuda.synchronize()
    assert torch.equal(s, want_s) and float(s[1]) == 1.0
    assert torch.equal(q.view(torch.uint8), want_q.view(torch.uint8))


@pytest.mark.parametrize(("block_r", "block_k", "warps", "stages"), PANEL_TILES)
@pytest.mark.parametrize(("m", "n", "k"), [(4096, 4096, 4096), (1000, 3000, 2000),
                                           (8192, 8192, 8192)])
def test_one_panel_launch_quantises_both_operands_bitwise_on_the_gpu(
        m: int, n: int, k: int, block_r: int, block_k: int, warps: int, stages: int) -> None:
    a = _gpu_operand(m, k, False, torch.bfloat16, seed=m)
    bt = _gpu_operand(n, k, True, torch.bfloat16, seed=n + 1)  # B [K, N] row-major, as B^T
    qa, sa, qb, sb = quantise_pair_panel(a, bt, block_r=block_r, block_k=block_k,
                                         num_warps=warps, stages=stages)
    for got_q, got_s, x in ((qa, sa, a), (qb, sb, bt)):
        want_q, want_s = quantise_rows(x, block_r=4, block_k=512, num_warps=4)
        assert torch.equal(got_s, want_s)
        assert torch.equal(got_q.view(torch.uint8), want_q.view(torch.uint8))


@pytest.mark.parametrize(("m", "n", "k"), [(4096, 4096, 4096), (1000, 3000, 2000),
                                           (16, 4096, 8192)])
@pytest.mark.parametrize("layouts", ["rr", "rc", "cc"])
def test_a_lowered_product_quantised_in_panels_is_the_two_pass_product_on_the_gpu(
        m: int, n: int, k: int, layouts: str) -> None:
    lay = {"r": "row", "c": "col"}
    p = GemmProblem(m=m, n=n, k=k, dtype="bf16", layout_a=lay[layouts[0]],
                    layout_b=lay[layouts[1]])
    inp = make_inputs(p, "cuda", 11)
    config = {**fp8_space.seeds(p)[0], "Q_MODE": "panel"}
    lowered_matmul(inp.a, inp.b, {**config, "Q_MODE": "two_pass"}, inp.out)
    two_pass = inp.out.clone()
    for mode in ("whole_rows", "panel"):  # the panel config last: measured below
        inp.out.fill_(float("nan"))
        lowered_matmul(inp.a, inp.b, {**config, "Q_MODE": mode}, inp.out)
        torch.cuda.synchronize()
        assert torch.equal(inp.out, two_pass), mode
    got = measure(p, config)
    assert 0.02 < got.rel_error < 0.06, (config, got.rel_error)


@pytest.mark.parametrize(("r", "k"), [(4096, 4096), (3000, 2000), (16, 8192), (8192, 8192),
                                     (5, 16384), (300, 100)])
def test_whole_rows_are_bitwise_the_two_pass_path_on_the_gpu(r: int, k: int) -> None:
    x = _gpu_operand(r, k, False, torch.bfloat16, seed=r * k)
    want_q, want_s = quantise_rows(x, block_r=4, block_k=512, num_warps=4)
    q, s = quantise_whole_rows(x)
    torch.cuda.synchronize()
    assert torch.equal(s, want_s) and float(s[1]) == 1.0
    assert torch.equal(q.view(torch.uint8), want_q.view(torch.uint8))


@pytest.mark.parametrize(("r", "k", "transposed"), [(4096, 4096, False), (4096, 4096, True),
                                                    (3000, 2000, True), (16, 8192, False)])
def test_block_quantisation_is_bitwise_the_definition_on_the_gpu(r: int, k: int,
                                                                 transposed: bool) -> None:
    """A's 1 x 128 groups and B's 128 x 128 blocks, each in one launch, against the torch
    definition (``tests/kernel_templates/test_fp8_template.py``), with an all-zero row, a
    row 1e3 times larger (the rest of its blocks among the subnormals) and a subnormal."""
    from tests.kernel_templates.test_fp8_template import torch_block_quantise

    x = _gpu_operand(r, k, transposed, torch.bfloat16, seed=r + k)
    for call, rows in ((lambda: quantise_groups(x, block_r=32, num_warps=4), 1),
                       (lambda: quantise_blocks(x, num_warps=8), BLOCK_ROWS)):
        q, s = call()
        want_q, want_s = torch_block_quantise(x, rows, GROUP)
        torch.cuda.synchronize()
        assert torch.equal(s, want_s.T if rows == 1 else want_s)
        assert torch.equal(q.view(torch.uint8), want_q.view(torch.uint8))


@pytest.mark.parametrize(("m", "n", "k"), [(4096, 4096, 4096), (1000, 3000, 2000),
                                           (16, 4096, 8192), (8192, 8192, 8192)])
def test_a_block_scaled_lowered_product_on_the_gpu(m: int, n: int, k: int) -> None:
    """The block-scaled seeds (scales applied to each K tile's partial sums in the main loop)
    through the worker, within e4m3's error of the exact product; and the first one against
    the float64 product of the fp8 copies it made: only the bf16 output's rounding left."""
    from kernel_templates.gemm import fp8
    from tests.kernel_templates.test_fp8_template import block_dequantised

    p = GemmProblem(m=m, n=n, k=k, dtype="bf16")
    block = [s for s in fp8_space.seeds(p) if s["SCALES"] == "block"]
    products = {s["PRODUCT"] for s in block}
    assert "triton" in products and ("cublas" in products or k % 16 or n % 16)
    for config in block:
        got = measure(p, config)
        assert 0.02 < got.rel_error < 0.06, (config, got.rel_error)
    inp = make_inputs(p, "cuda", 12)
    qa, ga = quantise_groups(inp.a, block_r=32, num_warps=4)
    qb, gb = quantise_blocks(inp.b.T, num_warps=8)
    exact = (block_dequantised(qa, ga.T, 1, GROUP)
             @ block_dequantised(qb, gb, BLOCK_ROWS, GROUP).T)
    for config in block:  # the template's product and cuBLAS's, on the same copies
        inp.out.fill_(float("nan"))
        fp8.lowered_matmul(inp.a, inp.b, config, inp.out)
        torch.cuda.synchronize()
        assert rel_error(inp.out, exact) < 6e-3, config
