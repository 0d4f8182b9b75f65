"""Search spaces of the Triton attention templates (``kernel_templates/attention``), in tiers.

``flash`` (backend ``triton``): the flash-attention forward, one program per ``BLOCK_M`` query
rows of one head, walking the keys ``BLOCK_N`` at a time; on a device with TMA (sm_90+) also
whether the tiles move through tensor descriptors (``TMA``) and whether one program per SM
walks the tiles (``PERSISTENT``)::

    {"BLOCK_M": 128, "BLOCK_N": 128, "num_warps": 8, "num_stages": 3, "TMA": 1, "PERSISTENT": 0}

Warp specialisation (``WS``) is a key of the template but not searched: Triton 3.6 does not
apply it to this loop on sm_90 (``constraints.WS_REFUSED``).

``decode`` (backend ``triton_decode``, short queries only): the key/value length split across
``NUM_SPLITS`` programs per key/value head, the query heads that share it packed into one
program, partial results combined afterwards::

    {"NUM_SPLITS": 64, "BLOCK_N": 64, "num_warps": 4}

Each dimension is a power-of-two or enum fragment; the static rules in
:mod:`search.kinds.attention.constraints` reject what cannot compile or cannot help.
"""

from __future__ import annotations

from typing import Any

from search.decision.evidence import TierPlan
from search.kinds.attention.spec import AttentionProblem
from search.limits import DeviceLimits
from search.optimizer import Choice

__all__ = ["DECODE", "DECODE_MAX_ROWS", "DECODE_MAX_SQ", "FLASH", "HOPPER_PARAMS", "TIERS",
           "fill_splits", "packed_rows", "params", "seeds", "space", "tier_plans"]

FLASH, DECODE = "flash", "decode"
TIERS = (FLASH, DECODE)
#: The decode tier serves queries up to this long (the issue's split-KV template).
DECODE_MAX_SQ = 16
#: The most rows (packed query heads x queries) one decode program holds: past it the fp32
#: accumulator of a program spills and the flash tier's tiling over queries is the better fit.
DECODE_MAX_ROWS = 128
_PARAMS = {FLASH: ("BLOCK_M", "BLOCK_N", "num_warps", "num_stages"),
           DECODE: ("NUM_SPLITS", "BLOCK_N", "num_warps")}
_BLOCK_M = (16, 32, 64, 128)
_FLASH_BLOCK_N = (16, 32, 64, 128)
_DECODE_BLOCK_N = (16, 32, 64, 128, 256)
_SPLITS = (1, 2, 4, 8, 16, 32, 64, 128, 256)


#: The flash keys searched only where the device has TMA.
HOPPER_PARAMS = ("TMA", "PERSISTENT")


def params(tier: str, limits: DeviceLimits | None = None) -> tuple[str, ...]:
    """The keys ``tier``'s configurations hold (all of them searched) on a device of
    ``limits``."""
    if tier not in _PARAMS:
        raise ValueError(f"unknown attention tier {tier!r}; one of {TIERS}")
    if tier == FLASH and limits is not None and limits.tma:
        return _PARAMS[tier] + HOPPER_PARAMS
    return _PARAMS[tier]


def _ceil_pow2(x: int) -> int:
    return 1 << max(0, x - 1).bit_length()


def _up_to(values: tuple[int, ...], size: int) -> tuple[int, ...]:
    """The values no larger than ``size`` rounded up to a power of two (at least the smallest):
    a block twice the sequence would only compute padding."""
    bound = _ceil_pow2(size)
    return tuple(v for v in values if v <= bound) or values[:1]


def packed_rows(problem: AttentionProblem) -> int:
    """Rows one decode program holds: the query heads of one key/value head times the
    queries, padded to a power of two of at least 16 (``tl.dot``'s smallest M)."""
    return max(16, _ceil_pow2(problem.group * problem.s_q))


