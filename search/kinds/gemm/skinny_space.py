"""Search space of the one-launch skinny split-K GEMM (``kernel_templates/gemm/skinny.py``):
its dimensions, static rules, seeds, and which shapes it is planned for.

A configuration::

    {"BLOCK_M": 64, "BLOCK_N": 64, "BLOCK_K": 128, "SPLIT_K": 64, "num_warps": 4,
     "num_stages": 4, "MODE": "barrier", "TMA": 0}

Only the deterministic reductions are searched: ``"barrier"`` (one launch, a grid barrier, so
the grid must fit the SMs at once) and ``"two_launch"``; ``"atomic"`` sums in arrival order.
"""

from __future__ import annotations

import math
from typing import Any

from search.kinds.gemm.spec import DTYPE_BYTES, GemmProblem
from search.limits import DeviceLimits
from search.optimizer import Choice

__all__ = ["MIN_K", "MIN_SPLIT", "MODES", "PARAMS", "applies", "seeds", "space", "violations"]

PARAMS = ("BLOCK_M", "BLOCK_N", "BLOCK_K", "SPLIT_K", "num_warps", "num_stages", "MODE", "TMA")
MODES = ("barrier", "two_launch")
#: Planned for long K only: each of at least ``MIN_SPLIT`` K slices then still streams
#: thousands of elements per output row.
MIN_K = 16384
#: ... and an output small enough that 64x64 tiles split ``MIN_SPLIT`` ways fit the SMs in one
#: wave (the barrier's condition), so the reduction can be spread over every program.
MIN_SPLIT = 8
#: Each K slice is at least this long.
MIN_SLICE = 256

_BLOCK_M = (16, 32, 64)
_BLOCK_N = (16, 32, 64, 128)


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


def _splits(problem: GemmProblem) -> tuple[int, ...]:
    return tuple(s for s in (2, 4, 8, 16, 32, 64, 128, 256) if problem.k // s >= MIN_SLICE)


def space(problem: GemmProblem) -> tuple[Choice, ...]:
    return (
        Choice("BLOCK_M", _up_to(_BLOCK_M, problem.m)),
        Choice("BLOCK_N", _up_to(_BLOCK_N, problem.n)),
        Choice("BLOCK_K", (64, 128, 256)),
        Choice("SPLIT_K", _splits(problem) or (1,)),
        Choice("num_warps", (2, 4, 8)),
        Choice("num_stages", (2, 3, 4, 5, 6)),
        Choice("MODE", MODES),
        Choice("TMA", (0, 1)),
    )


def violations(problem: GemmProblem, config: dict[str, Any], limits: DeviceLimits
               ) -> list[str]:
    """Every static rule ``config`` breaks (empty: feasible). The barrier's grid limit needs
    the SM count (``limits.sm_count``; 0: unknown, not checked)."""
    out: list[str] = []
    for name in ("BLOCK_M", "BLOCK_N", "BLOCK_K", "SPLIT_K", "num_warps"):
        v = int(config[name])
        if v <= 0 or v & (v - 1):
            out.append(f"{name}={v} is not a power of two")
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
    grid = _tiles(problem, bm, bn) * sk
    if config.get("MODE", "barrier") == "barrier" and limits.sm_count and grid > limits.sm_count:
        out.append(f"MODE=barrier launches {grid} programs, over the {limits.sm_count} SMs "
                   "that can be resident at once")
    smem = config["num_stages"] * (bm + bn) * bk * DTYPE_BYTES[problem.dtype]
    if smem > limits.smem_per_block:
        out.append(f"shared memory {smem} B for {config['num_stages']} stages is over the "
                   f"device limit {limits.smem_per_block} B")
    threads = 32 * config["num_warps"]
    if bm * bn < 4 * threads:
        out.append(f"tile {bm}x{bn} is too small for {config['num_warps']} warps")
    if config["num_warps"] > limits.max_warps:
        out.append(f"num_warps={config['num_warps']} is over {limits.max_warps}")
    return out


def seeds(problem: GemmProblem, sm_count: int) -> list[dict[str, Any]]:
    """Starting points: per tile shape (the H100's best for 64x64x65536 first: 64x64 and
    64x32 tiles, ``BLOCK_K`` 128, pointer loads), the largest split whose grid fits the SMs
    under the barrier, then the same tiles reduced in two launches with twice the split."""
    sms = sm_count or 132
    legal = {c.name: set(c.values) for c in space(problem)}
    out: list[dict[str, Any]] = []
    tiles_of = [(64, 64), (64, 32), (32, 64), (16, 128), (32, 128), (16, 64)]
    for mode in MODES:
        for bm, bn in tiles_of:
            if bm not in legal["BLOCK_M"] or bn not in legal["BLOCK_N"]:
                continue
            fits = [s for s in sorted(legal["SPLIT_K"]) if _tiles(problem, bm, bn) * s <= sms]
            if not fits:
                continue
            sk = fits[-1] if mode == "barrier" else min(max(legal["SPLIT_K"]), 2 * fits[-1])
            config = dict(BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=128, SPLIT_K=sk, num_warps=4,
                          num_stages=4, MODE=mode, TMA=0)
            if config not in out and all(config[p] in legal[p] for p in PARAMS):
                out.append(config)
    return out
