"""High-precision references and the error measure used to accept a kernel's output.

The reference is computed in float64 from the very inputs the kernel saw (already rounded to the
problem's dtype; for fp8, the stored values times their scales, which float64 holds exactly), so
it carries no input-rounding error: what remains is the kernel's own accumulation error and the
rounding of its output. float64 is cheap enough once per candidate
(4096^3 takes a few ms on an H100's fp64 tensor cores) and needs no care about tf32 settings.
"""

from __future__ import annotations

import math
from typing import Any

import torch

from kernel_templates.accuracy import rel_error
from kernel_templates.gemm.inputs import GemmInputs
from search.decision.policy import MAX_REL_ERROR
from search.kinds.gemm.spec import GemmProblem

__all__ = ["BASE_TOLERANCE", "FP8_TOLERANCE", "TF32_TOLERANCE", "reference_for",
           "reference_matmul", "rel_error", "tolerance", "tolerance_for"]

#: fp8 e4m3 inputs, whatever the output dtype. The inputs are exact, but the fp8 library
#: kernels may accumulate in the tensor cores' reduced precision (CUTLASS's ``FP8FastAccum``
#: schedules; about 14 mantissa bits before the fp32 promotion). Measured on an H100 at
#: 4096^3 with a bf16 output: 2.1e-3 (fp8 in docs/benchmarks/cutlass_h100_2026-11-22.md), of
#: which the bf16 rounding is about 1.5e-3; so bf16's 1e-2 for every output. A kernel that
#: drops a scale is off by a factor, and a missing K tile by ≳ √(BLOCK_K/K) ≥ 4e-2
#: (K ≤ 65536, BLOCK_K ≥ 128).
FP8_TOLERANCE = 1e-2
#: ‖out − ref‖ / ‖ref‖ accepted per dtype (of the output when it is the lower precision).
BASE_TOLERANCE: dict[str, float] = {"bf16": 1e-2, "fp16": 2e-3, "fp32": 1e-4,
                                    "fp8_e4m3": FP8_TOLERANCE}
_EPS = {"bf16": 2.0**-8, "fp16": 2.0**-11, "fp32": 2.0**-24}
#: fp32 inputs multiplied as tf32 (``INPUT_PRECISION="tf32"``): both operands lose all but 10
#: mantissa bits (unit roundoff 2^-11, as fp16, but on the inputs rather than the output, and
#: truncated rather than rounded where the hardware reads fp32 bits as tf32), so the relative
#: error is about 2^-11 (4.9e-4) whatever K is. 10x that leaves headroom while a missing K
#: tile (≳ √(BLOCK_K/K) ≥ 1.5e-2 for K ≤ 65536, BLOCK_K ≥ 16) still fails.
TF32_TOLERANCE = 10 * 2.0**-11


def reference_matmul(a: torch.Tensor, b: torch.Tensor, scale_a: torch.Tensor | None = None,
                     scale_b: torch.Tensor | None = None) -> torch.Tensor:
    """``(scale_a * a) @ (scale_b * b)`` in float64 on the inputs' device (batched when the
    inputs are 3-D); a scale that is ``None`` is 1."""
    a64, b64 = a.to(torch.float64), b.to(torch.float64)
    if scale_a is not None:
        a64 = a64 * scale_a.to(torch.float64)
    if scale_b is not None:
        b64 = b64 * scale_b.to(torch.float64)
    return torch.matmul(a64, b64)


def reference_for(inputs: GemmInputs) -> torch.Tensor:
    """The float64 product an input set's kernel must produce (its scales applied)."""
    return reference_matmul(inputs.a, inputs.b, inputs.scale_a, inputs.scale_b)


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
    checked exactly as before. A lowered configuration (one naming a ``PRECISION`` below the
    input's, e.g. a bf16 product computed in fp8) is checked against ``MAX_REL_ERROR``, the most
    lenient bound a policy may set: the job's own bound is applied by the service
    (``search.decision.policy.Policy.judge``), so the measurement serves every job's bound."""
    tol = tolerance(problem)
    cfg = config or {}
    if cfg.get("PRECISION") not in (None, problem.dtype):
        return MAX_REL_ERROR
    # cuBLAS with ``allow_tf32`` (the library side of a tf32 policy) rounds the same way.
    if problem.dtype == "fp32" and (cfg.get("INPUT_PRECISION") == "tf32"
                                    or cfg.get("allow_tf32")):
        tol = max(tol, TF32_TOLERANCE)
    return tol
