"""fp8 e4m3 quantisation of bf16/fp16/fp32 operands in Triton: amax, scale and cast fused.

An operand is quantised as a matrix ``X[R, K]`` whose rows are scaled, with K the dimension the
product reduces over: A as it is (``[M, K]``), B through its transpose (``[N, K]``), so the fp8
copies are both K-major, as the fp8 tensor cores read them. Each row ``r`` gets

    scale[r] = amax_r / 448        (1 where the row is all zeros)
    q[r, k]  = e4m3(X[r, k] * (448 / amax_r))   round to nearest even, within +-448

and ``q[r, k] * scale[r]`` is the dequantised value. ``SCALES="tensor"`` uses one amax over
the whole matrix instead (``scale`` has one element).

- per row (``quantise_rows``): two launches over a grid of ``[BLOCK_R, BLOCK_K]`` tiles (and a
  zeroing of the per-row amax): every tile reduces its rows' amax into the row's fp32 cell with
  ``atomic_max``, then every tile scales and casts its rows with them (the tile of the first K
  block writes the scales). A grid over K as well as rows keeps the GPU's memory busy whatever
  the shape, and for B (rows of ``B^T``, contiguous across rows) a ``BLOCK_R`` of 32 or more
  reads whole sectors; the second pass mostly reads what the first left in L2.
- per tensor (``quantise_tensor``): the same two launches with one amax for the matrix.
- per row, whole rows (``quantise_whole_rows``): one launch, each program holding whole rows
  (K contiguous, at most ``WHOLE_ROW_MAX``) in registers, reading them once; bit for bit the
  two-pass path's. For A, whose rows are contiguous; B's rows (``B^T``'s, strided) take two
  passes over wide tiles.
- block scaling, each operand in one launch that reads it once (no atomics, no second pass):
  per row and ``GROUP`` (128) elements of K (``quantise_groups``: 1 x 128 groups, A's) or per
  ``BLOCK_ROWS x GROUP`` block (``quantise_blocks``: 128 x 128 blocks, B's). The scales then
  vary along K, so the product applies them to each K tile's partial sums in its main loop
  (``kernel_templates.gemm.fp8``, ``SCALES="block"``) rather than once in the epilogue.
- per row in panels (``quantise_rows_panel``, and ``quantise_pair_panel`` for both operands
  of a product in one launch): each program owns a panel of ``BLOCK_R`` whole rows and walks
  K twice in ``BLOCK_K`` chunks: the first walk reduces the rows' amax in registers (no
  atomics, no zeroing launch), the second re-reads the panel, writes the rows' scales and
  casts. The second walk runs backwards over K, so the chunks it reads first are the ones the
  first walk read last (the likeliest still in L2). ``X`` is read from DRAM once as long as
  every panel in flight stays in L2 between its two walks, so the launch is persistent: at
  most ``L2 / 2 / panel_bytes`` programs (never fewer than the SMs), each walking panels
  ``pid, pid + programs, ...``; with one program per panel, as many panels as the SMs hold
  at once would be live, which at large K is more than L2 holds (and the share of a
  program's panel read back from DRAM would depend on the occupancy, not on the config).
  Both walks are software-pipelined (``tl.range(num_stages=STAGES)``: on sm_90 the next
  chunks' loads go out as ``cp.async`` while this one is reduced or cast), so a program keeps
  several chunks in flight without needing many co-resident programs.
  The pair launch gives programs ``[0, PA)`` A's panels and ``[PA, PA + PB)`` B's (panels,
  for the persistent walk); the two operands are separate branches of the kernel, so each
  is compiled for its own strides (A's K stride is 1, B^T's row stride is 1). The results
  are bit for bit the per-row two-pass path's: the same amax (a maximum does not depend on
  the order), the same scale and cast expressions.

The fp8 rows are written into a buffer whose leading dimension is K rounded up to 16, so a TMA
descriptor can describe them (16-byte aligned rows); the tail is never read (the descriptor's
shape is ``[R, K]``: TMA zero-fills past it).

The Triton interpreter's float-to-fp8 conversion truncates and loses the carry into the
exponent (127.4 becomes 64), so under the interpreter (``ROUND_IN_FP32``) the value is first
rounded to the nearest e4m3 value in fp32 arithmetic and the cast is then exact; on a GPU the
cast is the hardware's ``cvt.rn.satfinite``.
"""