def splits(problem: AttentionProblem) -> tuple[int, ...]:
    """Split counts that leave each split at least 16 keys (the smallest ``BLOCK_N``)."""
    return tuple(s for s in _SPLITS if s == 1 or problem.s_kv // s >= 16)


def _tiles_fit(problem: AttentionProblem, block_m: int, block_n: int) -> bool:
    """Whether TMA tiles of these blocks never cross heads (``constraints.tma_tiling``)."""
    return problem.s_q % block_m == 0 and problem.s_kv % block_n == 0


def fill_splits(problem: AttentionProblem, sms: int = 132) -> int:
    """The fewest splits (a power of two, a legal count) whose programs, one per split and
    key/value head of each batch entry, cover ``sms`` SMs (an H100's where unknown): one split
    when ``batch x kv_heads`` already does, as in batched decode."""
    programs = problem.batch * int(problem.kv_heads or problem.heads)
    legal = splits(problem)
    for s in legal:
        if programs * s >= sms:
            return s
    return legal[-1]


def space(problem: AttentionProblem, tier: str, limits: DeviceLimits | None = None
          ) -> tuple[Choice, ...]:
    """The dimensions of ``tier`` for ``problem`` on a device of ``limits``: blocks no larger
    than its sequences, and the Hopper options where the device has TMA."""
    if tier == FLASH:
        dims = (Choice("BLOCK_M", _up_to(_BLOCK_M, problem.s_q)),
                Choice("BLOCK_N", _up_to(_FLASH_BLOCK_N, problem.s_kv)),
                Choice("num_warps", (2, 4, 8)),
                Choice("num_stages", (1, 2, 3, 4)))
        if limits is not None and limits.tma:
            # TMA only where some tile divides both sequences (the rule in constraints)
            tma = (1, 0) if _tiles_fit(problem, 16, 16) else (0,)
            dims += (Choice("TMA", tma), Choice("PERSISTENT", (0, 1)))
        return dims
    if tier == DECODE:
        return (Choice("NUM_SPLITS", splits(problem)),
                Choice("BLOCK_N", _up_to(_DECODE_BLOCK_N, problem.s_kv)),
                Choice("num_warps", (2, 4, 8)))
    raise ValueError(f"unknown attention tier {tier!r}; one of {TIERS}")


def tier_plans(problem: AttentionProblem) -> tuple[TierPlan, ...]:
    """The tiers in search order, each saying whether it applies to ``problem`` and why. For
    short queries the decode tier gets most of the budget: a flash program of 16 query rows
    leaves the key/value length, where the work is, to one program per head."""
    short = problem.s_q <= DECODE_MAX_SQ
    rows = problem.group * problem.s_q
    if not short:
        decode = (False, f"s_q={problem.s_q} > {DECODE_MAX_SQ}: the decode tier is for short "
                         f"queries; the flash tier tiles the queries")
    elif packed_rows(problem) > DECODE_MAX_ROWS:
        decode = (False, f"{problem.group} query heads per key/value head x s_q={problem.s_q} "
                         f"= {rows} rows per program, over {DECODE_MAX_ROWS}")
    else:
        decode = (True, f"s_q={problem.s_q} <= {DECODE_MAX_SQ}: split the {problem.s_kv} keys "
                        f"across programs, {problem.group} query head(s) packed per program")
    flash = (True, "always")
    weights = {FLASH: 1.0, DECODE: 3.0} if decode[0] else {FLASH: 1.0, DECODE: 1.0}
    reasons = {FLASH: flash, DECODE: decode}
    return tuple(TierPlan(t, weights[t], *reasons[t]) for t in TIERS)


def seeds(problem: AttentionProblem, tier: str, limits: DeviceLimits | None = None
          ) -> list[dict[str, Any]]:
    """Known-good starting points, those legal for ``problem``: the Triton fused-attention
    tutorial's and FlashAttention's defaults (128x64, 4 or 8 warps, 2-3 stages up to d=64;
    128x128 with 8 warps for d=128 on sm_90; smaller tiles for d=256 and short queries), with
    TMA first where the device has it; for decode the fewest splits that fill the SMs with long
    key blocks (``fill_splits``: one split when batch x kv_heads already fills them, 0.99x cuDNN
    at the copy bandwidth on an H100), then FlashDecoding's many splits (64) over 64-key
    blocks."""
    if tier == FLASH:
        def f(bm: int, bn: int, w: int, s: int) -> dict[str, Any]:
            return {"BLOCK_M": bm, "BLOCK_N": bn, "num_warps": w, "num_stages": s}

        if problem.d <= 64:
            ordered = [f(128, 64, 4, 3), f(128, 64, 8, 2), f(64, 64, 4, 3), f(128, 128, 8, 3)]
        elif problem.d <= 128:
            ordered = [f(128, 128, 8, 3), f(128, 64, 8, 3), f(128, 64, 4, 2), f(64, 64, 4, 3)]
        else:
            ordered = [f(128, 64, 8, 2), f(64, 64, 4, 2), f(64, 32, 4, 2)]
        # short queries: blocks of 16-32 rows (the smaller key blocks where d=256)
        ordered += ([f(16, 64, 4, 2), f(16, 32, 4, 2), f(32, 32, 4, 2)] if problem.d > 128
                    else [f(16, 64, 4, 2), f(16, 128, 4, 2), f(32, 64, 4, 2)])
    elif tier == DECODE:
        def g(splits: int, bn: int, w: int) -> dict[str, Any]:
            return {"NUM_SPLITS": splits, "BLOCK_N": bn, "num_warps": w}

        fill = fill_splits(problem)
        ordered = [g(fill, 256, 4), g(fill, 128, 4), g(64, 64, 4), g(32, 128, 4), g(16, 64, 4),
                   g(128, 32, 4), g(8, 32, 2), g(4, 16, 2), g(1, 16, 2)]
    else:
        raise ValueError(f"unknown attention tier {tier!r}; one of {TIERS}")
    keys = params(tier, limits)
    if tier == FLASH and "TMA" in keys:
        # TMA first (1.01-1.74x the same tile through pointers on an H100), the persistent
        # schedule off (it lost on most tiles there): docs/benchmarks/attention_h100_*.md
        ordered = ([{**c, "TMA": 1, "PERSISTENT": 0} for c in ordered
                    if _tiles_fit(problem, c["BLOCK_M"], c["BLOCK_N"])]
                   + [{**c, "TMA": 0, "PERSISTENT": 0} for c in ordered])
    legal = {c.name: set(c.values) for c in space(problem, tier, limits)}
    out: list[dict[str, Any]] = []
    for config in ordered:
        if all(config[k] in legal[k] for k in keys) and config not in out:
            out.append(config)
    return out
