"""The Triton fp8 template and its quantisation kernels (``kernel_templates/gemm/fp8.py``,
``fp8_quant.py``), in the interpreter on a CPU (the GPU runs the same checks on real shapes in
``tests/gpu/test_fp8_gpu.py``).

The quantisation is checked bit for bit against a torch quantiser written from its definition
(per-row or per-tensor amax, ``scale = amax / 448``, round to nearest even); the product against
the float64 product of the inputs it saw (fp8 problems) or of the dequantised copies it made
(lowered candidates), so dropping a scale, a K tile or the quantisation itself fails."""

from __future__ import annotations

from typing import Any

import pytest
import torch

from kernel_templates.errors import InvalidConfig, Unsupported
from kernel_templates.gemm.fp8 import lowered_matmul, scaled_matmul
from kernel_templates.gemm.fp8_config import check_config
from kernel_templates.gemm.fp8_quant import (
    BLOCK_ROWS,
    GROUP,
    block_scale_stride,
    block_scales,
    group_scales,
    quantise,
    quantise_blocks,
    quantise_groups,
    quantise_pair_panel,
    quantise_rows,
    quantise_rows_panel,
    quantise_whole_rows,
    whole_rows_fit,
)
from kernel_templates.gemm.inputs import make_inputs
from kernel_templates.gemm.reference import (
    FP8_TOLERANCE,
    reference_for,
    rel_error,
    tolerance_for,
)
from kernel_templates.registry import make_callable, static_violations
from search.decision.policy import MAX_REL_ERROR
from search.kinds.gemm import fp8_space
from search.kinds.gemm.spec import GemmProblem
from search.limits import DeviceLimits
from search.types import Candidate
from workers.execute import execute

F8 = torch.float8_e4m3fn
LAY = {"r": "row", "c": "col"}
SMALL = dict(BLOCK_M=32, BLOCK_N=32, BLOCK_K=32, GROUP_M=2, num_warps=4, num_stages=2)
QUANT = dict(PRECISION="fp8_e4m3", SCALES="row", Q_BLOCK_R=8, Q_BLOCK_K=32, Q_WARPS=4)


def torch_quantise(x: torch.Tensor, scales: str) -> tuple[torch.Tensor, torch.Tensor]:
    """The definition: amax per row (or of the tensor), scale = amax / 448, values times
    448 / amax rounded to the nearest e4m3 (torch's cast rounds to nearest even). Divisions
    are tensor by tensor: torch computes ``448.0 / t`` as a reciprocal times 448, an ulp off."""
    x = x.float()
    amax = x.abs().amax(dim=1) if scales == "row" else x.abs().amax().reshape(1)
    nonzero = amax > 0
    ones = torch.ones_like(amax)
    scale = torch.where(nonzero, amax / torch.full_like(amax, 448.0), ones)
    inv = torch.where(nonzero, torch.full_like(amax, 448.0) / torch.where(nonzero, amax, ones),
                      ones)
    y = x * (inv[:, None] if scales == "row" else inv)
    return y.clamp(-448, 448).to(F8), scale