from __future__ import annotations

from typing import Any

import torch
import triton
import triton.language as tl

from kernel_templates.gemm.host import sm_count
from search.kinds.gemm.fp8_space import SCALE_GROUP

__all__ = ["BLOCK_ROWS", "E4M3_MAX", "GROUP", "MODES", "PANEL_STAGES", "WHOLE_ROW_MAX",
           "block_scale_stride", "block_scales", "group_scales", "panel_programs", "quantise",
           "quantise_blocks", "quantise_groups", "quantise_pair_panel", "quantise_rows",
           "quantise_rows_panel", "quantise_tensor", "quantise_whole_rows", "row_stride",
           "whole_rows_fit"]

#: The largest finite e4m3 magnitude: the scales map each row's (tensor's) amax there.
E4M3_MAX = 448.0
#: Elements of K that share a scale under block scaling (``quantise_groups``,
#: ``quantise_blocks``): one fp8 product tile's K (``BLOCK_K``), so the product applies each
#: group's scales to its tile's partial sums; and the rows of one ``quantise_blocks`` block
#: (B's columns: one scale per 128 x 128 block of B). The search space's ``SCALE_GROUP``.
GROUP = BLOCK_ROWS = SCALE_GROUP
#: The longest row ``quantise_whole_rows`` holds in registers, and the values one of its
#: programs holds (64 fp32 registers a thread at 8 warps).
WHOLE_ROW_MAX = 16384
WHOLE_ROW_VALUES = 16384
#: Quantisation modes: two passes over tiles (per row or per tensor), or panels (per row).
MODES = ("two_pass", "panel")
#: Software-pipeline depth of the panel kernel's two walks over K (``tl.range``'s
#: ``num_stages``: on sm_90 the loads of the next chunks go out as ``cp.async`` into shared
#: memory while this chunk is reduced or cast; 1: one chunk's loads in flight at a time).
PANEL_STAGES = 2


@triton.jit
def _round_e4m3(x):
    # Nearest-even e4m3 value of fp32 ``x`` (|x| <= 448), in fp32 arithmetic. Normal range: keep
    # 3 of the 23 mantissa bits (round half to even on the 20 dropped). Below 2**-6 (e4m3's
    # subnormals, steps of 2**-9): add and subtract 1.5 * 2**14, where fp32's step is 2**-9.
    bits = x.to(tl.uint32, bitcast=True)
    lsb = (bits >> 20) & 1
    normal = ((bits + 0x7FFFF + lsb) & 0xFFF00000).to(tl.float32, bitcast=True)
    # (on the magnitude, the sign put back: a value that rounds to zero keeps its sign, -0)
    magic = 24576.0
    sub = (tl.abs(x) + magic) - magic
    sub = (sub.to(tl.uint32, bitcast=True) | (bits & 0x80000000)).to(tl.float32, bitcast=True)
    return tl.where(tl.abs(x) < 0.015625, sub, normal)


@triton.jit
def _to_e4m3(y, ROUND_IN_FP32: tl.constexpr):
    y = tl.minimum(tl.maximum(y, -448.0), 448.0)
    if ROUND_IN_FP32:
        y = _round_e4m3(y)
    return y.to(tl.float8e4nv)


@triton.jit
def _row_amax_kernel(
    x_ptr, amax_ptr, R, K, stride_xr, stride_xk,
    BLOCK_R: tl.constexpr, BLOCK_K: tl.constexpr,
):  # fmt: skip
    rows = tl.program_id(0) * BLOCK_R + tl.arange(0, BLOCK_R)
    cols = tl.program_id(1) * BLOCK_K + tl.arange(0, BLOCK_K)
    row_ok = rows < R
    mask = row_ok[:, None] & (cols[None, :] < K)
    x = tl.load(x_ptr + rows.to(tl.int64)[:, None] * stride_xr + cols[None, :] * stride_xk,
                mask=mask, other=0.0).to(tl.float32)
    tl.atomic_max(amax_ptr + rows, tl.max(tl.abs(x), axis=1), mask=row_ok)


