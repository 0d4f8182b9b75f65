"""High-precision references and the error measure used to accept a kernel's output.

The reference is computed in float64 from the very inputs the kernel saw (already rounded to the
problem's dtype), so it carries no input-rounding error: what remains is the kernel's own
accumulation error and the rounding of its output. float64 is cheap enough once per candidate
(4096^3 takes a few ms on an H100's fp64 tensor cores) and needs no care about tf32 settings.
"""

from __future__ import annotations

import math
from typing import Any

import torch

from search.types import GemmProblem

__all__ = ["BASE_TOLERANCE", "TF32_TOLERANCE", "reference_matmul", "rel_error", "tolerance",
           "tolerance_for"]

#: ‖out − ref‖ / ‖ref‖ accepted per dtype (of the output when it is the lower precision).
BASE_TOLERANCE: dict[str, float] = {"bf16": 1e-2, "fp16": 2e-3, "fp32": 1e-4}
_EPS = {"bf16": 2.0**-8, "fp16": 2.0**-11, "fp32": 2.0**-24}
#: fp32 inputs multiplied as tf32 (``INPUT_PRECISION="tf32"``): both operands lose all but 10
#: mantissa bits (unit roundoff 2^-11, as fp16, but on the inputs rather than the output, and
#: truncated rather than rounded where the hardware reads fp32 bits as tf32), so the relative
#: error is about 2^-11 (4.9e-4) whatever K is. 10x that leaves headroom while a missing K
#: tile (≳ √(BLOCK_K/K) ≥ 1.5e-2 for K ≤ 65536, BLOCK_K ≥ 16) still fails.
TF32_TOLERANCE = 10 * 2.0**-11


def reference_matmul(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """``a @ b`` in float64 on the inputs' device (batched when the inputs are 3-D)."""
    return torch.matmul(a.to(torch.float64), b.to(torch.float64))


def rel_error(out: torch.Tensor, ref: torch.Tensor) -> float:
    """‖out − ref‖_F / ‖ref‖_F in float64; ``inf`` when ``out`` holds a NaN or an infinity
    (an unwritten element of a NaN-poisoned buffer shows up here)."""
    diff = out.to(torch.float64) - ref.to(torch.float64)
    if not bool(torch.isfinite(diff).all()):
        return math.inf
    denom = float(torch.linalg.vector_norm(ref.to(torch.float64)))
    num = float(torch.linalg.vector_norm(diff))
    if denom == 0.0:
        return 0.0 if num == 0.0 else math.inf
    return num / denom


def tolerance(problem: GemmProblem) -> float:
    """Largest ``rel_error`` accepted for ``problem``.

    With exact (reference-side) inputs, the error of an fp32-accumulated product is the output
    rounding (≈ eps/√3 relative, independent of K) plus the accumulation error, which grows like
    eps_fp32·√K for random data (about 1e-5 at K = 65536). The table leaves 3-10x headroom over
    the first for bf16/fp16; for fp32 the √K term is added so very long K still passes, while a
    missing K tile (error ≳ √(BLOCK_K/K)) still fails at any K the space allows.
    """
    out = problem.out_dtype or problem.dtype
    names = [d for d in (problem.dtype, out) if d in BASE_TOLERANCE]
    base = max(BASE_TOLERANCE[d] for d in names) if names else BASE_TOLERANCE["bf16"]
    if problem.dtype == "fp32" and out == "fp32":
        base = max(base, 8 * _EPS["fp32"] * math.sqrt(problem.k))
    return base


def tolerance_for(problem: GemmProblem, config: dict[str, Any] | None = None) -> float:
    """``tolerance(problem)``, widened to ``TF32_TOLERANCE`` when ``config`` multiplies fp32
    inputs in tf32 (``INPUT_PRECISION="tf32"``). ``"tf32x3"`` (three tf32 products, about fp32
    accuracy) and ``"ieee"`` keep the fp32 tolerance; configurations without the key are
    checked exactly as before."""
    tol = tolerance(problem)
    cfg = config or {}
    # cuBLAS with ``allow_tf32`` (the library side of a tf32 policy) rounds the same way.
    if problem.dtype == "fp32" and (cfg.get("INPUT_PRECISION") == "tf32"
                                    or cfg.get("allow_tf32")):
        tol = max(tol, TF32_TOLERANCE)
    return tol
