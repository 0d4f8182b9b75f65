"""The tiers for GEMM shapes the library leaves far from the roofline, planned from the shape's
alignment, its tile count and the device's SM count:

==================  ==================  ===================================================
tier                backend             planned for
==================  ==================  ===================================================
``skinny``          ``triton_skinny``   long K, tiny output: 64x64 tiles split ``MIN_SPLIT``
                                        ways fit the SMs (``skinny_space.applies``)
``repair``          ``triton_repair``   a row of A, B or C not a multiple of 16 bytes: a
                                        fused copy to aligned scratch, then the tiled kernel
``repair_stream_k`` ``triton_repair``   the same with the stream-K kernel, where the shape's
                                        tiles leave SMs idle
``stream_k``        ``triton_streamk``  aligned operands whose 128x128 tiles leave SMs idle
                                        over their waves (``streamk_space.applies``)
==================  ==================  ===================================================

The library side of the repair (cuBLAS and CUTLASS on the copies) is the ``repaired`` backend,
planned in the first stage (``repair_space.library_configs``), so a repaired custom kernel is
always weighed against the library repaired the same way.

``tier_plans`` puts the tiers that apply first (they are the shape's best hope, so they get the
first share of the budget and the first probe), then the tiled template's tiers
(``triton_space.tier_plans``, whose ``hopper`` tier is skipped for unaligned operands: TMA
cannot describe them), then the new tiers that do not apply, with the reason.
"""

from __future__ import annotations

from dataclasses import replace

from search.decision.evidence import TierPlan
from search.kinds.gemm import skinny_space, streamk_space
from search.kinds.gemm.alignment import RepairPlan, b_layouts, describe_unaligned, repair_fits
from search.kinds.gemm.alignment import unaligned as unaligned_rows
from search.kinds.gemm.spec import GemmProblem

__all__ = ["BACKEND_OF", "DTYPES", "REPAIR", "REPAIRED", "REPAIR_STREAM_K", "SKINNY",
           "STREAM_K", "TIERS", "TRITON_REPAIR", "TRITON_SKINNY", "TRITON_STREAMK", "WEIGHTS",
           "tier_plans"]

#: The library backend of the repair: a fused copy, then cuBLAS or CUTLASS on the copies.
REPAIRED = "repaired"
TRITON_REPAIR, TRITON_STREAMK, TRITON_SKINNY = "triton_repair", "triton_streamk", "triton_skinny"
SKINNY, REPAIR, REPAIR_STREAM_K, STREAM_K = "skinny", "repair", "repair_stream_k", "stream_k"
TIERS = (SKINNY, REPAIR, REPAIR_STREAM_K, STREAM_K)
BACKEND_OF = {SKINNY: TRITON_SKINNY, REPAIR: TRITON_REPAIR, REPAIR_STREAM_K: TRITON_REPAIR,
              STREAM_K: TRITON_STREAMK}
#: Budget weights (the tiled tiers': tiles 4, split_k 3, hopper 2, precision 3).
WEIGHTS = {SKINNY: 4.0, REPAIR: 4.0, REPAIR_STREAM_K: 3.0, STREAM_K: 4.0}
#: Input dtypes these kernels multiply.
DTYPES = ("bf16", "fp16", "fp32")
#: The SM count assumed when the device does not say (an H100 SXM).
DEFAULT_SMS = 132


def tier_plans(problem: GemmProblem, base: tuple[TierPlan, ...], *, sm_count: int,
               memory_bytes: int = 0) -> tuple[TierPlan, ...]:
    """``base`` (the tiled template's tiers) with these tiers added in search order, each
    saying whether it applies to ``problem`` on a device of ``sm_count`` SMs and
    ``memory_bytes`` (0: unknown) and why. Dtypes these kernels do not multiply get ``base``
    unchanged."""
    if problem.dtype not in DTYPES:
        return base
    sms = sm_count or DEFAULT_SMS
    reasons = _reasons(problem, sms, memory_bytes)
    bad = unaligned_rows(problem)
    if bad:
        why = (f"TMA cannot describe the operands ({describe_unaligned(problem)}); the repair "
               "tiers run on aligned copies")
        base = tuple(replace(t, applicable=False, reason=why) if t.name == "hopper" and
                     t.applicable else t for t in base)
    new = [TierPlan(t, WEIGHTS[t], *reasons[t]) for t in TIERS]
    return (*(t for t in new if t.applicable), *base, *(t for t in new if not t.applicable))


def _reasons(problem: GemmProblem, sms: int, memory_bytes: int
             ) -> dict[str, tuple[bool, str]]:
    bad = unaligned_rows(problem)
    stream, stream_why = streamk_space.applies(problem, sms)
    if not bad:
        repair = (False, "the operands' rows are 16-byte aligned: nothing to repair")
    elif problem.batch != 1:
        repair = (False, f"{describe_unaligned(problem)}, but the repair serves batch 1")
    else:
        plans = [RepairPlan.of(problem, b, padded=False)
                 for b in b_layouts(problem, padded=False)]
        biggest = max(plans, key=lambda p: p.scratch_bytes)
        too_big = repair_fits(biggest, memory_bytes)
        repair = (False, f"{describe_unaligned(problem)}, but {too_big}") if too_big else (
            True, f"{describe_unaligned(problem)}: one fused pass copies them to aligned "
                  f"scratch (at most {biggest.scratch_bytes / 2**20:.1f} MiB) inside the "
                  "timed call")
    if repair[0]:
        repair_sk = (stream, stream_why if stream else f"no stream-K: {stream_why}")
        stream_k = (False, "the operands are unaligned: the repair_stream_k tier runs "
                           "stream-K on aligned copies") if stream else (False, stream_why)
    else:
        repair_sk = (False, repair[1])
        stream_k = (stream, stream_why)
    return {SKINNY: skinny_space.applies(problem, sms), REPAIR: repair,
            REPAIR_STREAM_K: repair_sk, STREAM_K: stream_k}
