"""Search space of the tiled Triton GEMM (``kernel_templates/gemm/triton.py``).

A configuration is a plain dict with the template's meta-parameters::

    {"BLOCK_M": 128, "BLOCK_N": 128, "BLOCK_K": 64, "GROUP_M": 8, "SPLIT_K": 1,
     "num_warps": 8, "num_stages": 3}

The decision loop (``search.decision``) searches the space in *tiers*, cheapest ideas first:
``tiles`` (tiles, stages, warps; no split), ``split_k`` (the same with K split), ``hopper`` (the
persistent TMA kernel; sm_90 only) and ``precision``
(tf32 for fp32 inputs, where the job's policy allows it). Each tier varies its own keys.

Every configuration this space emits is complete (``complete``): besides ``PARAMS`` it names
each of the template's other keys (``DEFAULTS``, and the split-K reduction ``SPLITK_MODE`` and
``FANIN``), so a stored configuration fixes the kernel it ran. A configuration without some of
them (one recorded before they existed) means the defaults ``complete`` fills in.

Each dimension is a small typed fragment (power-of-two or enum); the static constraints in
``search.constraints`` reject what cannot compile or cannot help before anything reaches a GPU.
"""

from __future__ import annotations

from typing import Any

from search.decision.evidence import TierPlan
from search.kinds.gemm.cluster import CLUSTER_SIZES
from search.kinds.gemm.spec import GemmProblem
from search.optimizer import Choice

#: Input dtypes the Triton GEMM template multiplies.
TEMPLATE_DTYPES = ("bf16", "fp16", "fp32")
PARAMS = ("BLOCK_M", "BLOCK_N", "BLOCK_K", "GROUP_M", "SPLIT_K", "num_warps", "num_stages")
TIERS = ("tiles", "split_k", "hopper", "precision")
#: Budget weights of the tiers (normalised over those that apply).
TIER_WEIGHTS = {"tiles": 4.0, "split_k": 3.0, "hopper": 2.0, "precision": 3.0}
_TIER_PARAMS = {
    "tiles": PARAMS, "split_k": PARAMS,
    # Warp specialisation is a template key too, but on an H100 with Triton 3.6 it compiles to
    # the same kernel (docs/notes/kernels.md). The tier searches persistence and the cluster
    # size (num_ctas 1 or 2; 2 ran ~30% slower in the one configuration measured, and is wrong
    # with a TMA-loaded column-major A: search.kinds.gemm.cluster refuses that).
    "hopper": (*PARAMS, "PERSISTENT", "num_ctas"),
    "precision": (*PARAMS, "INPUT_PRECISION"),
}


#: The template's keys beyond ``PARAMS`` and the value each takes when absent: the plain kernel
#: (``kernel_templates.gemm.triton`` documents each). ``SPLITK_MODE`` and ``FANIN`` are not
#: here: their default depends on ``SPLIT_K`` (``splitk_mode``, ``fanin``).
DEFAULTS: dict[str, Any] = {
    "PERSISTENT": 0, "WARP_SPECIALIZE": 0, "num_ctas": 1, "INPUT_PRECISION": "ieee",
    "LOADS": "auto", "FLATTEN": 1, "TMA_STORE": 0, "WS_LOOP": "k",
}
SPLITK_MODES = ("serial", "two_launch")
#: Serial split-K up to this many slices, two launches beyond: on an H100 serial saved 1.2-2.8 us
#: at SPLIT_K 2-8 and lost 2-7 us at SPLIT_K 32-128 (docs/notes/kernels.md).
SERIAL_MAX_SPLIT = 8


def splitk_mode(split_k: int) -> str:
    """How ``SPLIT_K`` slices are summed by default: ``"serial"`` (the last program of a tile
    sums, in the GEMM launch) up to ``SERIAL_MAX_SPLIT`` slices, ``"two_launch"`` beyond."""
    return "serial" if split_k <= SERIAL_MAX_SPLIT else "two_launch"


