"""Search space of the stream-K GEMM (``kernel_templates/gemm/streamk.py``): its dimensions,
static rules, seeds, and when the shape's tile count makes it worth searching.

A configuration::

    {"BLOCK_M": 128, "BLOCK_N": 128, "BLOCK_K": 64, "GROUP_M": 8, "num_warps": 8,
     "num_stages": 3, "GRID": 1, "LOADS": "auto"}
"""

from __future__ import annotations

import math
from typing import Any

from search.kinds.gemm.spec import DTYPE_BYTES, GemmProblem
from search.limits import DeviceLimits
from search.optimizer import Choice

__all__ = ["DEFAULTS", "MAX_PROGRAMS_PER_TILE", "MAX_WAVE_USE", "MIN_K_ITERS", "PARAMS",
           "applies", "complete", "seeds", "space", "violations", "wave_use"]

PARAMS = ("BLOCK_M", "BLOCK_N", "BLOCK_K", "GROUP_M", "num_warps", "num_stages", "GRID")
#: Keys the template takes that the space does not search, at their values.
DEFAULTS: dict[str, Any] = {"LOADS": "auto"}
#: Stream-K is planned when 128x128 tiles keep less than this share of the SMs' tile slots busy
#: over the waves they take (96 tiles on 132 SMs: 73%; 1024 tiles: 97%).
MAX_WAVE_USE = 0.9
#: ... and each tile has at least this many 64-deep K iterations to deal out.
MIN_K_ITERS = 16
#: ... and m is over this: shorter outputs are the split-K and skinny tiers' shapes.
MIN_M = 64
#: ... and no tile is dealt out over more than about this many programs: the tile's owner sums
#: the others' partials alone (split-K and the skinny kernel spread that reduction).
MAX_PROGRAMS_PER_TILE = 8

_BLOCK_M = (32, 64, 128, 256)
_BLOCK_N = (64, 128, 256)


def wave_use(problem: GemmProblem, sm_count: int, tile: int = 128) -> float:
    """The share of tile slots ``tile x tile`` output tiles keep busy over the waves they need
    on ``sm_count`` SMs (1.0: the last wave is full)."""
    tiles = math.ceil(problem.m / tile) * math.ceil(problem.n / tile) * problem.batch
    waves = math.ceil(tiles / sm_count)
    return tiles / (waves * sm_count)


def applies(problem: GemmProblem, sm_count: int) -> tuple[bool, str]:
    """Whether the stream-K tier fits ``problem`` on ``sm_count`` SMs, and why (a clause)."""
    use = wave_use(problem, sm_count)
    tiles = math.ceil(problem.m / 128) * math.ceil(problem.n / 128) * problem.batch
    if problem.batch != 1:
        return False, "the stream-K kernel serves batch 1"
    if problem.m <= MIN_M:
        return False, (f"m={problem.m} is a skinny output (split-K and the skinny kernel "
                       "serve it)")
    if problem.k < MIN_K_ITERS * 64:
        return False, f"k={problem.k} is too short to deal out (needs {MIN_K_ITERS * 64})"
    if tiles * MAX_PROGRAMS_PER_TILE < sm_count:
        return False, (f"{tiles} output tiles of 128x128 on {sm_count} SMs: each would be "
                       f"dealt out over more than {MAX_PROGRAMS_PER_TILE} programs, whose "
                       "partials one owner sums (split-K spreads that reduction)")
    if use >= MAX_WAVE_USE:
        return False, (f"{tiles} output tiles of 128x128 keep {use:.0%} of the {sm_count} SMs' "
                       "tile slots busy")
    return True, (f"{tiles} output tiles of 128x128 keep only {use:.0%} of the {sm_count} SMs' "
                  "tile slots busy; stream-K deals the K iterations out evenly")


def _up_to(values: tuple[int, ...], size: int) -> tuple[int, ...]:
    bound = 1 << max(0, size - 1).bit_length()
    return tuple(v for v in values if v <= bound) or values[:1]


def space(problem: GemmProblem) -> tuple[Choice, ...]:
    return (
        Choice("BLOCK_M", _up_to(_BLOCK_M, problem.m)),
        Choice("BLOCK_N", _up_to(_BLOCK_N, problem.n)),
        Choice("BLOCK_K", _up_to((32, 64, 128), problem.k)),
        Choice("GROUP_M", (1, 4, 8)),
        Choice("num_warps", (4, 8)),
        Choice("num_stages", (2, 3, 4, 5)),
        Choice("GRID", (1, 2)),
    )


def complete(config: dict[str, Any]) -> dict[str, Any]:
    """``config`` with the template's unsearched keys at their values."""
    return {**DEFAULTS, **config}


def violations(problem: GemmProblem, config: dict[str, Any], limits: DeviceLimits
               ) -> list[str]:
    """Every static rule ``config`` breaks (empty: feasible)."""
    out: list[str] = []
    bm, bn, bk = config["BLOCK_M"], config["BLOCK_N"], config["BLOCK_K"]
    for name in ("BLOCK_M", "BLOCK_N", "BLOCK_K", "num_warps"):
        v = int(config[name])
        if v <= 0 or v & (v - 1):
            out.append(f"{name}={v} is not a power of two")
    if out:
        return out
    smem = config["num_stages"] * (bm + bn) * bk * DTYPE_BYTES[problem.dtype]
    if smem > limits.smem_per_block:
        out.append(f"shared memory {smem} B for {config['num_stages']} stages is over the "
                   f"device limit {limits.smem_per_block} B")
    threads = 32 * config["num_warps"]
    if bm * bn / threads > 256:
        out.append(f"accumulator {bm}x{bn} needs {bm * bn // threads} fp32 registers per thread "
                   f"with num_warps={config['num_warps']} (limit 256)")
    if bm * bn < 4 * threads:
        out.append(f"tile {bm}x{bn} is too small for {config['num_warps']} warps")
    if config["num_warps"] > limits.max_warps:
        out.append(f"num_warps={config['num_warps']} is over {limits.max_warps}")
    return out


def seeds(problem: GemmProblem) -> list[dict[str, Any]]:
    """Known-good starting points (the tiled template's big-tile seeds, one CTA per SM first),
    complete and within the space (tiles larger than the problem shrunk to fit)."""
    rows = [
        (128, 128, 64, 8, 8, 3, 1), (128, 256, 64, 8, 8, 3, 1), (64, 128, 64, 8, 4, 4, 1),
        (128, 128, 64, 8, 4, 4, 2), (128, 64, 64, 8, 4, 4, 1), (64, 256, 64, 8, 8, 4, 1),
        (128, 128, 128, 8, 8, 2, 1),
    ]
    legal = {c.name: c.values for c in space(problem)}
    out: list[dict[str, Any]] = []
    for row in rows:
        # a value the space lacks (a tile over a small problem) becomes the nearest below it
        config = {p: max((v for v in legal[p] if v <= x), default=legal[p][0])
                  for p, x in zip(PARAMS, row, strict=True)}
        if complete(config) not in out:
            out.append(complete(config))
    return out
