"""Search space of the stream-K GEMM (``kernel_templates/gemm/streamk.py``): its dimensions,
static rules, seeds, and when the shape's tile count makes it worth searching.

A configuration::

    {"BLOCK_M": 128, "BLOCK_N": 128, "BLOCK_K": 64, "GROUP_M": 8, "num_warps": 8,
     "num_stages": 3, "GRID": 1, "ORDER": "rows", "LOADS": "auto"}

``ORDER="columns"`` (groups of programs walk the tile rows of one tile column side by side, so
B is read from DRAM about once) is seeded first where B is much larger than A: small ``m``.
Where ``m`` is over 64 and at most 256, stacked tiles lead (``STACK`` 64-row m-tiles cover all
of ``m`` and share each B tile) in lockstep order on all SMs but four (``IDLE_SMS``): the
fastest Triton kernels of ``docs/benchmarks/gemm_midm_h100_2026-11-27.md``.
"""

from __future__ import annotations

import math
from typing import Any

from search.kinds.gemm.alignment import tma_loads, tma_loads_rule
from search.kinds.gemm.spec import DTYPE_BYTES, GemmProblem
from search.limits import DeviceLimits
from search.optimizer import Choice

__all__ = ["COLUMNS_FIRST_RATIO", "DEFAULTS", "IDLE", "MAX_PROGRAMS_PER_TILE", "MAX_WAVE_USE",
           "MIN_K_ITERS", "ORDERS", "PARAMS", "STACKS", "STACK_M", "applies", "columns_first",
           "complete", "seeds", "space", "stackable", "violations", "wave_use"]

PARAMS = ("BLOCK_M", "BLOCK_N", "BLOCK_K", "GROUP_M", "num_warps", "num_stages", "GRID",
          "ORDER")
ORDERS = ("rows", "columns", "lockstep")
#: Dimensions searched with lockstep order (the repair tier's rows order keeps to the rest).
STACKS = (1, 2, 3, 4)
IDLE = (0, 4)
#: Stacked seeds lead for m in this range (64-row m-tiles, at most 4 of them).
STACK_M = (65, 256)
#: Keys the template takes that the space does not search, at their values (a space without
#: ``ORDER`` leaves it out of its configurations: the template's default, rows).
DEFAULTS: dict[str, Any] = {"LOADS": "auto"}
#: Columns-order seeds come first when B has at least this many times A's elements (n / m).
COLUMNS_FIRST_RATIO = 4
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