def fanin(split_k: int, mode: str) -> int:
    """Slices per first-level group of the serial reduction by default: all of them up to 16
    (one level), else about sqrt(SPLIT_K), so the last program of a tile reads ~2 sqrt(SPLIT_K)
    partial tiles instead of SPLIT_K. 1 where nothing is summed serially."""
    if mode != "serial" or split_k <= 1:
        return 1
    if split_k <= 16:
        return split_k
    return 1 << (split_k.bit_length() // 2)


def complete(config: dict[str, Any]) -> dict[str, Any]:
    """``config`` with every key of the template, each absent one at its default (``DEFAULTS``;
    ``SPLITK_MODE`` and ``FANIN`` from ``SPLIT_K``). Values given are kept as they are (the
    template validates them)."""
    split_k = int(config.get("SPLIT_K", 1))
    mode = config.get("SPLITK_MODE", splitk_mode(split_k))
    return {**DEFAULTS, "SPLITK_MODE": mode, "FANIN": fanin(split_k, mode), **config}


_BLOCK_M = (16, 32, 64, 128, 256)
_BLOCK_N = (32, 64, 128, 256)


def _up_to(values: tuple[int, ...], size: int) -> tuple[int, ...]:
    """The values no larger than ``size`` rounded up to a power of two (at least the smallest):
    a tile twice the problem's extent would only compute padding."""
    bound = 1 << max(0, size - 1).bit_length()
    return tuple(v for v in values if v <= bound) or values[:1]


def params(tier: str | None = None) -> tuple[str, ...]:
    """The keys ``tier`` searches (``None``: the untiered space); ``complete`` adds the rest."""
    return PARAMS if tier is None else _TIER_PARAMS[tier]


def _splits(problem: GemmProblem) -> tuple[int, ...]:
    return tuple(s for s in (1, 2, 4, 8, 16, 32, 64, 128) if s == 1 or problem.k // s >= 256)


def space(problem: GemmProblem, tier: str | None = None) -> tuple[Choice, ...]:
    """The dimensions for ``problem`` (in ``tier``; ``None``: every split, no tier keys): tiles
    no larger than the problem, split-K only where K is long enough to split."""
    split_k = _splits(problem)
    if tier in ("tiles", "hopper"):
        split_k = (1,)
    elif tier == "split_k":
        split_k = tuple(s for s in split_k if s > 1) or (1,)
    extra: tuple[Choice, ...] = ()
    if tier == "hopper":
        extra = (Choice("PERSISTENT", (1,)), Choice("num_ctas", CLUSTER_SIZES))
    elif tier == "precision":
        extra = (Choice("INPUT_PRECISION", ("tf32", "tf32x3")),)  # type: ignore[arg-type]
    elif tier is not None and tier not in _TIER_PARAMS:
        raise ValueError(f"unknown tier {tier!r}; one of {TIERS}")
    return (
        Choice("BLOCK_M", _up_to(_BLOCK_M, problem.m)),
        Choice("BLOCK_N", _up_to(_BLOCK_N, problem.n)),
        Choice("BLOCK_K", _up_to((32, 64, 128, 256), problem.k)),
        Choice("GROUP_M", (1, 4, 8, 16)),
        Choice("SPLIT_K", split_k),
        Choice("num_warps", (2, 4, 8)),
        Choice("num_stages", (2, 3, 4, 5, 6)),
        *extra,
    )


def tier_plans(problem: GemmProblem, *, mode: str, cc: str, sm_count: int,
               allow_tf32: bool) -> tuple[TierPlan, ...]:
    """The tiers in search order, each saying whether it applies to ``problem`` on this device
    and why; the decision explains skipped tiers with these reasons. fp8 inputs are the fp8
    tier's (``search.kinds.gemm.fp8_space``): none of these applies to them."""
    if problem.dtype not in TEMPLATE_DTYPES:
        why = (f"{problem.dtype} inputs: the tiled template multiplies "
               f"{', '.join(TEMPLATE_DTYPES)}; the fp8 tier searches the fp8 template")
        return tuple(TierPlan(t, TIER_WEIGHTS[t], False, why) for t in TIERS)
    sms = sm_count or 132
    tiles_128 = -(-problem.m // 128) * -(-problem.n // 128) * problem.batch
    has_split = len(_splits(problem)) > 1
    if not has_split:
        split = (False, f"k={problem.k} is too short to split (each split needs 256 or more)")
    elif tiles_128 >= sms:
        split = (False, f"{tiles_128} output tiles of 128x128 already fill the {sms} SMs")
    else:
        split = (True, f"{tiles_128} output tiles of 128x128 leave SMs of {sms} idle")
    hopper = (mode == "cuda" and cc.split(".")[0] == "9",
              "sm_90 (TMA, warp specialisation, clusters)" if mode == "cuda" and
              cc.split(".")[0] == "9" else f"needs sm_90; this device is {mode} cc {cc or '?'}")
    if problem.dtype != "fp32":
        precision = (False, f"inputs are {problem.dtype}; lower precision applies to fp32")
    elif not allow_tf32:
        precision = (False, "the job's policy does not allow tf32")
    else:
        precision = (True, "fp32 inputs, tf32 allowed by the policy")
    tiles = (True, "always")
    # Without a split, a kernel has one CTA per output tile. Where even the smallest tiles
    # leave three SMs in four idle and splitting K can fill them, the unsplit tiers cannot
    # compete: on the H100, 64x64x65536 unsplit took 104 us (tiles) and 135 us (persistent)
    # against 14.7 us split (run 5 of docs/benchmarks/agent_h100_2026-11-22.md). Split-K
    # covers the shape alone.
    bm, bn = _up_to(_BLOCK_M, problem.m)[0], _up_to(_BLOCK_N, problem.n)[0]
    ctas = -(-problem.m // bm) * -(-problem.n // bn) * problem.batch
    if split[0] and 4 * ctas < sms <= ctas * max(_splits(problem)):
        unsplit = (f"without a split at most {ctas} CTAs ({bm}x{bn} tiles) run on the {sms} SMs "
                   f"({ctas / sms:.0%}); the split-K tier searches this shape")
        tiles = (False, unsplit)
        if hopper[0]:
            hopper = (False, unsplit)
    reasons = {"tiles": tiles, "split_k": split, "hopper": hopper, "precision": precision}
    # The persistent kernel refines the tiled one: on an H100 it gained 0-3% over the same
    # tiles (variants in docs/notes/kernels.md); 10% bounds what the tier can be expected to add.
    gains = {"hopper": 0.10}
    return tuple(TierPlan(t, TIER_WEIGHTS[t], *reasons[t], max_gain=gains.get(t))
                 for t in TIERS)


def seeds(problem: GemmProblem, tier: str | None = None) -> list[dict[str, Any]]:
    """Known-good starting points (from the Triton matmul tutorial's configs and from the
    measurements under ``tests/data``): big tiles for big problems, split-K for skinny ones;
    in a tier, the ones of that tier (with its keys added). Complete configurations."""
    big = [
        dict(BLOCK_M=128, BLOCK_N=256, BLOCK_K=64, GROUP_M=8, SPLIT_K=1, num_warps=8,
             num_stages=3),
        dict(BLOCK_M=128, BLOCK_N=128, BLOCK_K=64, GROUP_M=8, SPLIT_K=1, num_warps=8,
             num_stages=4),
        dict(BLOCK_M=256, BLOCK_N=128, BLOCK_K=64, GROUP_M=8, SPLIT_K=1, num_warps=8,
             num_stages=3),
        dict(BLOCK_M=128, BLOCK_N=128, BLOCK_K=64, GROUP_M=8, SPLIT_K=1, num_warps=4,
             num_stages=4),
        dict(BLOCK_M=64, BLOCK_N=128, BLOCK_K=64, GROUP_M=8, SPLIT_K=1, num_warps=4,
             num_stages=4),
    ]
    # Measured best on an H100 (docs/notes/kernels.md): split 2 for 16xN, split 64 for long K.
    skinny = [
        dict(BLOCK_M=16, BLOCK_N=64, BLOCK_K=128, GROUP_M=1, SPLIT_K=2, num_warps=4,
             num_stages=4),
        dict(BLOCK_M=64, BLOCK_N=64, BLOCK_K=128, GROUP_M=1, SPLIT_K=64, num_warps=4,
             num_stages=4),
        dict(BLOCK_M=16, BLOCK_N=64, BLOCK_K=256, GROUP_M=1, SPLIT_K=2, num_warps=4,
             num_stages=3),
        dict(BLOCK_M=64, BLOCK_N=32, BLOCK_K=128, GROUP_M=1, SPLIT_K=64, num_warps=4,
             num_stages=4),
        dict(BLOCK_M=16, BLOCK_N=128, BLOCK_K=128, GROUP_M=1, SPLIT_K=2, num_warps=4,
             num_stages=4),
        dict(BLOCK_M=64, BLOCK_N=64, BLOCK_K=256, GROUP_M=1, SPLIT_K=64, num_warps=4,
             num_stages=3),
        dict(BLOCK_M=32, BLOCK_N=64, BLOCK_K=128, GROUP_M=1, SPLIT_K=16, num_warps=4,
             num_stages=4),
        dict(BLOCK_M=64, BLOCK_N=64, BLOCK_K=64, GROUP_M=8, SPLIT_K=1, num_warps=4,
             num_stages=3),
        # unsplit skinny tiles: the tile tier's starting points for small m
        dict(BLOCK_M=16, BLOCK_N=64, BLOCK_K=256, GROUP_M=1, SPLIT_K=1, num_warps=4,
             num_stages=5),
        dict(BLOCK_M=16, BLOCK_N=128, BLOCK_K=128, GROUP_M=1, SPLIT_K=1, num_warps=4,
             num_stages=4),
        dict(BLOCK_M=32, BLOCK_N=64, BLOCK_K=128, GROUP_M=1, SPLIT_K=1, num_warps=4,
             num_stages=4),
    ]
    tiles_mn = (problem.m // 128 + 1) * (problem.n // 128 + 1)
    skinny_first = problem.m <= 128 or tiles_mn < 64
    ordered = skinny + big if skinny_first else big + skinny
    if tier == "hopper":
        unsplit = [s for s in ordered if s["SPLIT_K"] == 1][:3]
        ordered = [{**s, "PERSISTENT": 1} for s in unsplit]
    elif tier == "precision":
        ordered = [{**s, "INPUT_PRECISION": "tf32"} for s in ordered]
    legal = {c.name: set(c.values) for c in space(problem, tier)}
    done = [complete(s) for s in ordered]
    return [c for c in done if all(c[p] in legal[p] for p in params(tier))]
