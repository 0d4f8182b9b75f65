"""The reference attention output, the error measure and the tolerance per dtype.

The reference is computed from the very inputs the kernel saw (already rounded to the problem's
dtype), in float32 on a GPU (TF32 off) and float64 on the CPU, query chunk by query chunk so a
long sequence never materialises all its scores at once. Masking follows the spec
(``search.kinds.attention.spec``): with ``causal``, key ``j`` is masked for query ``i`` when
``j > i + (s_kv - s_q)`` (bottom-right), and a query that sees no key at all (``s_q > s_kv``)
has an output of zeros, as FlashAttention and PyTorch's math backend write.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Iterator
from typing import Any

import torch

from kernel_templates.accuracy import rel_error
from kernel_templates.attention.inputs import AttentionInputs
from search.kinds.attention.spec import AttentionProblem

__all__ = ["TOLERANCE", "causal_keep", "reference", "rel_error", "tolerance"]

#: ``‖out − ref‖_F / ‖ref‖_F`` accepted per dtype. A correct kernel's error is the output's
#: rounding (unit roundoff / √3) plus the rounding of the softmax weights cast to the dtype for
#: the second product: about 3e-3 for bf16, 4e-4 for fp16 and 1e-6 for fp32 (IEEE products);
#: each bound leaves 5-10x headroom. A dropped key block of ``BLOCK_N`` keys out of ``s_kv``
#: moves the output by about √(BLOCK_N / s_kv) relative (≥ 4e-2 for s_kv ≤ 8192 with
#: ``BLOCK_N`` ≥ 16, far above every bound), and a mask off by one diagonal by far more on short
#: rows.
TOLERANCE: dict[str, float] = {"bf16": 2e-2, "fp16": 5e-3, "fp32": 1e-4}
#: Scores materialised at once by the reference (elements), bounding its memory.
_CHUNK_ELEMENTS = 1 << 26


def causal_keep(s_q: int, s_kv: int, device: torch.device | str | None = None) -> torch.Tensor:
    """``[s_q, s_kv]`` booleans, true where the bottom-right causal mask keeps key ``j`` for
    query ``i`` (``j <= i + s_kv - s_q``)."""
    return torch.ones(s_q, s_kv, dtype=torch.bool, device=device).tril(s_kv - s_q)


@contextlib.contextmanager
def _ieee_fp32() -> Iterator[None]:
    """TF32 off for the reference's products: another backend in this process may have turned
    the process-wide flag on (GEMM's cuBLAS candidates set it per call)."""
    saved = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = False
    try:
        yield
    finally:
        torch.backends.cuda.matmul.allow_tf32 = saved


def reference(problem: AttentionProblem, inputs: AttentionInputs) -> torch.Tensor:
    """``softmax(scale · Q Kᵀ + mask) V`` ``[batch, heads, s_q, d]`` in float32 (CUDA) or
    float64 (CPU), key/value heads repeated for grouped queries."""
    q, k, v = inputs.q, inputs.k, inputs.v
    ctype = torch.float32 if q.device.type == "cuda" else torch.float64
    group = problem.group
    out = torch.empty(q.shape, dtype=ctype, device=q.device)
    rows = max(1, _CHUNK_ELEMENTS // (problem.heads * problem.s_kv))
    keep = causal_keep(problem.s_q, problem.s_kv, q.device) if problem.causal else None
    with _ieee_fp32():
        for b in range(problem.batch):
            kb = k[b].to(ctype).repeat_interleave(group, dim=0)  # [heads, s_kv, d]
            vb = v[b].to(ctype).repeat_interleave(group, dim=0)
            for i0 in range(0, problem.s_q, rows):
                i1 = min(problem.s_q, i0 + rows)
                s = torch.matmul(q[b, :, i0:i1].to(ctype), kb.transpose(1, 2)) * problem.scale
                if keep is not None:
                    s.masked_fill_(~keep[i0:i1], -math.inf)
                m = s.amax(dim=-1, keepdim=True)
                m = torch.where(torch.isfinite(m), m, torch.zeros_like(m))  # rows seeing no key
                p = torch.exp(s - m)
                total = p.sum(dim=-1, keepdim=True)
                total = torch.where(total > 0, total, torch.ones_like(total))
                out[b, :, i0:i1] = torch.matmul(p, vb) / total
    return out


def tolerance(problem: AttentionProblem, config: dict[str, Any] | None = None) -> float:
    """The largest ``rel_error`` accepted for ``problem`` (``TOLERANCE`` by dtype; no config
    changes it: every template keeps fp32 statistics and IEEE fp32 products)."""
    return TOLERANCE[problem.dtype]
