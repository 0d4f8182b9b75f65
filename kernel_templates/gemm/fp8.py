"""Triton fp8 e4m3 GEMM: TMA loads, ``tl.dot`` on fp8 (wgmma on sm_90), scales in the epilogue.

``C = (scale_a * A) @ (scale_b * B)`` with A ``[M, K]`` and B ``[K, N]`` in fp8 e4m3, both read
K-major as the fp8 tensor cores require (A row-major, B column-major: its transpose ``[N, K]``
is what the descriptor describes), an fp32 accumulator, and the scales applied to the
accumulator before the cast to the output dtype (bf16, fp16 or fp32). Scales are per tensor (one
fp32 each, ``torch._scaled_mm``'s) or per row of A and per column of B.

Two entry points:

- ``scaled_matmul``: an fp8 problem's inputs (``GemmProblem.scaled``: per-tensor scales);
- ``lowered_matmul``: a bf16/fp16 product computed in fp8 (a *lowered* candidate, allowed by a
  job's ``policy.allow``): the call quantises A and B (``fp8_quant``: fused amax, scale and cast,
  per row/column or per tensor as ``SCALES`` says), multiplies, and writes the dequantised
  product in the output dtype; everything a user would have to do is inside the call, so it is
  inside the timing.

Configuration keys (``search.kinds.gemm.fp8_space``): ``BLOCK_M``, ``BLOCK_N``, ``BLOCK_K``,
``GROUP_M``, ``num_warps``, ``num_stages`` and

- ``PERSISTENT`` (0/1): one program per SM (cluster) walking output tiles in the grouped order,
  its tile and K loops fused into one software pipeline;
- ``num_ctas`` (1/2): the cluster launch (``search.kinds.gemm.cluster`` says where it runs: A is
  always row-major here, so wherever Triton compiles the tile in a cluster,
  ``fp8_cluster_refusal``);
- ``FAST_ACC`` (0/1): 0 (default) promotes the tensor cores' partial sums into the fp32
  accumulator once per ``BLOCK_K`` (``max_num_imprecise_acc=BLOCK_K``: the fp8 wgmma's own
  accumulator keeps about 14 bits, so over a long K it would drift); 1 keeps the sums in the
  tensor cores throughout (Triton's default on sm_90, ``torch._scaled_mm(use_fast_accum=True)``);
- ``TMA_STORE`` (0/1): the output through a TMA descriptor (its rows must be 16-byte aligned);
- lowered only: ``PRODUCT`` (``"triton"``, the default: this template multiplies;
  ``"cublas"``: block scales, and cuBLAS's blockwise-scaled fp8 kernel multiplies the copies
  this module's quantisation made, ``cublas_block_product``), ``PRECISION`` (``"fp8_e4m3"``),
  ``SCALES`` (``"row"``, ``"tensor"``, ``"block"``),
  ``Q_MODE`` (``"two_pass"``, the default: amax and cast launches per operand;
  ``"whole_rows"``: an operand whose rows are contiguous (A row-major, B column-major) in one
  launch holding whole rows, the other in two passes; ``"panel"``: one launch quantising
  both operands in panels of whole rows; both per-row scales only) and the quantisation
  kernels' ``Q_BLOCK_R``, ``Q_BLOCK_K``, ``Q_WARPS`` (the two-pass launches' tiles).

The interpreter runs every path (it ignores ``num_ctas`` and the accumulation setting).
"""

from __future__ import annotations

from typing import Any

import torch
import triton
import triton.language as tl

from kernel_templates.errors import Unsupported
from kernel_templates.gemm.fp8_config import check_config
from kernel_templates.gemm.fp8_quant import (
    BLOCK_ROWS,
    GROUP,
    block_scales,
    group_scales,
    quantise,
    quantise_blocks,
    quantise_groups,
    quantise_pair_panel,
    quantise_whole_rows,
    row_stride,
    whole_rows_fit,
)
from kernel_templates.gemm.host import cached_buffer, cc_major, sm_count
from kernel_templates.gemm.triton import _store_c, _tile_coords
from search.kinds.gemm.fp8_space import block_tile_refusal

__all__ = ["OUT_DTYPES", "cublas_block_product", "fp8_gemm", "lowered_matmul",
           "scaled_matmul"]