def space(problem: GemmProblem, orders: tuple[str, ...] = ORDERS) -> tuple[Choice, ...]:
    """The dimensions; ``orders``: the ``ORDER`` values searched (one: not a dimension, the
    template's default fills it)."""
    order = (Choice("ORDER", orders),) if len(orders) > 1 else ()
    if "lockstep" in orders:
        order += (Choice("STACK", STACKS), Choice("IDLE_SMS", IDLE))
    return (
        Choice("BLOCK_M", _up_to(_BLOCK_M, problem.m)),
        Choice("BLOCK_N", _up_to(_BLOCK_N, problem.n)),
        Choice("BLOCK_K", _up_to((32, 64, 128), problem.k)),
        Choice("GROUP_M", (1, 4, 8)),
        Choice("num_warps", (4, 8)),
        Choice("num_stages", (2, 3, 4, 5, 6)),
        Choice("GRID", (1, 2)),
        *order,
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
    stack = int(config.get("STACK", 1))
    tall = stack * bm
    if stack > 1:
        if (stack - 1) * bm >= problem.m:
            out.append(f"STACK={stack} of BLOCK_M={bm} puts a whole m-tile past m={problem.m}")
        if not stackable(problem):
            out.append(f"STACK={stack} needs TMA loads: {tma_loads_rule(problem)}")
    smem = config["num_stages"] * (tall + bn) * bk * DTYPE_BYTES[problem.dtype]
    if smem > limits.smem_per_block:
        out.append(f"shared memory {smem} B for {config['num_stages']} stages is over the "
                   f"device limit {limits.smem_per_block} B")
    threads = 32 * config["num_warps"]
    if tall * bn / threads > 256:
        out.append(f"accumulator {tall}x{bn} needs {tall * bn // threads} fp32 registers per "
                   f"thread with num_warps={config['num_warps']} (limit 256)")
    if bm * bn < 4 * threads:
        out.append(f"tile {bm}x{bn} is too small for {config['num_warps']} warps")
    if config["num_warps"] > limits.max_warps:
        out.append(f"num_warps={config['num_warps']} is over {limits.max_warps}")
    order = config.get("ORDER", "rows")
    if order not in ORDERS:
        out.append(f"ORDER={order!r} is not one of {list(ORDERS)}")
    elif order == "columns" and config["GROUP_M"] != 1:
        out.append(f"GROUP_M={config['GROUP_M']} has no effect in columns order (GROUP_M=1 "
                   "only, so the search does not measure one configuration twice)")
    return out


def stackable(problem: GemmProblem) -> bool:
    """Whether stacked tiles can run: their A tiles come through TMA only."""
    return tma_loads(problem)


def columns_first(problem: GemmProblem) -> bool:
    """Whether columns order leads the seeds: B (``k x n``) much larger than A (``m x k``), so
    reading B once is most of the traffic saved."""
    return problem.n >= COLUMNS_FIRST_RATIO * problem.m


def seeds(problem: GemmProblem, orders: tuple[str, ...] = ORDERS) -> list[dict[str, Any]]:
    """Known-good starting points, complete and within the space (tiles larger than the
    problem shrunk to fit): the tiled template's big-tile seeds in rows order, one CTA per SM
    first; where ``columns_first``, columns-order seeds before them (one tile row of
    ``BLOCK_M >= m`` where that is at most 256, then 128- and 64-row tiles in groups, the
    256-wide ones first: they read the fewest operand bytes from L2 per multiply-add)."""
    rows = [
        (128, 128, 64, 8, 8, 3, 1, "rows"), (128, 256, 64, 8, 8, 3, 1, "rows"),
        (64, 128, 64, 8, 4, 4, 1, "rows"), (128, 128, 64, 8, 4, 4, 2, "rows"),
        (128, 64, 64, 8, 4, 4, 1, "rows"), (64, 256, 64, 8, 8, 4, 1, "rows"),
        (128, 128, 128, 8, 8, 2, 1, "rows"),
    ]
    if "columns" in orders and columns_first(problem):
        one_row = [bm for bm in _BLOCK_M if bm >= problem.m]
        rows = [
            *[(bm, 128, 64, 1, 8, 3, 1, "columns") for bm in one_row[:1] if bm >= 128],
            (128, 256, 64, 1, 8, 3, 1, "columns"), (64, 256, 64, 1, 8, 4, 1, "columns"),
            (128, 128, 64, 1, 8, 4, 1, "columns"), (64, 128, 64, 1, 4, 4, 1, "columns"),
            *rows,
        ]
    legal = {c.name: c.values for c in space(problem, orders)}
    legal.setdefault("ORDER", orders)  # one order: not a dimension
    # each row with its STACK and IDLE_SMS
    stacked: list[tuple[tuple[Any, ...], int, int]] = [(row, 1, 0) for row in rows]
    if ("lockstep" in orders and STACK_M[0] <= problem.m <= STACK_M[1]
            and stackable(problem)):
        stack = math.ceil(problem.m / 64)
        deep = (6, 5) if stack <= 3 else (5, 4)  # within an H100's 227 KiB of shared memory
        stacked = [((64, 64, 64, 1, 4, d, 1, "lockstep"), stack, 4) for d in deep] + stacked
    out: list[dict[str, Any]] = []
    for row, stack, idle in stacked:
        if row[-1] not in legal["ORDER"]:
            continue
        # a value the space lacks (a tile over a small problem) becomes the nearest below it
        config: dict[str, Any] = {
            p: max((v for v in legal[p] if v <= x), default=legal[p][0])
            for p, x in zip(PARAMS[:-1], row[:-1], strict=True)}
        if len(orders) > 1:
            config["ORDER"] = row[-1]
        if "STACK" in legal:
            config.update(STACK=stack, IDLE_SMS=idle)
        if complete(config) not in out:
            out.append(complete(config))
    return out
