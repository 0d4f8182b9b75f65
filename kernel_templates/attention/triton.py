"""Triton flash-attention forward: one program per ``BLOCK_M`` query rows of one head.

The program walks the keys in ``BLOCK_N`` steps with an online softmax (running max and sum in
fp32, in base 2: the scale is folded with log2(e) into one multiply before ``exp2``) and an fp32
output accumulator, rescaled whenever the running max grows; the second product accumulates
into it in place (``tl.dot(p, v, acc)``). Grouped-query attention maps query head ``h`` to
key/value head ``h // group``; nothing is repeated in memory.

The key range is cut in two: blocks that every row of the program sees in full (below the
causal diagonal and inside ``s_kv``) run without masks, then the remaining blocks up to the
last key any row sees run with the causal and length masks. In the unmasked blocks the row max
is taken before the scale and the scale and the max's subtraction are one multiply-add. With
``causal`` a program never loads a block that all its rows mask (``hi``), so the work follows
the kept pairs. Ragged ``s_q`` and ``s_kv`` are handled by the masks; a query that sees no key
(causal with ``s_q > s_kv``) gets zeros.

Hopper options, each a config key (0 or 1, default 0; ``triton_config`` says when each is
legal):

- ``TMA``: Q, K, V and the output move through tensor descriptors (TMA on sm_90) over the
  operands flattened to ``[rows, d]``; it needs ``s_q % BLOCK_M == 0`` and
  ``s_kv % BLOCK_N == 0`` so a tile never crosses into the next head.
- ``WS``: the unmasked key loop is warp-specialised (``tl.range(..., warp_specialize=True)``).
- ``PERSISTENT``: one program per SM walks the tiles (query block fastest, the heaviest causal
  blocks first) instead of one program per tile.

Configuration keys: ``triton_config.FLASH_KEYS`` and ``FLASH_OPTIONAL``.
"""

from __future__ import annotations

from typing import Any

import torch
import triton
import triton.language as tl

from kernel_templates.attention.triton_config import check_flash_config
from search.kinds.attention.spec import AttentionProblem

__all__ = ["LOG2E", "flash_attention", "softmax_step", "softmax_steps", "precision"]

LOG2E = 1.4426950408889634


@triton.jit
def softmax_step(acc, l_i, m_i, q, k, v, cols, offs_m, S_KV, OFFSET, qk_scale,
                 MASKED: tl.constexpr, CAUSAL: tl.constexpr, PRECISION: tl.constexpr):
    """One key block: ``k`` is ``[D, BLOCK_N]``, ``v`` ``[BLOCK_N, D]``, ``cols`` their key
    indices; the mask is applied only when ``MASKED``."""
    s = tl.dot(q, k, input_precision=PRECISION)
    if MASKED:
        keep = cols[None, :] < S_KV
        if CAUSAL:
            keep = keep & (cols[None, :] <= offs_m[:, None] + OFFSET)
        s = tl.where(keep, s * qk_scale, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(s, 1))
        m_safe = tl.where(m_new == float("-inf"), 0.0, m_new)  # a row that has seen no key yet
        p = tl.math.exp2(s - m_safe[:, None])
    else:
        # every key of the block is kept: the max is finite, and the scale (> 0) commutes
        m_new = tl.maximum(m_i, tl.max(s, 1) * qk_scale)
        m_safe = m_new
        p = tl.math.exp2(s * qk_scale - m_new[:, None])
    alpha = tl.math.exp2(m_i - m_safe)
    l_i = l_i * alpha + tl.sum(p, 1)
    acc = acc * alpha[:, None]
    acc = tl.dot(p.to(v.dtype), v, acc, input_precision=PRECISION)
    return acc, l_i, m_new


@triton.jit
def softmax_steps(acc, l_i, m_i, q, k_base, v_base, stride_kn, stride_vn, offs_m, start, end,
                  S_KV, OFFSET, qk_scale, D: tl.constexpr, BLOCK_N: tl.constexpr,
                  MASKED: tl.constexpr, CAUSAL: tl.constexpr, PRECISION: tl.constexpr,
                  WS: tl.constexpr):
    """The online softmax over keys ``[start, end)`` read through pointers."""
    offs_n = tl.arange(0, BLOCK_N)
    offs_d = tl.arange(0, D)
    for n0 in tl.range(start, end, BLOCK_N, warp_specialize=WS):
        cols = n0 + offs_n
        k_ptrs = k_base + cols[None, :] * stride_kn + offs_d[:, None]
        v_ptrs = v_base + cols[:, None] * stride_vn + offs_d[None, :]
        if MASKED:
            k = tl.load(k_ptrs, mask=cols[None, :] < S_KV, other=0.0)
            v = tl.load(v_ptrs, mask=cols[:, None] < S_KV, other=0.0)
        else:
            k = tl.load(k_ptrs)
            v = tl.load(v_ptrs)
        acc, l_i, m_i = softmax_step(acc, l_i, m_i, q, k, v, cols, offs_m, S_KV, OFFSET,
                                     qk_scale, MASKED, CAUSAL, PRECISION)
    return acc, l_i, m_i


