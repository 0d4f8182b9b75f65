"""The attention problems and the worker's own check shared by the attention kernel tests."""

from __future__ import annotations

from typing import Any

import torch

from search.kinds.attention.spec import AttentionProblem
from search.types import Candidate
from workers.checking import checked_calls, fresh_inputs

__all__ = ["problem", "run_checked"]


def problem(s_q: int = 32, s_kv: int = 48, causal: bool = False, dtype: str = "fp16",
            heads: int = 2, kv_heads: int = 1, d: int = 16, batch: int = 1,
            **extra: Any) -> AttentionProblem:
    return AttentionProblem(batch=batch, heads=heads, kv_heads=kv_heads, s_q=s_q, s_kv=s_kv,
                            d=d, causal=causal, dtype=dtype, **extra)


def run_checked(p: AttentionProblem, backend: str, config: dict[str, Any], device: str,
                seed: int = 0) -> tuple[float, float]:
    """``(rel_error, tolerance)`` of one run through the worker's check."""
    sets, ref = fresh_inputs(p, device, seed, n_sets=2)
    assert all(torch.isnan(s.out).all() for s in sets)  # poisoned before any run
    _, err, tol = checked_calls(Candidate(p, backend, config), sets, ref,
                                cuda=device == "cuda")
    return err, tol
