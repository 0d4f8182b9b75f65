"""How far a kernel's output is from its reference: one measure for every problem kind."""

from __future__ import annotations

import math

import torch

__all__ = ["rel_error"]


def rel_error(out: torch.Tensor, ref: torch.Tensor) -> float:
    """``‖out − ref‖_F / ‖ref‖_F`` in float64; ``inf`` when ``out`` holds a NaN or an infinity
    (an unwritten element of a NaN-poisoned output shows up here)."""
    diff = out.to(torch.float64) - ref.to(torch.float64)
    if not bool(torch.isfinite(diff).all()):
        return math.inf
    denom = float(torch.linalg.vector_norm(ref.to(torch.float64)))
    num = float(torch.linalg.vector_norm(diff))
    if denom == 0.0:
        return 0.0 if num == 0.0 else math.inf
    return num / denom
