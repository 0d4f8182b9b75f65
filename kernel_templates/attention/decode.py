"""Triton split-KV decode attention for short queries (``s_q <= DECODE_MAX_SQ``).

A decode step has few query rows per head, so one program per query tile would leave the GPU
idle while one program reads a whole key/value sequence. Here the query heads that share a
key/value head are packed with their ``s_q`` queries into one tile of
``decode_block_m(problem)`` rows (row ``r`` is query head ``r // s_q``, query ``r % s_q``), so
each key/value block is loaded once for all of them, and the key length is cut into
``NUM_SPLITS`` chunks (multiples of ``BLOCK_N``), one program each: grid
``(NUM_SPLITS, batch * kv_heads)``. Each program runs the flash template's online softmax
(fp32, base 2) over its chunk and writes its partial (running max, sum and unnormalised
output) to an fp32 workspace; a second small kernel combines the splits per row in a fixed
order and writes the output; with one split the program writes the output itself (one launch,
no workspace traffic). The causal mask (bottom-right) is applied per row; blocks beyond the
causal diagonal of the first query are the only masked ones.

The workspace is allocated with the launcher (``DecodeWorkspace``), outside the timed call.
Configuration keys: ``triton_config.DECODE_KEYS`` (``NUM_SPLITS``, ``BLOCK_N``, ``num_warps``;
``num_stages`` optional).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
import triton
import triton.language as tl

from kernel_templates.attention.triton import LOG2E, precision, softmax_steps
from kernel_templates.attention.triton_config import check_decode_config, decode_block_m
from kernel_templates.errors import Unsupported
from search.kinds.attention.spec import AttentionProblem

__all__ = ["DecodeWorkspace", "decode_attention", "split_chunk"]


@triton.jit
def _decode_split_kernel(Q, K, V, M_ws, L_ws, A_ws, Out, qk_scale, stride_qb, stride_qh,
                         stride_qm, stride_kb, stride_kh, stride_kn, stride_vb, stride_vh,
                         stride_vn, stride_ob, stride_oh, stride_om, KVH, GROUP, S_Q, S_KV, CHUNK,
                         NUM_SPLITS, D: tl.constexpr, BLOCK_M: tl.constexpr,
                         BLOCK_N: tl.constexpr, CAUSAL: tl.constexpr, PRECISION: tl.constexpr,
                         DIRECT: tl.constexpr):
    split = tl.program_id(0)
    bkv = tl.program_id(1)
    b = bkv // KVH
    kvh = bkv % KVH
    offset = S_KV - S_Q
    rows = tl.arange(0, BLOCK_M)
    head = kvh * GROUP + rows // S_Q
    query = rows % S_Q
    valid = rows < GROUP * S_Q
    offs_d = tl.arange(0, D)
    q_ptrs = (Q + b * stride_qb + head[:, None] * stride_qh + query[:, None] * stride_qm
              + offs_d[None, :])
    q = tl.load(q_ptrs, mask=valid[:, None], other=0.0)
    k_base = K + b * stride_kb + kvh * stride_kh
    v_base = V + b * stride_vb + kvh * stride_vh

    start = split * CHUNK
    end = tl.minimum(start + CHUNK, S_KV)
    full_end = (S_KV // BLOCK_N) * BLOCK_N
    if CAUSAL:
        full_end = tl.minimum(full_end, ((offset + 1) // BLOCK_N) * BLOCK_N)  # query 0's keys
    full_end = tl.maximum(tl.minimum(full_end, end), start)

    m_i = tl.full([BLOCK_M], float("-inf"), dtype=tl.float32)
    l_i = tl.zeros([BLOCK_M], dtype=tl.float32)
    acc = tl.zeros([BLOCK_M, D], dtype=tl.float32)
    acc, l_i, m_i = softmax_steps(acc, l_i, m_i, q, k_base, v_base, stride_kn, stride_vn, query,
                                  start, full_end, S_KV, offset, qk_scale, D, BLOCK_N, False,
                                  CAUSAL, PRECISION, False)
    acc, l_i, m_i = softmax_steps(acc, l_i, m_i, q, k_base, v_base, stride_kn, stride_vn, query,
                                  full_end, end, S_KV, offset, qk_scale, D, BLOCK_N, True, CAUSAL,
                                  PRECISION, False)
    if DIRECT:
        # one split: this program saw every key of its rows, so it writes the output itself
        out = acc / tl.where(l_i == 0.0, 1.0, l_i)[:, None]  # a query that sees no key: zeros
        o_ptrs = (Out + b * stride_ob + head[:, None] * stride_oh + query[:, None] * stride_om
                  + offs_d[None, :])
        tl.store(o_ptrs, out.to(Out.dtype.element_ty), mask=valid[:, None])
    else:
        ws = bkv * NUM_SPLITS + split
        tl.store(M_ws + ws * BLOCK_M + rows, m_i)
        tl.store(L_ws + ws * BLOCK_M + rows, l_i)
        tl.store(A_ws + (ws * BLOCK_M + rows[:, None]) * D + offs_d[None, :], acc)


@triton.jit
def _decode_combine_kernel(M_ws, L_ws, A_ws, Out, stride_ob, stride_oh, stride_om, KVH, GROUP,
                           S_Q, NUM_SPLITS, D: tl.constexpr, BLOCK_M: tl.constexpr):
    bkv = tl.program_id(0)
    b = bkv // KVH
    kvh = bkv % KVH
    rows = tl.arange(0, BLOCK_M)
    offs_d = tl.arange(0, D)
    m = tl.full([BLOCK_M], float("-inf"), dtype=tl.float32)
    total = tl.zeros([BLOCK_M], dtype=tl.float32)
    acc = tl.zeros([BLOCK_M, D], dtype=tl.float32)
    for split in range(0, NUM_SPLITS):
        ws = bkv * NUM_SPLITS + split
        m_s = tl.load(M_ws + ws * BLOCK_M + rows)
        l_s = tl.load(L_ws + ws * BLOCK_M + rows)
        a_s = tl.load(A_ws + (ws * BLOCK_M + rows[:, None]) * D + offs_d[None, :])
        m_new = tl.maximum(m, m_s)
        m_safe = tl.where(m_new == float("-inf"), 0.0, m_new)  # no split has seen a key yet
        alpha = tl.math.exp2(m - m_safe)
        beta = tl.math.exp2(m_s - m_safe)
        total = total * alpha + l_s * beta
        acc = acc * alpha[:, None] + a_s * beta[:, None]
        m = m_new
    out = acc / tl.where(total == 0.0, 1.0, total)[:, None]  # a query that sees no key: zeros
    head = kvh * GROUP + rows // S_Q
    query = rows % S_Q
    o_ptrs = (Out + b * stride_ob + head[:, None] * stride_oh + query[:, None] * stride_om
              + offs_d[None, :])
    tl.store(o_ptrs, out.to(Out.dtype.element_ty), mask=(rows < GROUP * S_Q)[:, None])


def split_chunk(s_kv: int, splits: int, block_n: int) -> int:
    """Keys per split: an equal share of ``s_kv`` rounded up to a multiple of ``block_n``."""
    share = -(-s_kv // splits)
    return -(-share // block_n) * block_n


@dataclass(frozen=True)
class DecodeWorkspace:
    """The fp32 partials of every split: running max and sum ``[batch * kv_heads, NUM_SPLITS,
    BLOCK_M]`` and the unnormalised output ``[..., BLOCK_M, d]``."""

    m: torch.Tensor
    total: torch.Tensor
    acc: torch.Tensor

    @classmethod
    def allocate(cls, problem: AttentionProblem, splits: int, device: torch.device
                 ) -> DecodeWorkspace:
        shape = (problem.batch * int(problem.kv_heads or problem.heads), splits,
                 decode_block_m(problem))
        return cls(m=torch.empty(shape, dtype=torch.float32, device=device),
                   total=torch.empty(shape, dtype=torch.float32, device=device),
                   acc=torch.empty((*shape, problem.d), dtype=torch.float32, device=device))


def decode_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, out: torch.Tensor,
                     problem: AttentionProblem, config: dict[str, Any],
                     workspace: DecodeWorkspace) -> torch.Tensor:
    """Attention into ``out`` with the split-KV decode template (two launches: the splits,
    then their combination). ``workspace`` must come from ``DecodeWorkspace.allocate`` for
    the same problem and ``NUM_SPLITS``."""
    from kernel_templates.attention.triton_config import DECODE_MAX_SQ

    if problem.s_q > DECODE_MAX_SQ:
        raise Unsupported(f"the decode template takes s_q <= {DECODE_MAX_SQ}, got {problem.s_q}")
    cfg = check_decode_config(config)
    splits, block_n = cfg["NUM_SPLITS"], cfg["BLOCK_N"]
    if workspace.m.shape[1] != splits:
        raise ValueError(f"workspace for {workspace.m.shape[1]} splits, config has {splits}")
    for t in (q, k, v, out):
        if t.stride(-1) != 1:
            raise ValueError("attention operands need a contiguous last dimension")
    kv_heads = int(problem.kv_heads or problem.heads)
    block_m = decode_block_m(problem)
    grid = (splits, problem.batch * kv_heads)
    direct = splits == 1
    _decode_split_kernel[grid](
        q, k, v, workspace.m, workspace.total, workspace.acc, out, float(problem.scale) * LOG2E,
        q.stride(0), q.stride(1), q.stride(2), k.stride(0), k.stride(1), k.stride(2),
        v.stride(0), v.stride(1), v.stride(2), out.stride(0), out.stride(1), out.stride(2),
        kv_heads, problem.group, problem.s_q, problem.s_kv,
        split_chunk(problem.s_kv, splits, block_n), splits,
        D=problem.d, BLOCK_M=block_m, BLOCK_N=block_n, CAUSAL=problem.causal,
        PRECISION=precision(q.dtype), DIRECT=direct, num_warps=cfg["num_warps"],
        num_stages=cfg["num_stages"])
    if not direct:
        _decode_combine_kernel[(problem.batch * kv_heads,)](
            workspace.m, workspace.total, workspace.acc, out, out.stride(0), out.stride(1),
            out.stride(2), kv_heads, problem.group, problem.s_q, splits, D=problem.d,
            BLOCK_M=block_m, num_warps=4)
    return out