@triton.jit
def _row_cast_kernel(
    x_ptr, q_ptr, amax_ptr, s_ptr, R, K, stride_xr, stride_xk, stride_qr,
    BLOCK_R: tl.constexpr, BLOCK_K: tl.constexpr, ROUND_IN_FP32: tl.constexpr,
):  # fmt: skip
    rows = tl.program_id(0) * BLOCK_R + tl.arange(0, BLOCK_R)
    cols = tl.program_id(1) * BLOCK_K + tl.arange(0, BLOCK_K)
    row_ok = rows < R
    amax = tl.load(amax_ptr + rows, mask=row_ok, other=0.0)
    nonzero = amax > 0
    inv = tl.where(nonzero, tl.math.div_rn(448.0, tl.where(nonzero, amax, 1.0)), 1.0)
    if tl.program_id(1) == 0:
        tl.store(s_ptr + rows, tl.where(nonzero, tl.math.div_rn(amax, 448.0), 1.0), mask=row_ok)
    mask = row_ok[:, None] & (cols[None, :] < K)
    x = tl.load(x_ptr + rows.to(tl.int64)[:, None] * stride_xr + cols[None, :] * stride_xk,
                mask=mask, other=0.0).to(tl.float32)
    tl.store(q_ptr + rows.to(tl.int64)[:, None] * stride_qr + cols[None, :],
             _to_e4m3(x * inv[:, None], ROUND_IN_FP32), mask=mask)


@triton.jit
def _amax_kernel(
    x_ptr, amax_ptr, R, K, stride_xr, stride_xk,
    BLOCK_R: tl.constexpr, BLOCK_K: tl.constexpr,
):  # fmt: skip
    rows = tl.program_id(0) * BLOCK_R + tl.arange(0, BLOCK_R)
    cols = tl.program_id(1) * BLOCK_K + tl.arange(0, BLOCK_K)
    mask = (rows[:, None] < R) & (cols[None, :] < K)
    x = tl.load(x_ptr + rows.to(tl.int64)[:, None] * stride_xr + cols[None, :] * stride_xk,
                mask=mask, other=0.0).to(tl.float32)
    tl.atomic_max(amax_ptr, tl.max(tl.max(tl.abs(x), axis=1), axis=0))


@triton.jit
def _cast_kernel(
    x_ptr, q_ptr, amax_ptr, s_ptr, R, K, stride_xr, stride_xk, stride_qr,
    BLOCK_R: tl.constexpr, BLOCK_K: tl.constexpr, ROUND_IN_FP32: tl.constexpr,
):  # fmt: skip
    amax = tl.load(amax_ptr)
    nonzero = amax > 0
    inv = tl.where(nonzero, tl.math.div_rn(448.0, tl.where(nonzero, amax, 1.0)), 1.0)
    if (tl.program_id(0) == 0) & (tl.program_id(1) == 0):
        tl.store(s_ptr, tl.where(nonzero, tl.math.div_rn(amax, 448.0), 1.0))
    rows = tl.program_id(0) * BLOCK_R + tl.arange(0, BLOCK_R)
    cols = tl.program_id(1) * BLOCK_K + tl.arange(0, BLOCK_K)
    mask = (rows[:, None] < R) & (cols[None, :] < K)
    x = tl.load(x_ptr + rows.to(tl.int64)[:, None] * stride_xr + cols[None, :] * stride_xk,
                mask=mask, other=0.0).to(tl.float32)
    tl.store(q_ptr + rows.to(tl.int64)[:, None] * stride_qr + cols[None, :],
             _to_e4m3(x * inv, ROUND_IN_FP32), mask=mask)