def torch_block_quantise(x: torch.Tensor, rows: int, cols: int
                         ) -> tuple[torch.Tensor, torch.Tensor]:
    """The definition of block scaling: each ``rows x cols`` block (ragged at the edges) as
    ``torch_quantise`` quantises a tensor; the scales as a ``[row blocks, column blocks]``
    grid. On ``x``'s device."""
    r, k = x.shape
    big_r, big_k = -(-r // rows) * rows, -(-k // cols) * cols
    padded = torch.zeros(big_r, big_k, dtype=torch.float32, device=x.device)
    padded[:r, :k] = x.float()
    blocks = padded.reshape(big_r // rows, rows, big_k // cols, cols)
    amax = blocks.abs().amax(dim=(1, 3))
    nonzero, ones = amax > 0, torch.ones_like(amax)
    scale = torch.where(nonzero, amax / torch.full_like(amax, 448.0), ones)
    inv = torch.where(nonzero, torch.full_like(amax, 448.0) / torch.where(nonzero, amax, ones),
                      ones)
    q = (blocks * inv[:, None, :, None]).clamp(-448, 448).to(F8).reshape(big_r, big_k)
    return q[:r, :k], scale


def block_dequantised(q: torch.Tensor, grid: torch.Tensor, rows: int, cols: int
                      ) -> torch.Tensor:
    """``q`` times its ``[row blocks, column blocks]`` scale ``grid``, in float64."""
    r, k = q.shape
    full = grid.double().repeat_interleave(rows, 0)[:r].repeat_interleave(cols, 1)[:, :k]
    return q.double() * full


def _operand(r: int, k: int, transposed: bool, dtype: torch.dtype, seed: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    if transposed:
        return torch.randn(k, r, generator=g).to(dtype).T
    return torch.randn(r, k, generator=g).to(dtype)


# -- quantisation -------------------------------------------------------------------------------
@pytest.mark.parametrize("scales", ["row", "tensor"])
@pytest.mark.parametrize(("r", "k", "transposed"), [(37, 100, False), (64, 96, True),
                                                    (5, 33, False), (1, 16, True)])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_quantisation_is_bitwise_the_definition(scales: str, r: int, k: int, transposed: bool,
                                                dtype: torch.dtype) -> None:
    x = _operand(r, k, transposed, dtype, seed=r + k)
    if r > 2:
        x[1] = 0  # an all-zero row: scale 1, zeros
        x[2, 3] = 1e-3 * float(x[2].abs().max())  # lands among e4m3's subnormals
    q, s = quantise(x, scales, block_r=4, block_k=32, num_warps=4)
    want_q, want_s = torch_quantise(x, scales)
    assert q.dtype == F8 and tuple(q.shape) == (r, k) and q.stride(1) == 1
    assert q.stride(0) % 16 == 0  # 16-byte rows: TMA can describe them
    assert torch.equal(s, want_s)
    assert torch.equal(q.view(torch.uint8), want_q.view(torch.uint8))


@pytest.mark.parametrize(("r", "k", "transposed"), [(37, 300, False), (130, 256, True),
                                                    (5, 100, False)])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_block_quantisation_is_bitwise_the_definition(r: int, k: int, transposed: bool,
                                                      dtype: torch.dtype) -> None:
    """A per row and 128 of K (1 x 128 groups), B per 128 x 128 block, each in one launch:
    ragged groups and blocks at the edges, an all-zero row, a value among the subnormals."""
    x = _hard_rows(_operand(r, k, transposed, dtype, seed=r + k))
    q, s = quantise_groups(x, block_r=4, num_warps=4)
    want_q, want_s = torch_block_quantise(x, 1, GROUP)
    assert q.stride(1) == 1 and q.stride(0) % 16 == 0 and s.numel() == group_scales(r, k)
    assert s.is_contiguous() and torch.equal(s, want_s.T)  # [groups, rows]
    assert torch.equal(q.view(torch.uint8), want_q.view(torch.uint8))
    q, s = quantise_blocks(x, num_warps=4)
    want_q, want_s = torch_block_quantise(x, BLOCK_ROWS, GROUP)
    # [row blocks, groups], rows 16-byte aligned as cuBLAS's blockwise product reads them
    assert s.stride(0) == block_scale_stride(k) and s.stride(0) % 4 == 0
    assert s.stride(0) * s.shape[0] == block_scales(r, k) and torch.equal(s, want_s)
    assert torch.equal(q.view(torch.uint8), want_q.view(torch.uint8))


def test_quantisation_uses_the_whole_e4m3_range_and_dequantises_close() -> None:
    x = _operand(16, 256, False, torch.bfloat16, seed=1) * 1000  # amax far over 448
    for scales in ("row", "tensor"):
        q, s = quantise(x, scales, block_r=8, block_k=64, num_warps=4)
        back = q.float() * (s[:, None] if scales == "row" else s)
        assert float(q.float().abs().max()) == 448.0
        # e4m3 keeps 3 mantissa bits: a relative rounding error of at most 2**-4 per value
        assert rel_error(back, x) < 2.0**-4


def test_per_row_scales_are_per_row() -> None:
    """A row 1e5 times larger than the rest: per-tensor scales push the others among the
    subnormals (large error), per-row scales keep every row at e4m3's relative precision."""
    x = _operand(32, 128, False, torch.bfloat16, seed=2)
    x[0] *= 1e5
    errors = {}
    for scales in ("row", "tensor"):
        q, s = quantise(x, scales, block_r=4, block_k=64, num_warps=4)
        back = q.float() * (s[:, None] if scales == "row" else s)
        errors[scales] = rel_error(back[1:], x[1:])
    assert errors["row"] < 0.03 < errors["tensor"]


def _hard_rows(x: torch.Tensor) -> torch.Tensor:
    """``x`` with an all-zero row, a row of values at e4m3's largest magnitude once scaled
    (its amax maps to 448, the clamp's edge, and a value 1.3% below rounds up to it), a value
    among e4m3's subnormals and a row of large values."""
    x[1] = 0
    x[2] = 455.0 * torch.sign(x[2])
    x[2, 0] = 449.0
    x[3, 5] = 1e-3 * float(x[3].abs().max())
    x[4] *= 1e3
    return x


@pytest.mark.parametrize(("r", "k", "transposed"), [(37, 45, False), (37, 45, True),
                                                    (5, 100, False), (64, 33, True)])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize(("block_r", "block_k", "programs"), [(8, 16, 2), (4, 64, None),
                                                              (16, 32, 1)])
def test_panels_are_bitwise_the_two_pass_path(r: int, k: int, transposed: bool,
                                              dtype: torch.dtype, block_r: int, block_k: int,
                                              programs: int | None) -> None:
    """One persistent launch over panels of whole rows (``programs`` walking several panels
    each, K in several chunks with a ragged tail) writes the two-pass path's bits."""
    x = _hard_rows(_operand(r, k, transposed, dtype, seed=r * k))
    want_q, want_s = quantise_rows(x, block_r=4, block_k=32, num_warps=4)
    q, s = quantise_rows_panel(x, block_r=block_r, block_k=block_k, num_warps=4,
                               programs=programs)
    assert q.stride(1) == 1 and q.stride(0) % 16 == 0 and tuple(q.shape) == (r, k)
    assert torch.equal(s, want_s) and float(s[1]) == 1.0
    assert torch.equal(q.view(torch.uint8), want_q.view(torch.uint8))
    assert float(q[2].float().abs().max()) == 448.0 and not bool(q[1].float().any())
    via, _ = quantise(x, "row", block_r=block_r, block_k=block_k, num_warps=4, mode="panel")
    assert torch.equal(via.view(torch.uint8), want_q.view(torch.uint8))


@pytest.mark.parametrize(("r", "k"), [(37, 45), (5, 300), (6, 16)])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_whole_rows_are_bitwise_the_two_pass_path(r: int, k: int, dtype: torch.dtype) -> None:
    """One launch, each program holding whole rows (K padded to a power of two): the two-pass
    path's bits; strided rows are refused (they go to the two passes)."""
    x = _hard_rows(_operand(r, k, False, dtype, seed=r * k + 1))
    want_q, want_s = quantise_rows(x, block_r=4, block_k=32, num_warps=4)
    assert whole_rows_fit(x)
    q, s = quantise_whole_rows(x)
    assert q.stride(1) == 1 and q.stride(0) % 16 == 0 and tuple(q.shape) == (r, k)
    assert torch.equal(s, want_s) and float(s[1]) == 1.0
    assert torch.equal(q.view(torch.uint8), want_q.view(torch.uint8))
    strided = _operand(r, k, True, dtype, seed=1)
    assert not whole_rows_fit(strided)
    with pytest.raises(ValueError, match="unit K stride"):
        quantise_whole_rows(strided)


@pytest.mark.parametrize("programs", [None, 3])
def test_one_panel_launch_quantises_both_operands_bitwise(programs: int | None) -> None:
    """A as it is ([M, K], K contiguous) and B through its transpose ([N, K], rows
    contiguous), in one launch: each as the two-pass path quantises it alone."""
    a = _hard_rows(_operand(37, 45, False, torch.bfloat16, seed=7))
    bt = _hard_rows(_operand(29, 45, True, torch.bfloat16, seed=8))
    qa, sa, qb, sb = quantise_pair_panel(a, bt, block_r=8, block_k=16, num_warps=4,
                                         programs=programs)
    for got_q, got_s, x in ((qa, sa, a), (qb, sb, bt)):
        want_q, want_s = quantise_rows(x, block_r=4, block_k=32, num_warps=4)
        assert torch.equal(got_s, want_s)
        assert torch.equal(got_q.view(torch.uint8), want_q.view(torch.uint8))
    with pytest.raises(ValueError, match=r"\[RA, K\] and \[RB, K\]"):
        quantise_pair_panel(a, bt[:, :40], block_r=8, block_k=16, num_warps=4)


def test_panels_are_per_row_only() -> None:
    x = _operand(8, 32, False, torch.bfloat16, seed=3)
    with pytest.raises(ValueError, match="per-tensor scales take mode 'two_pass'"):
        quantise(x, "tensor", block_r=4, block_k=32, num_warps=4, mode="panel")
    with pytest.raises(ValueError, match="mode must be one of"):
        quantise(x, "row", block_r=4, block_k=32, num_warps=4, mode="rows")
    with pytest.raises(ValueError, match="block_r must be a positive power of two"):
        quantise_rows_panel(x, block_r=6, block_k=32, num_warps=4)


# -- the fp8 problem's product ------------------------------------------------------------------
VARIANTS = [{}, {"PERSISTENT": 1}, {"TMA_STORE": 1}, {"FAST_ACC": 1}, {"num_ctas": 2},
            {"PERSISTENT": 1, "TMA_STORE": 1, "GROUP_M": 1}]


@pytest.mark.parametrize("extra", VARIANTS, ids=lambda e: ",".join(f"{k}={v}" for k, v in
                                                                  e.items()) or "plain")
@pytest.mark.parametrize(("m", "n", "k", "out"), [(40, 48, 96, "bf16"), (64, 32, 64, "fp32"),
                                                  (33, 80, 160, "fp16")])
def test_fp8_problems_are_multiplied_with_their_scales(extra: dict[str, Any], m: int, n: int,
                                                       k: int, out: str) -> None:
    p = GemmProblem(m=m, n=n, k=k, dtype="fp8_e4m3", out_dtype=out, layout_b="col")
    inp = make_inputs(p, "cpu", m + k)
    assert inp.scale_a is not None and inp.scale_b is not None
    cfg = {**SMALL, **extra}
    if extra.get("TMA_STORE") and (n * inp.out.element_size()) % 16:
        pytest.skip("TMA_STORE needs 16-byte output rows")
    scaled_matmul(inp.a, inp.b, inp.scale_a, inp.scale_b, cfg, inp.out)  # NaN-poisoned out
    err = rel_error(inp.out, reference_for(inp))  # inf if an element was left NaN
    # fp8 inputs are exact: what remains is the output's rounding
    assert err <= {"bf16": 6e-3, "fp16": 1e-3, "fp32": 1e-5}[out]
    assert err <= FP8_TOLERANCE


def test_the_fp8_template_refuses_what_it_cannot_describe() -> None:
    p = GemmProblem(m=32, n=32, k=40, dtype="fp8_e4m3", layout_b="col")  # k % 16 != 0
    inp = make_inputs(p, "cpu", 0)
    assert inp.scale_a is not None and inp.scale_b is not None
    with pytest.raises(Unsupported, match="TMA"):
        scaled_matmul(inp.a, inp.b, inp.scale_a, inp.scale_b, SMALL, inp.out)


# -- lowered: a bf16/fp16 product computed in fp8 -----------------------------------------------
@pytest.mark.parametrize("layouts", ["rr", "rc", "cr", "cc"])
@pytest.mark.parametrize("scales", ["row", "tensor"])
def test_a_lowered_product_is_the_product_of_the_quantised_inputs(layouts: str,
                                                                  scales: str) -> None:
    p = GemmProblem(m=40, n=48, k=100, dtype="bf16", layout_a=LAY[layouts[0]],
                    layout_b=LAY[layouts[1]])
    inp = make_inputs(p, "cpu", 3)
    cfg = {**SMALL, **QUANT, "SCALES": scales, "PERSISTENT": 1}
    lowered_matmul(inp.a, inp.b, cfg, inp.out)
    qa, sa = torch_quantise(inp.a, scales)
    qb, sb = torch_quantise(inp.b.T, scales)
    da = qa.double() * (sa[:, None] if scales == "row" else sa).double()
    db = qb.double() * (sb[:, None] if scales == "row" else sb).double()
    quantised = da @ db.T
    # against the product it computed: only the bf16 output rounding is left
    assert rel_error(inp.out, quantised) < 6e-3
    # against the exact product of the bf16 inputs: e4m3's rounding of both operands, about
    # 2 x 2.6% in quadrature for normal inputs (docs/benchmarks/fp8_error_cpu_2026-11-24.md)
    exact = rel_error(inp.out, reference_for(inp))
    assert 0.02 < exact < 0.06


BLOCKED = dict(BLOCK_M=32, BLOCK_N=32, BLOCK_K=128, GROUP_M=2, num_warps=4, num_stages=2,
               PRECISION="fp8_e4m3", SCALES="block", Q_BLOCK_R=8, Q_WARPS=4)


@pytest.mark.parametrize("layouts", ["rr", "rc", "cc"])
@pytest.mark.parametrize("extra", [{}, {"PERSISTENT": 1, "TMA_STORE": 1}, {"BLOCK_N": 64}])
def test_a_block_scaled_product_is_the_product_of_the_quantised_inputs(
        layouts: str, extra: dict[str, Any]) -> None:
    """Scales that change along K, applied to each K tile's partial sums: K of three groups
    (the last ragged), N over one block of B's (the second ragged). fp16 inputs (the
    interpreter's dot on bf16 is not exact), an fp32 output."""
    p = GemmProblem(m=40, n=160, k=300, dtype="fp16", out_dtype="fp32",
                    layout_a=LAY[layouts[0]], layout_b=LAY[layouts[1]])
    inp = make_inputs(p, "cpu", 6)
    lowered_matmul(inp.a, inp.b, {**BLOCKED, **extra}, inp.out)
    qa, sa = torch_block_quantise(inp.a, 1, GROUP)
    qb, sb = torch_block_quantise(inp.b.T, BLOCK_ROWS, GROUP)
    quantised = block_dequantised(qa, sa, 1, GROUP) @ block_dequantised(qb, sb, BLOCK_ROWS,
                                                                        GROUP).T
    assert rel_error(inp.out, quantised) < 1e-5  # fp32 sums of exact products
    assert 0.02 < rel_error(inp.out, reference_for(inp)) < 0.06


@pytest.mark.parametrize("layouts", ["rr", "rc", "cc"])
def test_a_lowered_product_quantised_in_panels_is_the_two_pass_product(layouts: str,
                                                                      monkeypatch: Any) -> None:
    """``Q_MODE="panel"`` quantises both operands in one launch (the per-operand path is never
    called) into the same fp8 copies as ``"two_pass"``: the same product, bit for bit, within
    e4m3's error of the exact one (fp16 inputs: the interpreter's dot on bf16 is not exact)."""
    from kernel_templates.gemm import fp8

    p = GemmProblem(m=40, n=48, k=100, dtype="fp16", out_dtype="fp32", layout_a=LAY[layouts[0]],
                    layout_b=LAY[layouts[1]])
    inp = make_inputs(p, "cpu", 4)
    cfg = {**SMALL, **QUANT, "PERSISTENT": 1}
    lowered_matmul(inp.a, inp.b, {**cfg, "Q_MODE": "two_pass"}, inp.out)
    two_pass = inp.out.clone()
    inp.out.fill_(float("nan"))

    def no_per_operand_pass(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("Q_MODE='panel' quantised an operand alone")

    monkeypatch.setattr(fp8, "quantise", no_per_operand_pass)
    lowered_matmul(inp.a, inp.b, {**cfg, "Q_MODE": "panel"}, inp.out)
    assert torch.equal(inp.out, two_pass)
    if layouts != "cc":  # A's rows contiguous: one of the two comes in whole rows
        monkeypatch.undo()
        inp.out.fill_(float("nan"))
        lowered_matmul(inp.a, inp.b, {**cfg, "Q_MODE": "whole_rows"}, inp.out)
        assert torch.equal(inp.out, two_pass)
    assert 0.01 < rel_error(inp.out, reference_for(inp)) < 0.06


def test_fp16_outputs_and_inputs_lower_too() -> None:
    p = GemmProblem(m=24, n=40, k=64, dtype="fp16", out_dtype="fp32")
    inp = make_inputs(p, "cpu", 5)
    lowered_matmul(inp.a, inp.b, {**SMALL, **QUANT}, inp.out)
    assert 0.01 < rel_error(inp.out, reference_for(inp)) < 0.06


def test_lowered_candidates_through_the_registry_and_the_worker() -> None:
    p = GemmProblem(m=64, n=48, k=80, dtype="fp16")
    cublas, config = (next(s for s in fp8_space.seeds(p) if s["PRODUCT"] == product)
                      for product in ("cublas", "triton"))
    # cuBLAS's product is refused where the worker runs the interpreter
    assert any("not the interpreter" in v
               for v in static_violations(Candidate(p, "triton", cublas), "interpreter", 0))
    assert config["PRECISION"] == "fp8_e4m3" and tolerance_for(p, config) == MAX_REL_ERROR
    assert static_violations(Candidate(p, "triton", config), "interpreter", 0) == []
    inp = make_inputs(p, "cpu", 1)
    make_callable(Candidate(p, "triton", config), inp)()
    assert rel_error(inp.out, reference_for(inp)) < 0.06
    res = execute({"backend": "triton", "config": config, "problem": p.to_dict()},
                  {"interpret": True, "seed": 1, "interpreter_reps": 1})
    assert res["status"] == "ok" and 0.02 < res["rel_error"] < 0.06


def test_a_lowered_kernel_that_drops_a_scale_is_a_wrong_result(monkeypatch: Any) -> None:
    """What the worker reports when a lowered kernel forgets to dequantise: its error is far
    over even the most lenient bound a policy may set."""
    from kernel_templates.gemm import fp8

    real = fp8.fp8_gemm

    def unscaled(qa: Any, qb: Any, sa: Any, sb: Any, cfg: Any, out: Any) -> Any:
        return real(qa, qb, torch.ones_like(sa), sb, cfg, out)

    monkeypatch.setattr(fp8, "fp8_gemm", unscaled)
    p = GemmProblem(m=32, n=32, k=64, dtype="bf16")
    res = execute({"backend": "triton", "config": {**SMALL, **QUANT}, "problem": p.to_dict()},
                  {"interpret": True, "seed": 2, "interpreter_reps": 1})
    assert res["status"] == "wrong_result" and res["rel_error"] > MAX_REL_ERROR


# -- configurations -----------------------------------------------------------------------------
@pytest.mark.parametrize(("config", "lowered", "words"), [
    ({**SMALL, "BLOCK_K": 16}, False, "BLOCK_K"),
    ({**SMALL, "BLOCK_M": 48}, False, "power of two"),
    ({**SMALL, "FAST_ACC": 2}, False, "FAST_ACC"),
    ({**SMALL, "num_ctas": 4}, False, "num_ctas"),
    ({**SMALL, "PERSISTENT": True}, False, "PERSISTENT"),
    ({**SMALL, **QUANT}, False, "unknown config keys"),  # an fp8 problem is not quantised
    ({**SMALL, **QUANT, "PRECISION": "fp4"}, True, "PRECISION"),
    ({**SMALL, **QUANT, "SCALES": "blocks"}, True, "SCALES"),
    ({**SMALL, **QUANT, "SCALES": "block"}, True,
     "SCALES='block' needs BLOCK_K=128 .* got BLOCK_K=32, BLOCK_N=32"),
    ({**SMALL, **QUANT, "SCALES": "block", "BLOCK_K": 128, "BLOCK_N": 256}, True,
     "a BLOCK_N dividing 128"),
    ({**SMALL, **QUANT, "SCALES": "block", "BLOCK_K": 128, "Q_MODE": "panel"}, True,
     "Q_MODE='panel' quantises per row"),
    ({**SMALL, **QUANT, "Q_BLOCK_K": 8}, True, "Q_BLOCK_K"),
    ({**SMALL, **QUANT, "Q_WARPS": 3}, True, "Q_WARPS"),
    ({**SMALL, **QUANT, "Q_MODE": "fused"}, True,
     r"Q_MODE must be one of \['panel', 'two_pass', 'whole_rows'\]"),
    ({**SMALL, **QUANT, "Q_MODE": "whole_rows", "SCALES": "tensor"}, True,
     "Q_MODE='whole_rows' quantises per row; SCALES='tensor' needs Q_MODE='two_pass'"),
    ({**SMALL, **QUANT, "Q_MODE": "panel", "SCALES": "tensor"}, True,
     "Q_MODE='panel' quantises per row; SCALES='tensor' needs Q_MODE='two_pass'"),
    ({**SMALL, "Q_MODE": "panel"}, False, "unknown config keys"),
    ({k: v for k, v in SMALL.items() if k != "num_stages"}, False, "lacks"),
])
def test_bad_configs_are_refused_before_anything_compiles(config: dict[str, Any],
                                                          lowered: bool, words: str) -> None:
    with pytest.raises(InvalidConfig, match=words):
        check_config(config, lowered)


def test_a_config_is_completed_with_the_spaces_defaults() -> None:
    cfg = check_config(dict(SMALL), lowered=False)
    assert {k: cfg[k] for k in fp8_space.DEFAULTS} == fp8_space.DEFAULTS
    low = check_config({**SMALL, "PRECISION": "fp8_e4m3"}, lowered=True)
    assert {k: low[k] for k in fp8_space.LOWERED_DEFAULTS} == fp8_space.LOWERED_DEFAULTS
    # a stored configuration from before Q_MODE quantises as it did: in two passes
    assert check_config({**SMALL, **QUANT}, lowered=True)["Q_MODE"] == "two_pass"


def test_a_cublas_product_fixes_the_template_keys_and_needs_the_gpu() -> None:
    """``PRODUCT="cublas"``: cuBLAS's blockwise-scaled kernel multiplies block-scaled copies,
    so the template's tiles are one value (one configuration per quantisation tile), and it
    is refused where it cannot run: the interpreter, a pre-Hopper GPU, k or n not a multiple
    of 16. On the CPU the call says why."""
    p = GemmProblem(m=256, n=256, k=256, dtype="bf16")
    a = fp8_space.complete({**BLOCKED, "PRODUCT": "cublas", "BLOCK_M": 16, "num_stages": 2,
                            "SCALES": "row"}, True)
    b = fp8_space.complete({**BLOCKED, "PRODUCT": "cublas"}, True)
    assert a == b and a["SCALES"] == "block"
    assert {k: a[k] for k in fp8_space.CUBLAS_PRODUCT_KEYS} == fp8_space.CUBLAS_PRODUCT_KEYS
    h100 = DeviceLimits(cc="9.0", sm_count=132)
    assert fp8_space.violations(p, a, h100) == []
    for limits, problem, words in (
            (DeviceLimits.interpreter(), p, "not the interpreter"),
            (DeviceLimits(cc="8.0"), p, "not cc 8.0"),
            (h100, GemmProblem(m=256, n=250, k=256, dtype="bf16"), "multiples of 16")):
        assert any(words in v for v in fp8_space.violations(problem, a, limits)), words
    with pytest.raises(InvalidConfig, match="PRODUCT must be one of"):
        check_config({**SMALL, **QUANT, "PRODUCT": "cutlass"}, lowered=True)
    inp = make_inputs(GemmProblem(m=32, n=32, k=128, dtype="bf16"), "cpu", 0)
    with pytest.raises(Unsupported, match="runs on a CUDA GPU"):
        lowered_matmul(inp.a, inp.b, a, inp.out)


def test_block_scales_ignore_the_keys_they_do_not_use() -> None:
    """Block scales fix the quantisation's K tile (the group) and promote every K tile, so
    configurations differing only in ``Q_BLOCK_K`` or ``FAST_ACC`` are one configuration."""
    base = {**BLOCKED, "BLOCK_K": 128, "BLOCK_N": 64}
    one = fp8_space.complete({**base, "Q_BLOCK_K": 512, "FAST_ACC": 1}, True)
    assert one == fp8_space.complete(base, True)
    assert one["Q_BLOCK_K"] == GROUP and one["FAST_ACC"] == 0
    row = fp8_space.complete({**base, "SCALES": "row", "Q_BLOCK_K": 512, "FAST_ACC": 1}, True)
    assert row["Q_BLOCK_K"] == 512 and row["FAST_ACC"] == 1
    assert "block" in next(c.values for c in fp8_space.space(GemmProblem(
        m=256, n=256, k=256, dtype="bf16")) if c.name == "SCALES")


def test_the_lowered_space_searches_whole_rows_and_panels_may_be_pinned() -> None:
    # panels measured slower than two passes on an H100 (docs/benchmarks/
    # precision_quant_h100_2026-11-25.md): the search tries two passes and whole rows
    p = GemmProblem(m=4096, n=4096, k=4096, dtype="bf16")
    modes = next(c.values for c in fp8_space.space(p) if c.name == "Q_MODE")
    assert set(modes) == {"two_pass", "whole_rows"} and "Q_MODE" in fp8_space.params(p)
    seeds = fp8_space.seeds(p)
    assert seeds and all(s["Q_MODE"] != "panel" for s in seeds)
    assert all(fp8_space.violations(p, s, DeviceLimits()) == [] for s in seeds)
    # cuBLAS's blockwise product on block-scaled copies first, then whole rows (A read once),
    # the template's block scales among the first dozen
    assert [s["PRODUCT"] for s in seeds[:2]] == ["cublas", "cublas"]
    assert all(s["SCALES"] == "block" for s in seeds[:2])
    assert seeds[2]["Q_MODE"] == "whole_rows" and seeds[2]["SCALES"] == "row"
    assert any(s["SCALES"] == "block" and s["PRODUCT"] == "triton" for s in seeds)
    row = seeds[2]
    pinned = check_config({**row, "Q_MODE": "panel"}, lowered=True)
    assert pinned["Q_MODE"] == "panel"
    tensor = {**row, "SCALES": "tensor", "Q_MODE": "panel"}
    assert any("Q_MODE='panel' quantises per row" in v
               for v in fp8_space.violations(p, tensor, DeviceLimits()))
    assert fp8_space.violations(p, {**tensor, "Q_MODE": "two_pass"}, DeviceLimits()) == []
    assert "Q_MODE" not in fp8_space.seeds(GemmProblem(m=64, n=64, k=64, dtype="fp8_e4m3",
                                                       layout_b="col"))[0]


def test_lowering_refuses_fp32_inputs() -> None:
    p = GemmProblem(m=16, n=32, k=32, dtype="fp32")
    inp = make_inputs(p, "cpu", 0)
    with pytest.raises(Unsupported, match="bf16 or fp16"):
        lowered_matmul(inp.a, inp.b, {**SMALL, **QUANT}, inp.out)
