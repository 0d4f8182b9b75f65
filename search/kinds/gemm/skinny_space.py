"""Search space of the one-launch skinny split-K GEMM (``kernel_templates/gemm/skinny.py``):
its dimensions, static rules, seeds, and which shapes it is planned for.

A configuration::

    {"BLOCK_M": 64, "BLOCK_N": 64, "BLOCK_K": 128, "SPLIT_K": 33, "num_warps": 4,
     "num_stages": 4, "MODE": "barrier", "TMA": 0, "SWAP": 0}

Splits are powers of two and, given the SM count, the counts that make a tile grid fill 1-3
waves of the SMs (4 tiles x 33 = 132). The product is bandwidth-bound: the seeds keep
``(num_stages - 1)`` stages of ``(BLOCK_M + BLOCK_N) x BLOCK_K`` operands in flight per SM,
64-128 KB, within the shared memory.

Only the deterministic reductions are searched: ``"barrier"`` (one launch, a grid barrier, so
the grid must fit the SMs at once), ``"tagged"`` (one launch, epoch-tagged partials instead of
the barrier, the same grid limit) and ``"two_launch"``; ``"atomic"`` sums in arrival order.
"""

from __future__ import annotations

import math
from typing import Any

from search.kinds.gemm.alignment import tma_loads, tma_loads_rule
from search.kinds.gemm.spec import DTYPE_BYTES, GemmProblem
from search.limits import DeviceLimits
from search.optimizer import Choice

__all__ = ["MIN_K", "MIN_SPLIT", "MODES", "PARAMS", "WAVES", "applies", "seeds", "space",
           "violations"]

PARAMS = ("BLOCK_M", "BLOCK_N", "BLOCK_K", "SPLIT_K", "num_warps", "num_stages", "MODE", "TMA",
          "SWAP")
MODES = ("barrier", "tagged", "two_launch")
#: The modes whose programs wait for each other, so the grid must fit the SMs at once.
RESIDENT = ("barrier", "tagged")
#: Planned for long K only: each of at least ``MIN_SPLIT`` K slices then still streams
#: thousands of elements per output row.
MIN_K = 16384
#: ... and an output small enough that 64x64 tiles split ``MIN_SPLIT`` ways fit the SMs in one
#: wave (the barrier's condition), so the reduction can be spread over every program.
MIN_SPLIT = 8
#: Each K slice is at least this long.
MIN_SLICE = 256
#: Splits that fill this many waves of the SMs with a tile grid are in the space.
WAVES = (1, 2, 3)
#: Shared memory the seeds stay within (the H100's opt-in per block).
SEED_SMEM = DeviceLimits().smem_per_block

_BLOCK_M = (16, 32, 64)
_BLOCK_N = (16, 32, 64, 128)


def swappable(problem: GemmProblem) -> bool:
    """Whether ``SWAP`` can run: its K loop is the TMA kernel's."""
    return tma_loads(problem)


def _tiles(problem: GemmProblem, bm: int, bn: int) -> int:
    return math.ceil(problem.m / bm) * math.ceil(problem.n / bn)


def applies(problem: GemmProblem, sm_count: int) -> tuple[bool, str]:
    """Whether the skinny tier fits ``problem`` on ``sm_count`` SMs, and why (a clause)."""
    tiles = _tiles(problem, 64, 64)
    if problem.batch != 1:
        return False, "the skinny kernel serves batch 1"
    if problem.k < MIN_K:
        return False, f"k={problem.k} is under {MIN_K}: not a long-K shape"
    if tiles * MIN_SPLIT > sm_count:
        return False, (f"{tiles} output tiles of 64x64 split {MIN_SPLIT} ways would not fit "
                       f"the {sm_count} SMs in one wave")
    return True, (f"long K ({problem.k}) and a small output ({tiles} tiles of 64x64): one "
                  f"launch splits K over the {sm_count} SMs and spreads the reduction")


def _up_to(values: tuple[int, ...], size: int) -> tuple[int, ...]:
    bound = 1 << max(0, size - 1).bit_length()
    return tuple(v for v in values if v <= bound) or values[:1]


def _tile_shapes(problem: GemmProblem) -> list[tuple[int, int]]:
    return [(bm, bn) for bm in _up_to(_BLOCK_M, problem.m) for bn in _up_to(_BLOCK_N, problem.n)]