F8 = torch.float8_e4m3fn
#: Warps of the launch quantising B in 128 x 128 blocks (a block is 16,384 values: 64 fp32
#: registers a thread at 8 warps).
B_BLOCK_WARPS = 8
#: Output dtypes the template writes.
OUT_DTYPES = (torch.bfloat16, torch.float16, torch.float32)


@triton.jit
def _partial(a, b, acc, sa_ptr, sb_ptr, kk, offs_m, off_n, M, SB_LD,
             BLOCK_SCALES: tl.constexpr, IMPRECISE: tl.constexpr, SB_ROWS: tl.constexpr):
    # One K tile's product into the accumulator. Block scales (``BLOCK_K`` = the scales' group,
    # the tile inside one of B's 128-column blocks): the tile's partial sums times A's row
    # scales and B's block scale of this group, added to the fp32 accumulator.
    if BLOCK_SCALES:
        s = tl.load(sa_ptr + kk * M + offs_m, mask=offs_m < M, other=0.0)
        s = s * tl.load(sb_ptr + (off_n // SB_ROWS) * SB_LD + kk)
        return acc + tl.dot(a, b.T) * s[:, None]
    return tl.dot(a, b.T, acc, max_num_imprecise_acc=IMPRECISE)


@triton.jit
def _scaled(acc, sa_ptr, sb_ptr, offs_m, offs_n, M, N, ROW_SCALES: tl.constexpr,
            BLOCK_SCALES: tl.constexpr):
    if BLOCK_SCALES:  # applied in the main loop
        return acc
    if ROW_SCALES:
        sa = tl.load(sa_ptr + offs_m, mask=offs_m < M, other=0.0)
        sb = tl.load(sb_ptr + offs_n, mask=offs_n < N, other=0.0)
        return acc * sa[:, None] * sb[None, :]
    return acc * (tl.load(sa_ptr) * tl.load(sb_ptr))


@triton.jit
def _fp8_gemm_kernel(
    a_desc, b_desc, c_ptr, c_desc, sa_ptr, sb_ptr, M, N, K, SB_LD, stride_cm, stride_cn,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
    GROUP_M: tl.constexpr, ROW_SCALES: tl.constexpr, BLOCK_SCALES: tl.constexpr,
    EVEN_MN: tl.constexpr, IMPRECISE: tl.constexpr, TMA_STORE: tl.constexpr,
    SB_ROWS: tl.constexpr,
):  # fmt: skip
    pid_m, pid_n = _tile_coords(tl.program_id(0), M, N, BLOCK_M, BLOCK_N, GROUP_M)
    off_m = pid_m * BLOCK_M
    off_n = pid_n * BLOCK_N
    offs_m = off_m + tl.arange(0, BLOCK_M)
    offs_n = off_n + tl.arange(0, BLOCK_N)
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for kk in range(0, tl.cdiv(K, BLOCK_K)):
        a = a_desc.load([off_m, kk * BLOCK_K])
        b = b_desc.load([off_n, kk * BLOCK_K])
        acc = _partial(a, b, acc, sa_ptr, sb_ptr, kk, offs_m, off_n, M, SB_LD, BLOCK_SCALES,
                       IMPRECISE, SB_ROWS)
    acc = _scaled(acc, sa_ptr, sb_ptr, offs_m, offs_n, M, N, ROW_SCALES, BLOCK_SCALES)
    if TMA_STORE:
        c_desc.store([off_m, off_n], acc.to(c_desc.dtype))
    else:
        _store_c(c_ptr, acc, offs_m, offs_n, M, N, stride_cm, stride_cn, EVEN_MN)


@triton.jit
def _fp8_gemm_persistent_kernel(
    a_desc, b_desc, c_ptr, c_desc, sa_ptr, sb_ptr, M, N, K, SB_LD, stride_cm, stride_cn,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
    GROUP_M: tl.constexpr, ROW_SCALES: tl.constexpr, BLOCK_SCALES: tl.constexpr,
    EVEN_MN: tl.constexpr, IMPRECISE: tl.constexpr, TMA_STORE: tl.constexpr,
    SB_ROWS: tl.constexpr,
):  # fmt: skip
    # As ``_fp8_gemm_kernel``, but at most one program per SM (cluster), each walking the
    # output tiles tile0, tile0 + programs, ... with the tile and K loops fused into one
    # pipeline, so the next tile's loads are in flight during this tile's epilogue.
    num_tiles = tl.cdiv(M, BLOCK_M) * tl.cdiv(N, BLOCK_N)
    k_tiles = tl.cdiv(K, BLOCK_K)
    for tile in tl.range(tl.program_id(0), num_tiles, tl.num_programs(0), flatten=True):
        pid_m, pid_n = _tile_coords(tile, M, N, BLOCK_M, BLOCK_N, GROUP_M)
        off_m = pid_m * BLOCK_M
        off_n = pid_n * BLOCK_N
        offs_m = off_m + tl.arange(0, BLOCK_M)
        offs_n = off_n + tl.arange(0, BLOCK_N)
        acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
        for kk in tl.range(0, k_tiles):
            a = a_desc.load([off_m, kk * BLOCK_K])
            b = b_desc.load([off_n, kk * BLOCK_K])
            acc = _partial(a, b, acc, sa_ptr, sb_ptr, kk, offs_m, off_n, M, SB_LD, BLOCK_SCALES,
                           IMPRECISE, SB_ROWS)
        acc = _scaled(acc, sa_ptr, sb_ptr, offs_m, offs_n, M, N, ROW_SCALES, BLOCK_SCALES)
        if TMA_STORE:
            c_desc.store([off_m, off_n], acc.to(c_desc.dtype))
        else:
            _store_c(c_ptr, acc, offs_m, offs_n, M, N, stride_cm, stride_cn, EVEN_MN)


def _describe(t: torch.Tensor, block: tuple[int, int], what: str) -> Any:
    """A TMA descriptor of a 2-D tensor with unit column stride and 16-byte aligned rows."""
    from triton.tools.tensor_descriptor import TensorDescriptor

    if (t.stride(1) != 1 or (t.stride(0) * t.element_size()) % 16 or t.data_ptr() % 16):
        raise Unsupported(f"{what} cannot be described for TMA loads: it needs unit column "
                          "stride, 16-byte aligned rows and a 16-byte aligned base")
    return TensorDescriptor(t, list(t.shape), [t.stride(0), 1], list(block))


def _check_device(device: torch.device) -> None:
    if device.type == "cuda" and cc_major(device) < 9:
        raise Unsupported(f"the fp8 template needs a Hopper or later GPU (TMA, fp8 wgmma); "
                          f"this one is {cc_major(device)}.x")


def fp8_gemm(qa: torch.Tensor, qb: torch.Tensor, scale_a: torch.Tensor, scale_b: torch.Tensor,
             cfg: dict[str, Any], out: torch.Tensor, block_scales: bool = False
             ) -> torch.Tensor:
    """``out = (scale_a * qa) @ (scale_b * qb).T`` for K-major fp8 ``qa`` ``[M, K]`` and ``qb``
    ``[N, K]`` (unit column stride, 16-byte aligned rows), fp32 scales of one element each or
    of M and N elements, under a checked config ``cfg``, into a contiguous 2-D ``out``.
    ``block_scales``: A's scales per row and 128 of K (``[K/128, M]``, contiguous), B's per
    128 x 128 block (``[N/128, K/128]``, unit column stride), as ``fp8_quant.quantise_groups``
    and ``quantise_blocks`` return them, applied per K tile (``BLOCK_K`` 128, ``BLOCK_N``
    dividing 128)."""
    m, k = qa.shape
    n = qb.shape[0]
    if qb.shape[1] != k or qa.dtype != F8 or qb.dtype != F8:
        raise ValueError(f"fp8_gemm takes fp8 e4m3 [M, K] and [N, K], got {qa.dtype} "
                         f"{tuple(qa.shape)} and {qb.dtype} {tuple(qb.shape)}")
    if tuple(out.shape) != (m, n) or not out.is_contiguous() or out.dtype not in OUT_DTYPES:
        raise ValueError(f"out must be a contiguous [{m}, {n}] tensor of one of {OUT_DTYPES}")
    bm, bn, bk = cfg["BLOCK_M"], cfg["BLOCK_N"], cfg["BLOCK_K"]
    rows = scale_a.numel() > 1
    sb_ld = 0
    if block_scales:
        groups = triton.cdiv(k, GROUP)
        want = ((groups, m), (triton.cdiv(n, BLOCK_ROWS), groups))
        if ((tuple(scale_a.shape), tuple(scale_b.shape)) != want or not scale_a.is_contiguous()
                or scale_b.stride(1) != 1):
            raise ValueError(f"block scales of [{m}, {k}] and [{n}, {k}] are contiguous "
                             f"{want[0]} and {want[1]} with unit column stride, got "
                             f"{tuple(scale_a.shape)} and {tuple(scale_b.shape)}")
        sb_ld = scale_b.stride(0)
        why = block_tile_refusal(bk, bn)
        if why:
            raise ValueError(why)
    elif (scale_a.numel(), scale_b.numel()) not in ((1, 1), (m, n)):
        raise ValueError(f"scales must be per tensor (1, 1) or per row and column ({m}, {n}), "
                         f"got ({scale_a.numel()}, {scale_b.numel()})")
    _check_device(qa.device)
    da = _describe(qa, (bm, bk), "A")
    db = _describe(qb, (bn, bk), "B")
    dc = _describe(out, (bm, bn), "the output") if cfg["TMA_STORE"] else None
    launch: dict[str, Any] = {"num_warps": cfg["num_warps"], "num_stages": cfg["num_stages"]}
    if cfg["num_ctas"] > 1:
        launch["num_ctas"] = cfg["num_ctas"]
    tiles = triton.cdiv(m, bm) * triton.cdiv(n, bn)
    kernel = _fp8_gemm_persistent_kernel if cfg["PERSISTENT"] else _fp8_gemm_kernel
    programs = (max(1, min(sm_count(qa.device) // cfg["num_ctas"], tiles)) if cfg["PERSISTENT"]
                else tiles)
    kernel[(programs,)](
        da, db, out, dc, scale_a, scale_b, m, n, k, sb_ld, out.stride(0),
        out.stride(1), BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk, GROUP_M=cfg["GROUP_M"],
        ROW_SCALES=rows, BLOCK_SCALES=block_scales, EVEN_MN=m % bm == 0 and n % bn == 0,
        IMPRECISE=None if cfg["FAST_ACC"] or block_scales else bk, TMA_STORE=dc is not None,
        SB_ROWS=BLOCK_ROWS, **launch,
    )  # fmt: skip
    return out


def cublas_block_product(qa: torch.Tensor, qb: torch.Tensor, scale_a: torch.Tensor,
                         scale_b: torch.Tensor, out: torch.Tensor) -> torch.Tensor:
    """``out = qa @ qb.T`` with ``fp8_gemm``'s block scales (A's ``[K/128, M]``, B's
    ``[N/128, K/128]``) by cuBLAS's blockwise-scaled fp8 product (``torch._scaled_mm`` with
    1 x 128 and 128 x 128 fp32 scales, M-major and K-major as it reads them: the transposes of
    those matrices). A CUDA sm_90 device only; K and N multiples of 16."""
    if qa.device.type != "cuda":
        raise Unsupported("cuBLAS's blockwise-scaled fp8 product runs on a CUDA GPU, not "
                          f"on {qa.device.type}")
    _check_device(qa.device)
    return torch._scaled_mm(qa, qb.T, scale_a=scale_a.T, scale_b=scale_b.T,
                            out_dtype=out.dtype, out=out)


def _2d(t: torch.Tensor, what: str) -> torch.Tensor:
    if t.dim() == 3 and t.shape[0] == 1:
        return t[0]
    if t.dim() != 2:
        raise Unsupported(f"the fp8 template serves 2-D (batch 1) products; {what} is "
                          f"{tuple(t.shape)}")
    return t


def scaled_matmul(a: torch.Tensor, b: torch.Tensor, scale_a: torch.Tensor,
                  scale_b: torch.Tensor, config: dict[str, Any], out: torch.Tensor
                  ) -> torch.Tensor:
    """``out = (scale_a * a) @ (scale_b * b)`` for fp8 e4m3 ``a`` ``[M, K]`` (row-major) and
    ``b`` ``[K, N]`` (column-major) with per-tensor scales: an fp8 problem's product."""
    cfg = check_config(config, lowered=False)
    a2, b2, out2 = _2d(a, "A"), _2d(b, "B"), _2d(out, "the output")
    return fp8_gemm(a2, b2.T, scale_a.reshape(1), scale_b.reshape(1), cfg, out2)


_Q_A: dict[torch.device, torch.Tensor] = {}
_Q_B: dict[torch.device, torch.Tensor] = {}
_SCALES: dict[torch.device, torch.Tensor] = {}


def _quantised_buffers(device: torch.device, m: int, n: int, k: int
                       ) -> tuple[torch.Tensor, ...]:
    """Reused per device (like the split-K workspace, not for two concurrent streams): the
    fp8 copies of A ``[M, K]`` and B ``[N, K]`` (rows padded to 16 bytes), their per-row
    scales and amax work buffers (one cell per row), and their block scales' cells
    (``group_scales``, ``block_scales``): the last two share the memory of the first four, a
    call using one set or the other."""
    ld = row_stride(k)
    qa = cached_buffer(_Q_A, device, m * ld, F8, zeroed=False, least=1 << 16)
    qb = cached_buffer(_Q_B, device, n * ld, F8, zeroed=False, least=1 << 16)
    ga, gb = group_scales(m, k), block_scales(n, k)
    s = cached_buffer(_SCALES, device, max(2 * (m + n), ga + gb), torch.float32, zeroed=False,
                      least=1 << 12)
    return (qa.view(m, ld)[:, :k], qb.view(n, ld)[:, :k], s[:m], s[m:m + n],
            s[m + n:2 * m + n], s[2 * m + n:2 * (m + n)], s[:ga], s[ga:ga + gb])


def lowered_matmul(a: torch.Tensor, b: torch.Tensor, config: dict[str, Any],
                   out: torch.Tensor) -> torch.Tensor:
    """``out ≈ a @ b`` for bf16/fp16 ``a`` ``[M, K]`` and ``b`` ``[K, N]`` (any layouts)
    computed in fp8 e4m3: both quantised (``config["SCALES"]``: per row of A and column of B,
    or per tensor; ``config["Q_MODE"]``: how), multiplied, and dequantised into ``out``
    (bf16, fp16 or fp32)."""
    cfg = check_config(config, lowered=True)
    a2, b2, out2 = _2d(a, "A"), _2d(b, "B"), _2d(out, "the output")
    if a2.dtype not in (torch.bfloat16, torch.float16) or b2.dtype != a2.dtype:
        raise Unsupported(f"lowered fp8 computation quantises bf16 or fp16 inputs, got "
                          f"{a2.dtype} and {b2.dtype}")
    _check_device(a2.device)
    m, k = a2.shape
    n = b2.shape[1]
    qa, qb, sa, sb, amax_a, amax_b, ga, gb = _quantised_buffers(a2.device, m, n, k)
    if cfg["SCALES"] == "block":
        qa, ga = quantise_groups(a2, block_r=cfg["Q_BLOCK_R"], num_warps=cfg["Q_WARPS"], q=qa,
                                 scale=ga)
        qb, gb = quantise_blocks(b2.T, num_warps=B_BLOCK_WARPS, q=qb, scale=gb)
        if cfg["PRODUCT"] == "cublas":
            return cublas_block_product(qa, qb, ga, gb, out2)
        return fp8_gemm(qa, qb, ga, gb, cfg, out2, block_scales=True)
    per_row = cfg["SCALES"] == "row"
    q = {"block_r": cfg["Q_BLOCK_R"], "block_k": cfg["Q_BLOCK_K"], "num_warps": cfg["Q_WARPS"]}
    if cfg["Q_MODE"] == "panel":  # per row (check_config refuses it with SCALES="tensor")
        qa, sa, qb, sb = quantise_pair_panel(a2, b2.T, qa=qa, sa=sa, qb=qb, sb=sb, **q)
        return fp8_gemm(qa, qb, sa, sb, cfg, out2)
    whole = cfg["Q_MODE"] == "whole_rows"  # per row (check_config refuses it otherwise)

    def operand(x: torch.Tensor, into: torch.Tensor, scale: torch.Tensor,
                amax: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        if whole and whole_rows_fit(x):
            return quantise_whole_rows(x, q=into, scale=scale)
        return quantise(x, cfg["SCALES"], q=into, scale=scale if per_row else scale[:1],
                        amax=amax if per_row else amax[:1], **q)

    qa, sa = operand(a2, qa, sa, amax_a)
    qb, sb = operand(b2.T, qb, sb, amax_b)
    return fp8_gemm(qa, qb, sa, sb, cfg, out2)
