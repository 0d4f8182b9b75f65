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

__all__ = ["E4M3_MAX", "quantise", "quantise_rows", "quantise_tensor", "row_stride"]

#: The largest finite e4m3 magnitude: the scales map each row's (tensor's) amax there.
E4M3_MAX = 448.0


@triton.jit
def _round_e4m3(x):
    # Nearest-even e4m3 value of fp32 ``x`` (|x| <= 448), in fp32 arithmetic. Normal range: keep
    # 3 of the 23 mantissa bits (round half to even on the 20 dropped). Below 2**-6 (e4m3's
    # subnormals, steps of 2**-9): add and subtract 1.5 * 2**14, where fp32's step is 2**-9.
    bits = x.to(tl.uint32, bitcast=True)
    lsb = (bits >> 20) & 1
    normal = ((bits + 0x7FFFF + lsb) & 0xFFF00000).to(tl.float32, bitcast=True)
    magic = 24576.0
    sub = (x + magic) - magic
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


def quantise(x: torch.Tensor, scales: str, *, block_r: int, block_k: int, num_warps: int,
             q: torch.Tensor | None = None, scale: torch.Tensor | None = None,
             amax: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """``x`` quantised with ``scales`` ``"row"`` (one scale per row) or ``"tensor"``;
    ``amax``: the work buffer (R elements per row, one per tensor)."""
    if x.dim() != 2:
        raise ValueError(f"quantise takes a 2-D [R, K] operand, got {x.dim()}-D")
    if scales == "row":
        return quantise_rows(x, block_r=block_r, block_k=block_k, num_warps=num_warps, q=q,
                             scale=scale, amax=amax)
    if scales == "tensor":
        return quantise_tensor(x, block_r=block_r, block_k=block_k, num_warps=num_warps, q=q,
                               scale=scale, amax=amax)
    raise ValueError(f"scales must be 'row' or 'tensor', got {scales!r}")
