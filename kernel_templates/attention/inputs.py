"""Random operands for an attention problem: Q, K, V ``[batch, heads, seq, d]`` and a
NaN-poisoned output."""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from kernel_templates.errors import Unsupported
from search.kinds.attention.spec import AttentionProblem

__all__ = ["TORCH_DTYPES", "AttentionInputs", "make_inputs", "torch_dtype"]

TORCH_DTYPES: dict[str, torch.dtype] = {
    "bf16": torch.bfloat16,
    "fp16": torch.float16,
    "fp32": torch.float32,
}


def torch_dtype(name: str) -> torch.dtype:
    """The torch dtype of a problem dtype name."""
    try:
        return TORCH_DTYPES[name]
    except KeyError:
        raise Unsupported(f"dtype {name!r} is not served for attention") from None


@dataclass
class AttentionInputs:
    """One input set: ``q`` ``[batch, heads, s_q, d]``, ``k`` and ``v``
    ``[batch, kv_heads, s_kv, d]`` (contiguous) and ``out`` ``[batch, heads, s_q, d]``, the
    buffer a kernel writes."""

    q: torch.Tensor
    k: torch.Tensor
    v: torch.Tensor
    out: torch.Tensor


def make_inputs(problem: AttentionProblem, device: torch.device | str, seed: int
                ) -> AttentionInputs:
    """Fresh operands from ``seed`` on ``device`` and an output filled with NaN, so a row a
    kernel forgets fails the check.

    Entries are normal (never all zeros). Q and K share a spread chosen so that the scores
    ``scale * q . k`` have unit variance whatever ``d`` and ``scale`` are: the softmax is
    neither flat (a wrong mask would hide) nor one-hot (a lost row rescale would hide). V is
    N(0, 1).
    """
    device = torch.device(device)
    dtype = torch_dtype(problem.dtype)
    gen = torch.Generator(device=device)
    gen.manual_seed(seed)
    spread = (float(problem.scale or 1.0) * math.sqrt(problem.d)) ** -0.5
    kv_heads = int(problem.kv_heads or problem.heads)

    def normal(heads: int, seq: int, sd: float) -> torch.Tensor:
        shape = (problem.batch, heads, seq, problem.d)
        t = torch.randn(shape, generator=gen, device=device, dtype=torch.float32)
        return (t * sd).to(dtype)

    q = normal(problem.heads, problem.s_q, spread)
    k = normal(kv_heads, problem.s_kv, spread)
    v = normal(kv_heads, problem.s_kv, 1.0)
    out = torch.full((problem.batch, problem.heads, problem.s_q, problem.d), float("nan"),
                     dtype=dtype, device=device)
    return AttentionInputs(q=q, k=k, v=v, out=out)