@triton.jit
def _quantise_panel(
    x_ptr, q_ptr, s_ptr, panel, R, K, stride_xr, stride_xk, stride_qr,
    BLOCK_R: tl.constexpr, BLOCK_K: tl.constexpr, ROUND_IN_FP32: tl.constexpr,
    STAGES: tl.constexpr,
):  # fmt: skip
    # Rows [panel * BLOCK_R, +BLOCK_R) of X: their amax over K in registers, then the scales
    # and the cast, walking K backwards (what the first walk read last comes first).
    rows = panel * BLOCK_R + tl.arange(0, BLOCK_R)
    row_ok = rows < R
    x_rows = x_ptr + rows.to(tl.int64)[:, None] * stride_xr
    amax = tl.zeros((BLOCK_R,), dtype=tl.float32)
    for k0 in tl.range(0, K, BLOCK_K, num_stages=STAGES):
        cols = k0 + tl.arange(0, BLOCK_K)
        mask = row_ok[:, None] & (cols[None, :] < K)
        x = tl.load(x_rows + cols[None, :] * stride_xk, mask=mask, other=0.0).to(tl.float32)
        amax = tl.maximum(amax, tl.max(tl.abs(x), axis=1))
    nonzero = amax > 0
    inv = tl.where(nonzero, tl.math.div_rn(448.0, tl.where(nonzero, amax, 1.0)), 1.0)
    tl.store(s_ptr + rows, tl.where(nonzero, tl.math.div_rn(amax, 448.0), 1.0), mask=row_ok)
    q_rows = q_ptr + rows.to(tl.int64)[:, None] * stride_qr
    last = tl.cdiv(K, BLOCK_K) - 1
    for kk in tl.range(0, last + 1, num_stages=STAGES):
        cols = (last - kk) * BLOCK_K + tl.arange(0, BLOCK_K)
        mask = row_ok[:, None] & (cols[None, :] < K)
        x = tl.load(x_rows + cols[None, :] * stride_xk, mask=mask, other=0.0).to(tl.float32)
        tl.store(q_rows + cols[None, :], _to_e4m3(x * inv[:, None], ROUND_IN_FP32), mask=mask)


@triton.jit
def _row_panel_kernel(
    x_ptr, q_ptr, s_ptr, R, K, stride_xr, stride_xk, stride_qr,
    BLOCK_R: tl.constexpr, BLOCK_K: tl.constexpr, ROUND_IN_FP32: tl.constexpr,
    STAGES: tl.constexpr,
):  # fmt: skip
    for panel in range(tl.program_id(0), tl.cdiv(R, BLOCK_R), tl.num_programs(0)):
        _quantise_panel(x_ptr, q_ptr, s_ptr, panel, R, K, stride_xr, stride_xk, stride_qr,
                        BLOCK_R, BLOCK_K, ROUND_IN_FP32, STAGES)


@triton.jit
def _scaled_tile_kernel(
    x_ptr, q_ptr, s_ptr, R, K, stride_xr, stride_xk, stride_qr, stride_sr, stride_sg,
    BLOCK_R: tl.constexpr, GROUP: tl.constexpr, PER_ROW: tl.constexpr,
    ROUND_IN_FP32: tl.constexpr,
):  # fmt: skip
    # The [BLOCK_R, GROUP] tile (pid0, pid1), read once: one amax (and scale) per row of the
    # tile (PER_ROW: 1 x GROUP groups; row r's scale at s[g * stride_sg + r * stride_sr]) or
    # one for the tile (a block; at s[g * stride_sg + pid0 * stride_sr]).
    g = tl.program_id(1)
    rows = tl.program_id(0) * BLOCK_R + tl.arange(0, BLOCK_R)
    cols = g * GROUP + tl.arange(0, GROUP)
    row_ok = rows < R
    mask = row_ok[:, None] & (cols[None, :] < K)
    x = tl.load(x_ptr + rows.to(tl.int64)[:, None] * stride_xr + cols[None, :] * stride_xk,
                mask=mask, other=0.0).to(tl.float32)
    amax = tl.max(tl.abs(x), axis=1)
    if not PER_ROW:
        amax = tl.max(amax, axis=0)
    nonzero = amax > 0
    inv = tl.where(nonzero, tl.math.div_rn(448.0, tl.where(nonzero, amax, 1.0)), 1.0)
    scale = tl.where(nonzero, tl.math.div_rn(amax, 448.0), 1.0)
    if PER_ROW:
        tl.store(s_ptr + g * stride_sg + rows * stride_sr, scale, mask=row_ok)
        y = x * inv[:, None]
    else:
        tl.store(s_ptr + g * stride_sg + tl.program_id(0) * stride_sr, scale)
        y = x * inv
    tl.store(q_ptr + rows.to(tl.int64)[:, None] * stride_qr + cols[None, :],
             _to_e4m3(y, ROUND_IN_FP32), mask=mask)