def _splits(problem: GemmProblem, sm_count: int = 0) -> tuple[int, ...]:
    """Powers of two and, with ``sm_count``, the splits whose grid of some legal tile shape
    fills ``WAVES`` waves of the SMs; each K slice at least ``MIN_SLICE`` long."""
    found = {2, 4, 8, 16, 32, 64, 128, 256}
    if sm_count:
        for bm, bn in _tile_shapes(problem):
            found |= {w * sm_count // _tiles(problem, bm, bn) for w in WAVES}
    return tuple(s for s in sorted(found) if s >= 2 and problem.k // s >= MIN_SLICE)


def space(problem: GemmProblem, sm_count: int = 0) -> tuple[Choice, ...]:
    """The dimensions; ``sm_count`` (0: unknown) adds the wave-filling splits."""
    return (
        Choice("BLOCK_M", _up_to(_BLOCK_M, problem.m)),
        Choice("BLOCK_N", _up_to(_BLOCK_N, problem.n)),
        Choice("BLOCK_K", (64, 128, 256, 512)),
        Choice("SPLIT_K", _splits(problem, sm_count) or (1,)),
        Choice("num_warps", (2, 4, 8)),
        Choice("num_stages", (2, 3, 4, 5, 6)),
        Choice("MODE", MODES),
        Choice("TMA", (0, 1)),
        Choice("SWAP", (0, 1) if swappable(problem) else (0,)),
    )


def violations(problem: GemmProblem, config: dict[str, Any], limits: DeviceLimits
               ) -> list[str]:
    """Every static rule ``config`` breaks (empty: feasible). The barrier's grid limit needs
    the SM count (``limits.sm_count``; 0: unknown, not checked)."""
    out: list[str] = []
    for name in ("BLOCK_M", "BLOCK_N", "BLOCK_K", "num_warps"):
        v = int(config[name])
        if v <= 0 or v & (v - 1):
            out.append(f"{name}={v} is not a power of two")
    if int(config["SPLIT_K"]) < 1:
        out.append(f"SPLIT_K={config['SPLIT_K']} is not positive")
    if out:
        return out
    bm, bn, bk, sk = config["BLOCK_M"], config["BLOCK_N"], config["BLOCK_K"], config["SPLIT_K"]
    if config.get("MODE", "barrier") not in (*MODES, "atomic"):
        out.append(f"MODE={config.get('MODE')!r} is not one of {MODES}")
    if sk > bm * bn:
        out.append(f"SPLIT_K={sk} is over the {bm}x{bn} tile's {bm * bn} elements (each "
                   "program reduces a share of its tile)")
    if -(-problem.k // sk) < bk:
        out.append(f"SPLIT_K={sk} leaves {-(-problem.k // sk)} of k per split, under "
                   f"BLOCK_K={bk}")
    else:
        # slices are whole BLOCK_K steps: the rounding can leave the last ones empty, programs
        # that cost a reduction share and shorten no slice
        per_split = math.ceil(math.ceil(problem.k / sk) / bk) * bk
        used = math.ceil(problem.k / per_split)
        if used < sk:
            out.append(f"SPLIT_K={sk} with BLOCK_K={bk} fills only {used} slices of "
                       f"{per_split} (k={problem.k}): SPLIT_K={used} does the same work")
    grid = _tiles(problem, bm, bn) * sk
    mode = config.get("MODE", "barrier")
    if mode in RESIDENT and limits.sm_count and grid > limits.sm_count:
        out.append(f"MODE={mode} launches {grid} programs, over the {limits.sm_count} SMs "
                   "that can be resident at once")
    smem = config["num_stages"] * (bm + bn) * bk * DTYPE_BYTES[problem.dtype]
    if smem > limits.smem_per_block:
        out.append(f"shared memory {smem} B for {config['num_stages']} stages is over the "
                   f"device limit {limits.smem_per_block} B")
    if int(config.get("SWAP", 0)):
        if not int(config.get("TMA", 1)) or not swappable(problem):
            out.append(f"SWAP=1 needs TMA loads: TMA=1 and {tma_loads_rule(problem)}")
        if bn < 64 or config["num_warps"] < 4:
            out.append(f"SWAP=1 puts BLOCK_N on wgmma's M of 64 rows per warp group: it needs "
                       f"BLOCK_N >= 64 and num_warps >= 4, got {bn} and "
                       f"{config['num_warps']}")
    threads = 32 * config["num_warps"]
    if bm * bn < 4 * threads:
        out.append(f"tile {bm}x{bn} is too small for {config['num_warps']} warps")
    if config["num_warps"] > limits.max_warps:
        out.append(f"num_warps={config['num_warps']} is over {limits.max_warps}")
    return out


def seeds(problem: GemmProblem, sm_count: int) -> list[dict[str, Any]]:
    """Starting points. Tile shapes are ranked by how fully their largest one-wave split fills the
    SMs (ties: the H100's best for 64x64x65536 first: 64x64, then 64x32). Those of the best
    two with fewer than 64 rows and 64 columns lead with the swapped K loop
    (``SWAP``, where the operands allow TMA loads): ``BLOCK_K`` 256 three stages deep, then
    128 four deep, 4 warps, under the barrier. The best two then get, in turn, TMA loads
    with ``BLOCK_K`` 128 five stages deep under the barrier, four under the tagged reduction
    and ``BLOCK_K`` 256 three deep under the barrier (2 warps for tiles of at most 2048
    elements, else 4); then pointer loads: ``BLOCK_K`` 128 five stages deep under the
    barrier, four under the tagged reduction (warps as before), then under the barrier four
    stages (4 warps), 256 three, 128 five (8 warps), as far as the shared memory holds them,
    and their largest power-of-two split; then the rest of the shapes, and last the
    two-launch reduction over splits that fill two waves. Where whole ``BLOCK_K`` steps
    would leave the last K slices empty, half the ``BLOCK_K`` two stages deeper. (TMA loads
    where the operands allow them: the launcher falls back to pointer loads where they do
    not.)"""
    sms = sm_count or 132
    legal = {c.name: set(c.values) for c in space(problem, sms)}
    order = [(64, 64), (64, 32), (32, 64), (16, 128), (32, 128), (16, 64), (64, 128)]
    shapes = [t for t in order if t[0] in legal["BLOCK_M"] and t[1] in legal["BLOCK_N"]]

    def split(bm: int, bn: int, waves: int, pow2: bool = False) -> int | None:
        fits = [s for s in sorted(legal["SPLIT_K"]) if _tiles(problem, bm, bn) * s <= waves * sms
                and s <= bm * bn and (not pow2 or s & (s - 1) == 0)]
        return fits[-1] if fits else None

    shapes = [t for t in shapes if split(*t, 1)]
    shapes.sort(key=lambda t: -_tiles(problem, *t) * (split(*t, 1) or 0))
    def warps(bm: int, bn: int) -> int:
        return 2 if bm * bn <= 2048 else 4

    rows: list[tuple[int, int, int, int | None, int, int, str, int, int]] = []
    best = shapes[:2]
    if swappable(problem):
        # tiles of fewer than 64 rows and 64 columns: the swapped K loop (one wgmma M block
        # per warp group) first
        for bk, stages in ((256, 3), (128, 4)):
            rows += [(bm, bn, bk, split(bm, bn, 1), 4, stages, "barrier", 1, 1)
                     for bm, bn in best if bm < 64 and bn == 64]
    for bk, stages, mode in ((128, 5, "barrier"), (128, 4, "tagged"), (256, 3, "barrier")):
        rows += [(bm, bn, bk, split(bm, bn, 1), warps(bm, bn), stages, mode, 1, 0)
                 for bm, bn in best]
    rows += [(bm, bn, 128, split(bm, bn, 1), warps(bm, bn), 5, "barrier", 0, 0)
             for bm, bn in best]
    rows += [(bm, bn, 128, split(bm, bn, 1), warps(bm, bn), 4, "tagged", 0, 0)
             for bm, bn in best]
    for bm, bn in best:
        sk = split(bm, bn, 1)
        for bk, stages, w in ((128, 4, 4), (256, 3, 4), (128, 5, 8)):
            rows.append((bm, bn, bk, sk, w, stages, "barrier", 0, 0))
        rows.append((bm, bn, 128, split(bm, bn, 1, pow2=True), 4, 4, "barrier", 0, 0))
    for bm, bn in shapes[2:]:
        rows.append((bm, bn, 128, split(bm, bn, 1), 4, 4, "barrier", 0, 0))
    for bm, bn in shapes[:3]:
        rows.append((bm, bn, 128, split(bm, bn, 2), 4, 4, "two_launch", 0, 0))
    out: list[dict[str, Any]] = []
    limits = DeviceLimits(sm_count=sms, smem_per_block=SEED_SMEM)
    for bm, bn, bk, sk, w, stages, mode, tma, swap in rows:
        # a BLOCK_K whose whole steps leave the last slices empty gives way to half of it,
        # two stages deeper (about as many bytes in flight)
        for step, depth in ((bk, stages), (bk // 2, min(6, stages + 2))):
            config = dict(BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=step, SPLIT_K=sk, num_warps=w,
                          num_stages=depth, MODE=mode, TMA=tma, SWAP=swap)
            if (sk is not None and step in legal["BLOCK_K"]
                    and all(config[p] in legal[p] for p in PARAMS)
                    and not violations(problem, config, limits)):
                if config not in out:
                    out.append(config)
                break
    return out