@triton.jit
def _softmax_steps_tma(acc, l_i, m_i, q, desc_k, desc_v, kv_row, offs_m, start, end, S_KV,
                       OFFSET, qk_scale, BLOCK_N: tl.constexpr, MASKED: tl.constexpr,
                       CAUSAL: tl.constexpr, PRECISION: tl.constexpr, WS: tl.constexpr):
    """The online softmax over keys ``[start, end)`` read through tensor descriptors."""
    offs_n = tl.arange(0, BLOCK_N)
    for n0 in tl.range(start, end, BLOCK_N, warp_specialize=WS):
        k = desc_k.load([kv_row + n0, 0]).T
        v = desc_v.load([kv_row + n0, 0])
        acc, l_i, m_i = softmax_step(acc, l_i, m_i, q, k, v, n0 + offs_n, offs_m, S_KV, OFFSET,
                                     qk_scale, MASKED, CAUSAL, PRECISION)
    return acc, l_i, m_i


@triton.jit
def _flash_tile(Q, K, V, Out, pid_m, bh, qk_scale, stride_qb, stride_qh, stride_qm, stride_kb,
                stride_kh, stride_kn, stride_vb, stride_vh, stride_vn, stride_ob, stride_oh,
                stride_om, H, GROUP, KVH, S_Q, S_KV, D: tl.constexpr, BLOCK_M: tl.constexpr,
                BLOCK_N: tl.constexpr, CAUSAL: tl.constexpr, PRECISION: tl.constexpr,
                TMA: tl.constexpr, WS: tl.constexpr):
    b = bh // H
    h = bh % H
    kvh = h // GROUP
    offset = S_KV - S_Q  # bottom-right alignment: row i sees keys j <= i + offset
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_d = tl.arange(0, D)

    full_end = (S_KV // BLOCK_N) * BLOCK_N  # blocks inside s_kv
    hi = S_KV
    if CAUSAL:
        # keys every row of this program sees: j <= first row + offset
        full_end = tl.minimum(full_end, ((pid_m * BLOCK_M + offset + 1) // BLOCK_N) * BLOCK_N)
        # the last key any row sees (its last row, clamped to s_q)
        hi = tl.minimum(S_KV, tl.minimum((pid_m + 1) * BLOCK_M, S_Q) + offset)
    full_end = tl.maximum(full_end, 0)
    hi = tl.maximum(hi, 0)

    m_i = tl.full([BLOCK_M], float("-inf"), dtype=tl.float32)
    l_i = tl.zeros([BLOCK_M], dtype=tl.float32)
    acc = tl.zeros([BLOCK_M, D], dtype=tl.float32)
    if TMA:
        q_row = bh * S_Q + pid_m * BLOCK_M
        kv_row = (b * KVH + kvh) * S_KV
        q = Q.load([q_row, 0])
        acc, l_i, m_i = _softmax_steps_tma(acc, l_i, m_i, q, K, V, kv_row, offs_m, 0, full_end,
                                           S_KV, offset, qk_scale, BLOCK_N, False, CAUSAL,
                                           PRECISION, WS)
        acc, l_i, m_i = _softmax_steps_tma(acc, l_i, m_i, q, K, V, kv_row, offs_m, full_end,
                                           hi, S_KV, offset, qk_scale, BLOCK_N, True, CAUSAL,
                                           PRECISION, False)
    else:
        q_ptrs = (Q + b * stride_qb + h * stride_qh + offs_m[:, None] * stride_qm
                  + offs_d[None, :])
        q = tl.load(q_ptrs, mask=offs_m[:, None] < S_Q, other=0.0)
        k_base = K + b * stride_kb + kvh * stride_kh
        v_base = V + b * stride_vb + kvh * stride_vh
        acc, l_i, m_i = softmax_steps(acc, l_i, m_i, q, k_base, v_base, stride_kn, stride_vn,
                                      offs_m, 0, full_end, S_KV, offset, qk_scale, D, BLOCK_N,
                                      False, CAUSAL, PRECISION, WS)
        acc, l_i, m_i = softmax_steps(acc, l_i, m_i, q, k_base, v_base, stride_kn, stride_vn,
                                      offs_m, full_end, hi, S_KV, offset, qk_scale, D, BLOCK_N,
                                      True, CAUSAL, PRECISION, False)
    l_safe = tl.where(l_i == 0.0, 1.0, l_i)  # a row that sees no key writes zeros
    out = acc / l_safe[:, None]
    if TMA:
        Out.store([bh * S_Q + pid_m * BLOCK_M, 0], out.to(Out.dtype))
    else:
        o_ptrs = (Out + b * stride_ob + h * stride_oh + offs_m[:, None] * stride_om
                  + offs_d[None, :])
        tl.store(o_ptrs, out.to(Out.dtype.element_ty), mask=offs_m[:, None] < S_Q)


@triton.jit
def _flash_fwd_kernel(Q, K, V, Out, qk_scale, stride_qb, stride_qh, stride_qm, stride_kb,
                      stride_kh, stride_kn, stride_vb, stride_vh, stride_vn, stride_ob,
                      stride_oh, stride_om, H, GROUP, KVH, S_Q, S_KV, TILES_M, TILES,
                      PROGRAMS, D: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                      CAUSAL: tl.constexpr, PRECISION: tl.constexpr, TMA: tl.constexpr,
                      WS: tl.constexpr, PERSISTENT: tl.constexpr):
    if PERSISTENT:
        # query blocks of one head run next to each other (they share its keys in L2); with a
        # causal mask the last (heaviest) block of each head comes first
        for tile in tl.range(tl.program_id(0), TILES, PROGRAMS):
            pid_m = tile % TILES_M
            if CAUSAL:
                pid_m = TILES_M - 1 - pid_m
            _flash_tile(Q, K, V, Out, pid_m, tile // TILES_M, qk_scale, stride_qb, stride_qh,
                        stride_qm, stride_kb, stride_kh, stride_kn, stride_vb, stride_vh,
                        stride_vn, stride_ob, stride_oh, stride_om, H, GROUP, KVH, S_Q, S_KV,
                        D, BLOCK_M, BLOCK_N, CAUSAL, PRECISION, TMA, WS)
    else:
        _flash_tile(Q, K, V, Out, tl.program_id(0), tl.program_id(1), qk_scale, stride_qb,
                    stride_qh, stride_qm, stride_kb, stride_kh, stride_kn, stride_vb, stride_vh,
                    stride_vn, stride_ob, stride_oh, stride_om, H, GROUP, KVH, S_Q, S_KV, D,
                    BLOCK_M, BLOCK_N, CAUSAL, PRECISION, TMA, WS)


def precision(dtype: torch.dtype) -> str:
    """``tl.dot``'s input precision: IEEE for fp32 (TF32 would miss the fp32 tolerance)."""
    return "ieee" if dtype == torch.float32 else "tf32"


_SM_COUNT: dict[int, int] = {}


def _programs(device: torch.device, tiles: int) -> int:
    """One program per SM (at most one per tile) for the persistent schedule."""
    if device.type != "cuda":
        return min(tiles, 4)
    index = device.index if device.index is not None else torch.cuda.current_device()
    if index not in _SM_COUNT:
        _SM_COUNT[index] = torch.cuda.get_device_properties(index).multi_processor_count
    return min(tiles, _SM_COUNT[index])


def _descriptors(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, out: torch.Tensor,
                 block_m: int, block_n: int) -> tuple[Any, Any, Any, Any]:
    from triton.tools.tensor_descriptor import TensorDescriptor

    for name, t in (("q", q), ("k", k), ("v", v), ("out", out)):
        if not t.is_contiguous():
            raise ValueError(f"TMA=1 needs contiguous operands; {name} is not")
    d = q.shape[-1]
    return (TensorDescriptor.from_tensor(q.view(-1, d), [block_m, d]),
            TensorDescriptor.from_tensor(k.view(-1, d), [block_n, d]),
            TensorDescriptor.from_tensor(v.view(-1, d), [block_n, d]),
            TensorDescriptor.from_tensor(out.view(-1, d), [block_m, d]))


def flash_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, out: torch.Tensor,
                    problem: AttentionProblem, config: dict[str, Any]) -> torch.Tensor:
    """``softmax(scale · Q Kᵀ + mask) V`` into ``out`` (``[batch, heads, s_q, d]``, last
    dimension contiguous) with the flash template and ``config``."""
    cfg = check_flash_config(config, problem)
    for t in (q, k, v, out):
        if t.stride(-1) != 1:
            raise ValueError("attention operands need a contiguous last dimension")
    bm, bn = cfg["BLOCK_M"], cfg["BLOCK_N"]
    tiles_m = triton.cdiv(problem.s_q, bm)
    tiles = tiles_m * problem.batch * problem.heads
    if cfg["PERSISTENT"]:
        programs = _programs(q.device, tiles)
        grid: tuple[int, ...] = (programs,)
    else:
        programs = tiles
        grid = (tiles_m, problem.batch * problem.heads)
    args = _descriptors(q, k, v, out, bm, bn) if cfg["TMA"] else (q, k, v, out)
    _flash_fwd_kernel[grid](
        *args, float(problem.scale) * LOG2E,
        q.stride(0), q.stride(1), q.stride(2), k.stride(0), k.stride(1), k.stride(2),
        v.stride(0), v.stride(1), v.stride(2), out.stride(0), out.stride(1), out.stride(2),
        problem.heads, problem.group, int(problem.kv_heads or problem.heads), problem.s_q,
        problem.s_kv, tiles_m, tiles, programs,
        D=problem.d, BLOCK_M=bm, BLOCK_N=bn, CAUSAL=problem.causal,
        PRECISION=precision(q.dtype), TMA=bool(cfg["TMA"]), WS=bool(cfg["WS"]),
        PERSISTENT=bool(cfg["PERSISTENT"]), num_warps=cfg["num_warps"],
        num_stages=cfg["num_stages"])
    return out