@triton.jit
def _pair_panel_kernel(
    a_ptr, qa_ptr, sa_ptr, RA, stride_ar, stride_ak, stride_qar,
    b_ptr, qb_ptr, sb_ptr, RB, stride_br, stride_bk, stride_qbr, K,
    BLOCK_R: tl.constexpr, BLOCK_K: tl.constexpr, ROUND_IN_FP32: tl.constexpr,
    STAGES: tl.constexpr,
):  # fmt: skip
    # Panels [0, PA) are A's, [PA, PA + PB) B's; each program walks pid, pid + programs, ...
    pa = tl.cdiv(RA, BLOCK_R)
    for panel in range(tl.program_id(0), pa + tl.cdiv(RB, BLOCK_R), tl.num_programs(0)):
        if panel < pa:
            _quantise_panel(a_ptr, qa_ptr, sa_ptr, panel, RA, K, stride_ar, stride_ak,
                            stride_qar, BLOCK_R, BLOCK_K, ROUND_IN_FP32, STAGES)
        else:
            _quantise_panel(b_ptr, qb_ptr, sb_ptr, panel - pa, RB, K, stride_br, stride_bk,
                            stride_qbr, BLOCK_R, BLOCK_K, ROUND_IN_FP32, STAGES)


def row_stride(k: int) -> int:
    """The leading dimension of a quantised operand: K rounded up to 16 (16-byte rows)."""
    return -(-k // 16) * 16


def _buffers(x: torch.Tensor, q: torch.Tensor | None, scale: torch.Tensor | None,
             n_scales: int) -> tuple[torch.Tensor, torch.Tensor]:
    r, k = x.shape
    if q is None:
        q = torch.empty((r, row_stride(k)), dtype=torch.float8_e4m3fn, device=x.device)[:, :k]
    if scale is None:
        scale = torch.empty(n_scales, dtype=torch.float32, device=x.device)
    if (tuple(q.shape) != (r, k) or q.dtype != torch.float8_e4m3fn or q.stride(1) != 1
            or q.device != x.device):
        raise ValueError(f"q must be an fp8 e4m3 [{r}, {k}] view with unit column stride on "
                         f"{x.device}")
    if scale.numel() != n_scales or scale.dtype != torch.float32:
        raise ValueError(f"scale must hold {n_scales} fp32 values")
    return q, scale


def _two_passes(x: torch.Tensor, n_scales: int, amax_kernel: Any, cast_kernel: Any, *,
                block_r: int, block_k: int, num_warps: int, q: torch.Tensor | None,
                scale: torch.Tensor | None, amax: torch.Tensor | None
                ) -> tuple[torch.Tensor, torch.Tensor]:
    """The amax pass then the cast pass over ``[block_r, block_k]`` tiles of ``x``, with
    ``n_scales`` amax cells and scales (one per row, or one)."""
    q, scale = _buffers(x, q, scale, n_scales)
    r, k = x.shape
    if amax is None:
        amax = torch.zeros(n_scales, dtype=torch.float32, device=x.device)
    elif amax.numel() != n_scales or amax.dtype != torch.float32:
        raise ValueError(f"amax must hold {n_scales} fp32 values")
    else:
        amax.zero_()
    grid = (triton.cdiv(r, block_r), triton.cdiv(k, block_k))
    amax_kernel[grid](x, amax, r, k, x.stride(0), x.stride(1), BLOCK_R=block_r,
                      BLOCK_K=block_k, num_warps=num_warps)
    cast_kernel[grid](x, q, amax, scale, r, k, x.stride(0), x.stride(1), q.stride(0),
                      BLOCK_R=block_r, BLOCK_K=block_k, ROUND_IN_FP32=x.device.type != "cuda",
                      num_warps=num_warps)
    return q, scale


def quantise_rows(x: torch.Tensor, *, block_r: int, block_k: int, num_warps: int,
                  q: torch.Tensor | None = None, scale: torch.Tensor | None = None,
                  amax: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """``(q, scale)``: ``x`` ([R, K], any strides) quantised with one scale per row.
    ``amax``: an R-element fp32 work buffer (zeroed here)."""
    return _two_passes(x, x.shape[0], _row_amax_kernel, _row_cast_kernel, block_r=block_r,
                       block_k=block_k, num_warps=num_warps, q=q, scale=scale, amax=amax)


def quantise_tensor(x: torch.Tensor, *, block_r: int, block_k: int, num_warps: int,
                    q: torch.Tensor | None = None, scale: torch.Tensor | None = None,
                    amax: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """``(q, scale)``: ``x`` ([R, K], any strides) quantised with one scale for the tensor
    (``scale`` has one element). ``amax``: a one-element fp32 work buffer (zeroed here)."""
    return _two_passes(x, 1, _amax_kernel, _cast_kernel, block_r=block_r, block_k=block_k,
                       num_warps=num_warps, q=q, scale=scale, amax=amax)


def panel_programs(device: torch.device, panels: int, panel_bytes: int) -> int:
    """Programs of a persistent panel launch: at most as many panels in flight as half the L2
    holds (``panel_bytes``: a panel's input and fp8 output), but never fewer than the SMs, and
    the panels spread evenly (every program walks the same number, give or take one). The
    interpreter gets ``sm_count``'s few programs, so its runs walk several panels each."""
    if device.type == "cuda":
        props = torch.cuda.get_device_properties(device)
        cap = max(props.multi_processor_count, props.L2_cache_size // 2 // max(1, panel_bytes))
    else:
        cap = sm_count(device)
    waves = max(1, triton.cdiv(panels, cap))
    return max(1, triton.cdiv(panels, waves))


def _check_panel_tiles(block_r: int, block_k: int, stages: int) -> None:
    if stages < 1:
        raise ValueError(f"stages must be at least 1, got {stages}")
    for name, v in (("block_r", block_r), ("block_k", block_k)):
        if v <= 0 or v & (v - 1):
            raise ValueError(f"{name} must be a positive power of two, got {v}")


def quantise_rows_panel(x: torch.Tensor, *, block_r: int, block_k: int, num_warps: int,
                        q: torch.Tensor | None = None, scale: torch.Tensor | None = None,
                        programs: int | None = None, stages: int = PANEL_STAGES
                        ) -> tuple[torch.Tensor, torch.Tensor]:
    """``(q, scale)``: ``x`` ([R, K], any strides) quantised with one scale per row, bit for
    bit as ``quantise_rows``, in one persistent launch over panels of ``block_r`` rows
    (``programs``: how many; default ``panel_programs``; ``stages``: ``PANEL_STAGES``)."""
    _check_panel_tiles(block_r, block_k, stages)
    q, scale = _buffers(x, q, scale, x.shape[0])
    r, k = x.shape
    panels = triton.cdiv(r, block_r)
    grid = programs or panel_programs(x.device, panels, block_r * k * (x.element_size() + 1))
    _row_panel_kernel[(max(1, min(grid, panels)),)](
        x, q, scale, r, k, x.stride(0), x.stride(1), q.stride(0), BLOCK_R=block_r,
        BLOCK_K=block_k, ROUND_IN_FP32=x.device.type != "cuda", STAGES=stages,
        num_warps=num_warps)
    return q, scale


def quantise_pair_panel(a: torch.Tensor, b: torch.Tensor, *, block_r: int, block_k: int,
                        num_warps: int, qa: torch.Tensor | None = None,
                        sa: torch.Tensor | None = None, qb: torch.Tensor | None = None,
                        sb: torch.Tensor | None = None, programs: int | None = None,
                        stages: int = PANEL_STAGES
                        ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """``(qa, sa, qb, sb)``: ``a`` ([RA, K]) and ``b`` ([RB, K]; a product's ``B^T``), any
    strides, each quantised with one scale per row, bit for bit as ``quantise_rows``, in one
    launch: programs walk A's panels, then B's (``programs``: how many; default
    ``panel_programs``; ``stages``: ``PANEL_STAGES``)."""
    if a.dim() != 2 or b.dim() != 2 or a.shape[1] != b.shape[1] or a.device != b.device:
        raise ValueError(f"quantise_pair_panel takes [RA, K] and [RB, K] on one device, got "
                         f"{tuple(a.shape)} on {a.device} and {tuple(b.shape)} on {b.device}")
    _check_panel_tiles(block_r, block_k, stages)
    qa, sa = _buffers(a, qa, sa, a.shape[0])
    qb, sb = _buffers(b, qb, sb, b.shape[0])
    (ra, k), rb = a.shape, b.shape[0]
    panels = triton.cdiv(ra, block_r) + triton.cdiv(rb, block_r)
    elt = max(a.element_size(), b.element_size())
    grid = programs or panel_programs(a.device, panels, block_r * k * (elt + 1))
    _pair_panel_kernel[(max(1, min(grid, panels)),)](
        a, qa, sa, ra, a.stride(0), a.stride(1), qa.stride(0),
        b, qb, sb, rb, b.stride(0), b.stride(1), qb.stride(0), k,
        BLOCK_R=block_r, BLOCK_K=block_k, ROUND_IN_FP32=a.device.type != "cuda",
        STAGES=stages, num_warps=num_warps)
    return qa, sa, qb, sb


def whole_rows_fit(x: torch.Tensor) -> bool:
    """Whether ``quantise_whole_rows`` takes ``x``: K contiguous (a row is one run of memory)
    and at most ``WHOLE_ROW_MAX`` long."""
    return x.dim() == 2 and x.stride(1) == 1 and 0 < x.shape[1] <= WHOLE_ROW_MAX


def quantise_whole_rows(x: torch.Tensor, *, q: torch.Tensor | None = None,
                        scale: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """``(q, scale)``: ``x`` ([R, K], K contiguous, K at most ``WHOLE_ROW_MAX``) quantised with
    one scale per row, bit for bit as ``quantise_rows``, in one launch reading ``x`` once:
    each program holds whole rows in registers (``WHOLE_ROW_VALUES`` values over 8 warps)."""
    if not whole_rows_fit(x):
        raise ValueError(f"quantise_whole_rows takes a 2-D operand with unit K stride and K <= "
                         f"{WHOLE_ROW_MAX}, got shape {tuple(x.shape)}, strides {x.stride()}")
    r, k = x.shape
    q, scale = _buffers(x, q, scale, r)
    k_p2 = triton.next_power_of_2(k)
    block_r = max(1, WHOLE_ROW_VALUES // k_p2)
    _scaled_tile_kernel[(triton.cdiv(r, block_r), 1)](  # one group: the whole row
        x, q, scale, r, k, x.stride(0), x.stride(1), q.stride(0), 1, 0, BLOCK_R=block_r,
        GROUP=k_p2, PER_ROW=True, ROUND_IN_FP32=x.device.type != "cuda", num_warps=8)
    return q, scale


def group_scales(r: int, k: int) -> int:
    """Scales of an ``[r, k]`` operand quantised per row and ``GROUP`` of K
    (``quantise_groups``)."""
    return r * triton.cdiv(k, GROUP)


def block_scale_stride(k: int) -> int:
    """The row stride of ``quantise_blocks``'s scales: K's groups rounded up to 4 (16-byte
    rows, as cuBLAS's blockwise-scaled product reads them)."""
    return -(-triton.cdiv(k, GROUP) // 4) * 4


def block_scales(r: int, k: int) -> int:
    """Scale cells of an ``[r, k]`` operand quantised in ``BLOCK_ROWS x GROUP`` blocks
    (``quantise_blocks``), padding included."""
    return triton.cdiv(r, BLOCK_ROWS) * block_scale_stride(k)


def quantise_groups(x: torch.Tensor, *, block_r: int, num_warps: int,
                    q: torch.Tensor | None = None, scale: torch.Tensor | None = None
                    ) -> tuple[torch.Tensor, torch.Tensor]:
    """``(q, scale)``: ``x`` ([R, K], any strides) quantised with one scale per row and
    ``GROUP`` elements of K, in one launch reading ``x`` once (programs of ``block_r`` rows by
    one group). ``scale`` (``group_scales(R, K)`` cells given, or new) comes back as the
    ``[cdiv(K, GROUP), R]`` matrix of the scales: a group's contiguous."""
    _check_panel_tiles(block_r, GROUP, 1)
    r, k = x.shape
    q, scale = _buffers(x, q, scale, group_scales(r, k))
    _scaled_tile_kernel[(triton.cdiv(r, block_r), triton.cdiv(k, GROUP))](
        x, q, scale, r, k, x.stride(0), x.stride(1), q.stride(0), 1, r, BLOCK_R=block_r,
        GROUP=GROUP, PER_ROW=True, ROUND_IN_FP32=x.device.type != "cuda", num_warps=num_warps)
    return q, scale.view(triton.cdiv(k, GROUP), r)


def quantise_blocks(x: torch.Tensor, *, num_warps: int, q: torch.Tensor | None = None,
                    scale: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """``(q, scale)``: ``x`` ([R, K], any strides) quantised with one scale per
    ``BLOCK_ROWS x GROUP`` block, in one launch reading ``x`` once. ``scale``
    (``block_scales(R, K)`` cells given, or new) comes back as the ``[cdiv(R, BLOCK_ROWS),
    cdiv(K, GROUP)]`` matrix of the scales, its rows ``block_scale_stride(K)`` apart."""
    r, k = x.shape
    q, scale = _buffers(x, q, scale, block_scales(r, k))
    ld, groups = block_scale_stride(k), triton.cdiv(k, GROUP)
    _scaled_tile_kernel[(triton.cdiv(r, BLOCK_ROWS), groups)](
        x, q, scale, r, k, x.stride(0), x.stride(1), q.stride(0), ld, 1, BLOCK_R=BLOCK_ROWS,
        GROUP=GROUP, PER_ROW=False, ROUND_IN_FP32=x.device.type != "cuda",
        num_warps=num_warps)
    return q, scale.view(-1, ld)[:, :groups]


def quantise(x: torch.Tensor, scales: str, *, block_r: int, block_k: int, num_warps: int,
             q: torch.Tensor | None = None, scale: torch.Tensor | None = None,
             amax: torch.Tensor | None = None, mode: str = "two_pass"
             ) -> tuple[torch.Tensor, torch.Tensor]:
    """``x`` quantised with ``scales`` ``"row"`` (one scale per row) or ``"tensor"``, by
    ``mode`` (``MODES``: ``"panel"`` is per row only); ``amax``: the two-pass work buffer (R
    elements per row, one per tensor; the panel mode needs none)."""
    if x.dim() != 2:
        raise ValueError(f"quantise takes a 2-D [R, K] operand, got {x.dim()}-D")
    if scales not in ("row", "tensor"):
        raise ValueError(f"scales must be 'row' or 'tensor', got {scales!r}")
    if mode not in MODES:
        raise ValueError(f"mode must be one of {list(MODES)}, got {mode!r}")
    if mode == "panel":
        if scales != "row":
            raise ValueError("mode 'panel' quantises per row; per-tensor scales take mode "
                             "'two_pass'")
        return quantise_rows_panel(x, block_r=block_r, block_k=block_k, num_warps=num_warps,
                                   q=q, scale=scale)
    if scales == "row":
        return quantise_rows(x, block_r=block_r, block_k=block_k, num_warps=num_warps, q=q,
                             scale=scale, amax=amax)
    return quantise_tensor(x, block_r=block_r, block_k=block_k, num_warps=num_warps, q=q,
                           scale=scale, amax=amax)
