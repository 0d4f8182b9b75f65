"""Triton flash-attention forward: one program per ``BLOCK_M`` query rows of one head.

The program walks the keys in ``BLOCK_N`` steps with an online softmax (running max and sum in
fp32, in base 2: the scale is folded with log2(e) into one multiply before ``exp2``) and an fp32
output accumulator, rescaled whenever the running max grows. Grouped-query attention maps query
head ``h`` to key/value head ``h // group``; nothing is repeated in memory.

The key range is cut in two: blocks that every row of the program sees in full (below the
causal diagonal and inside ``s_kv``) run without masks, then the remaining blocks up to the
last key any row sees run with the causal and length masks. With ``causal`` a program never
loads a block that all its rows mask (``hi``), so the work follows the kept pairs. Ragged
``s_q`` and ``s_kv`` are handled by the masks; a query that sees no key (causal with
``s_q > s_kv``) gets zeros.

Configuration keys: ``triton_config.FLASH_KEYS`` (``BLOCK_M``, ``BLOCK_N``, ``num_warps``,
``num_stages``).
"""

from __future__ import annotations

from typing import Any

import torch
import triton
import triton.language as tl

from kernel_templates.attention.triton_config import check_flash_config
from search.kinds.attention.spec import AttentionProblem

__all__ = ["LOG2E", "flash_attention", "softmax_steps", "precision"]

LOG2E = 1.4426950408889634


@triton.jit
def softmax_steps(acc, l_i, m_i, q, k_base, v_base, stride_kn, stride_vn, offs_m, start, end,
                  S_KV, OFFSET, qk_scale, D: tl.constexpr, BLOCK_N: tl.constexpr,
                  MASKED: tl.constexpr, CAUSAL: tl.constexpr, PRECISION: tl.constexpr):
    """The online softmax over keys ``[start, end)``, masking only when ``MASKED``."""
    offs_n = tl.arange(0, BLOCK_N)
    offs_d = tl.arange(0, D)
    for n0 in range(start, end, BLOCK_N):
        cols = n0 + offs_n
        k_ptrs = k_base + cols[None, :] * stride_kn + offs_d[:, None]
        v_ptrs = v_base + cols[:, None] * stride_vn + offs_d[None, :]
        if MASKED:
            k = tl.load(k_ptrs, mask=cols[None, :] < S_KV, other=0.0)
            v = tl.load(v_ptrs, mask=cols[:, None] < S_KV, other=0.0)
        else:
            k = tl.load(k_ptrs)
            v = tl.load(v_ptrs)
        s = tl.dot(q, k, input_precision=PRECISION) * qk_scale
        if MASKED:
            keep = cols[None, :] < S_KV
            if CAUSAL:
                keep = keep & (cols[None, :] <= offs_m[:, None] + OFFSET)
            s = tl.where(keep, s, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(s, 1))
        m_safe = tl.where(m_new == float("-inf"), 0.0, m_new)  # a row that has seen no key yet
        p = tl.math.exp2(s - m_safe[:, None])
        alpha = tl.math.exp2(m_i - m_safe)
        l_i = l_i * alpha + tl.sum(p, 1)
        acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v, input_precision=PRECISION)
        m_i = m_new
    return acc, l_i, m_i


@triton.jit
def _flash_fwd_kernel(Q, K, V, Out, qk_scale, stride_qb, stride_qh, stride_qm, stride_kb,
                      stride_kh, stride_kn, stride_vb, stride_vh, stride_vn, stride_ob,
                      stride_oh, stride_om, H, GROUP, S_Q, S_KV, D: tl.constexpr,
                      BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, CAUSAL: tl.constexpr,
                      PRECISION: tl.constexpr):
    pid_m = tl.program_id(0)
    bh = tl.program_id(1)
    b = bh // H
    h = bh % H
    kvh = h // GROUP
    offset = S_KV - S_Q  # bottom-right alignment: row i sees keys j <= i + offset
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_d = tl.arange(0, D)
    q_ptrs = Q + b * stride_qb + h * stride_qh + offs_m[:, None] * stride_qm + offs_d[None, :]
    q = tl.load(q_ptrs, mask=offs_m[:, None] < S_Q, other=0.0)
    k_base = K + b * stride_kb + kvh * stride_kh
    v_base = V + b * stride_vb + kvh * stride_vh

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
    acc, l_i, m_i = softmax_steps(acc, l_i, m_i, q, k_base, v_base, stride_kn, stride_vn, offs_m,
                                  0, full_end, S_KV, offset, qk_scale, D, BLOCK_N, False, CAUSAL,
                                  PRECISION)
    acc, l_i, m_i = softmax_steps(acc, l_i, m_i, q, k_base, v_base, stride_kn, stride_vn, offs_m,
                                  full_end, hi, S_KV, offset, qk_scale, D, BLOCK_N, True, CAUSAL,
                                  PRECISION)
    l_safe = tl.where(l_i == 0.0, 1.0, l_i)  # a row that sees no key writes zeros
    out = acc / l_safe[:, None]
    o_ptrs = Out + b * stride_ob + h * stride_oh + offs_m[:, None] * stride_om + offs_d[None, :]
    tl.store(o_ptrs, out.to(Out.dtype.element_ty), mask=offs_m[:, None] < S_Q)


def precision(dtype: torch.dtype) -> str:
    """``tl.dot``'s input precision: IEEE for fp32 (TF32 would miss the fp32 tolerance)."""
    return "ieee" if dtype == torch.float32 else "tf32"


def flash_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, out: torch.Tensor,
                    problem: AttentionProblem, config: dict[str, Any]) -> torch.Tensor:
    """``softmax(scale · Q Kᵀ + mask) V`` into ``out`` (``[batch, heads, s_q, d]``, last
    dimension contiguous) with the flash template and ``config``."""
    cfg = check_flash_config(config)
    for t in (q, k, v, out):
        if t.stride(-1) != 1:
            raise ValueError("attention operands need a contiguous last dimension")
    grid = (triton.cdiv(problem.s_q, cfg["BLOCK_M"]), problem.batch * problem.heads)
    _flash_fwd_kernel[grid](
        q, k, v, out, float(problem.scale) * LOG2E,
        q.stride(0), q.stride(1), q.stride(2), k.stride(0), k.stride(1), k.stride(2),
        v.stride(0), v.stride(1), v.stride(2), out.stride(0), out.stride(1), out.stride(2),
        problem.heads, problem.group, problem.s_q, problem.s_kv,
        D=problem.d, BLOCK_M=cfg["BLOCK_M"], BLOCK_N=cfg["BLOCK_N"], CAUSAL=problem.causal,
        PRECISION=precision(q.dtype), num_warps=cfg["num_warps"], num_stages=cfg["num_stages"])
    return out
