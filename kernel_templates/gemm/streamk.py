"""Stream-K GEMM on a persistent grid, with a fixed-order (deterministic) fix-up.

For shapes whose output tiles leave SMs idle (``m`` of a few hundred, ``n`` and ``k`` in the
thousands: 96 tiles of 128x128 on 132 SMs), a tile per program wastes the idle SMs and a
split-K grid multiplies the partial traffic. Stream-K (Osama et al., PPoPP 2023) instead deals
out the *multiply-accumulate iterations*: the ``tiles x ceil(K / BLOCK_K)`` iterations, tile by
tile in the grouped order, are cut into ``G`` contiguous ranges of equal length (the first
``E`` one longer), one per program, ``G`` the SM count times ``GRID``. A program walks its range
tile segment by tile segment:

- a segment that starts a tile (``k0 == 0``) is the tile's *owner*: when the tile continues into
  the next ranges, the owner waits for each of them, in range order, to publish its partial and
  adds it to its own accumulator; then it stores C;
- a segment that starts mid-tile (only ever a range's first) is a *contributor*: it stores its
  fp32 partial to the workspace slot of its range and raises its range's flag.

The sum is the owner's partial, then the contributors' in range order: fixed by the shape, the
configuration and ``G``, never by arrival order, so a configuration's results are bitwise
reproducible on a given GPU model.

Ranges run in reverse program order (program ``p`` takes range ``G - 1 - p``), so an owner only
ever waits for *lower* program ids, which the hardware dispatches first: a launch needs no
co-residency guarantee (the assumption of CUB's decoupled look-back), and the CPU interpreter,
which runs programs one after another in id order, runs the one-launch protocol itself (every
flag it waits for is already raised; ``REVERSED = False`` is the test seam that makes owners
wait for flags not yet raised). The spin is bounded (``SPIN_LIMIT`` polls); an owner that gives
up writes NaN into its tile, so a broken assumption fails the correctness check instead of
hanging the GPU.

Memory order, as in ``triton.py``'s serial split-K: every thread stores its part of the
partial, ``bar.sync``, then one thread's release atomic raises the flag (cumulativity through
the barrier); the owner polls with acquire atomics, ``bar.sync`` orders its threads' loads after
the poll that saw the flag, and those loads go to L2 (``.cg``). A flag is raised to the
launch's *epoch* (a per-device launch counter), never back to zero: an owner waits for its own
launch's epoch, so no flag needs resetting and a launch that gave up waiting cannot leave a
stale flag that a later launch mistakes for its own. The workspace (``G`` fp32 tiles) and the
flags (``G`` int32) are cached per device and grown on demand; two streams must not share them.

Configuration (``check_streamk_config``)::

    BLOCK_M, BLOCK_N, BLOCK_K, GROUP_M, num_warps, num_stages
    GRID   1 | 2          programs per SM (default 1)
    LOADS  "auto" | "tma" | "pointer"   as in the tiled template (default "auto": TMA on
           sm_90+ for bf16/fp16 operands TMA can describe)
    ORDER  "rows" | "columns" | "lockstep"   how iterations are dealt out (default "rows",
           as above)
    STACK  1 | 2 | 3 | 4   m-tiles of BLOCK_M rows stacked in one tile (default 1; TMA loads)
    IDLE_SMS  0 | 4   SMs left without a program (default 0)

Columns order. With ``"rows"`` the programs that work the tiles of one tile column run at
different K offsets, so when B is larger than L2 its strip ``[K, BLOCK_N]`` is read from DRAM
once per tile row. ``"columns"`` deals out the iterations of the tile *columns* to groups of
``R`` consecutive programs (``R`` the tile rows; the grid is the most whole groups that fit):
group ``r`` takes range ``r`` and its program ``i`` computes m-tile ``i`` of each column in the
range, so the ``R`` programs load the same B tiles at about the same time and B comes from DRAM
about once. Owners and contributors are as above, within a lane: the owner of m-tile ``i`` of a
column waits for lane ``i`` of the later groups, in group order (still fixed, and still lower
program ids only). With one tile row (``BLOCK_M >= m``) both orders deal out the same ranges.

Lockstep order deals out the same ranges as rows order, but each program walks its segments
last first and the roles swap: the segment that *ends* a tile finishes it, adding the earlier
ranges' partials in range order, and every other segment publishes. A range shorter than a tile
(a tail of one tile, then the head of the next) then reads K upwards, so at any moment all
programs read B rows at about two K offsets, not all over K, as a data-parallel grid that
moves through K together does. Ranges run in program order here (finishers wait for lower
program ids).

Stacked tiles (``STACK`` > 1). A 192-row problem is one tile row of three 64-row m-tiles: each
B tile is loaded once and feeds three dots, with no rows spent on padding (``BLOCK_M`` 256
multiplies a quarter of zeros) and with a third of the L2 reads of B that three programs, one
per m-tile, would make.

``IDLE_SMS`` leaves SMs without a program: on the H100 a 1-CTA-per-SM grid of 128 programs ran
these kernels faster than one of 132 (``docs/benchmarks/gemm_midm_h100_2026-11-27.md``).
"""

from __future__ import annotations

from typing import Any, NamedTuple

import torch
import triton
import triton.language as tl

from kernel_templates.configs import check_keys, check_powers_of_two
from kernel_templates.errors import InvalidConfig, Unsupported
from kernel_templates.gemm.host import (
    cached_buffer,
    cc_major,
    check_operands,
    next_epoch,
    sm_count,
    tma_describe,
)
from kernel_templates.gemm.triton import _store_c, _tile_coords, tma_tiles

__all__ = ["CONFIG_KEYS", "OPTIONAL_KEYS", "ORDERS", "SPIN_LIMIT", "Partition",
           "check_streamk_config", "matmul_streamk", "partition"]

CONFIG_KEYS = ("BLOCK_M", "BLOCK_N", "BLOCK_K", "GROUP_M", "num_warps", "num_stages")
OPTIONAL_KEYS: dict[str, Any] = {"GRID": 1, "LOADS": "auto", "ORDER": "rows", "STACK": 1,
                                 "IDLE_SMS": 0}
GRIDS = (1, 2)
LOADS = ("auto", "tma", "pointer")
ORDERS = ("rows", "columns", "lockstep")
STACKS = (1, 2, 3, 4)
IDLE = (0, 4)
#: Polls of a flag before an owner gives up and writes NaN.
SPIN_LIMIT = 1 << 20
#: Test seam: ranges in program order instead of reversed, and lockstep's the other way round
#: (owners and finishers then wait for programs the interpreter has not run yet, so they give
#: up and write NaN).
REVERSED = True

_WORKSPACE: dict[torch.device, torch.Tensor] = {}
_FLAGS: dict[torch.device, torch.Tensor] = {}
_EPOCH: dict[torch.device, int] = {}


# -- device code --------------------------------------------------------------------------------


@triton.jit
def _range_of(it, Q, E):
    # The range holding iteration ``it``: ranges 0..E-1 hold Q + 1 iterations, the rest Q.
    big = E * (Q + 1)
    return tl.where(it < big, it // (Q + 1), E + (it - big) // Q)


@triton.jit
def _wait_flag(ptr, EPOCH, SPIN: tl.constexpr):
    # True once the flag at ``ptr`` holds this launch's EPOCH; False if it did not within SPIN
    # polls.
    seen = tl.atomic_add(ptr, 0, sem="acquire", scope="gpu")
    spins = 0
    while (seen != EPOCH) & (spins < SPIN):
        seen = tl.atomic_add(ptr, 0, sem="acquire", scope="gpu")
        spins += 1
    tl.debug_barrier()
    return seen == EPOCH


@triton.jit
def _ab_tiles(a, b, off_m, off_n, offs_am, offs_bn, k, K,
              stride_am, stride_ak, stride_bk, stride_bn,
              BLOCK_K: tl.constexpr, TMA: tl.constexpr, A_COL: tl.constexpr,
              B_COL: tl.constexpr, EVEN_K: tl.constexpr):
    # The A tile at (off_m, k) and the B tile at (k, off_n): through TMA descriptors (zeros past
    # the edges) or pointers (rows and columns wrapped by the caller, K masked unless EVEN_K).
    if TMA:
        a_t, b_t = tma_tiles(a, b, off_m, off_n, k, A_COL, B_COL)
    else:
        offs_k = k + tl.arange(0, BLOCK_K)
        a_ptrs = a + offs_am[:, None] * stride_am + offs_k[None, :] * stride_ak
        b_ptrs = b + offs_k[:, None] * stride_bk + offs_bn[None, :] * stride_bn
        if EVEN_K:
            a_t = tl.load(a_ptrs)
            b_t = tl.load(b_ptrs)
        else:
            a_t = tl.load(a_ptrs, mask=offs_k[None, :] < K, other=0.0)
            b_t = tl.load(b_ptrs, mask=offs_k[:, None] < K, other=0.0)
    return a_t, b_t


@triton.jit
def _a_rows(a, off_m, k, A_COL: tl.constexpr):
    # The A tile at (off_m, k) through its TMA descriptor (stacked m-tiles load one each).
    if A_COL:
        return a.load([k, off_m]).T
    return a.load([off_m, k])


@triton.jit
def _add_partial(acc, base, local, TILE: tl.constexpr, IDX: tl.constexpr):
    return acc + tl.load(base + IDX * TILE + local, cache_modifier=".cg")


@triton.jit(do_not_specialize=["EPOCH"])
def _streamk_kernel(
    a, b, c_ptr, ws_ptr, flag_ptr, EPOCH, M, N, K,
    stride_am, stride_ak, stride_bk, stride_bn, stride_cm, stride_cn,
    ITERS_PER_TILE, Q, E, UNITS,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
    GROUP_M: tl.constexpr, COLUMNS: tl.constexpr, LOCKSTEP: tl.constexpr,
    STACK: tl.constexpr, TMA: tl.constexpr, A_COL: tl.constexpr,
    B_COL: tl.constexpr, EVEN_K: tl.constexpr, EVEN_MN: tl.constexpr,
    INPUT_PRECISION: tl.constexpr, SPIN: tl.constexpr, FORWARD: tl.constexpr,
):  # fmt: skip
    # Programs come in groups of UNITS consecutive ids; a group deals out range r of the
    # segments' iterations and its programs ("lanes") work it side by side: rows and lockstep
    # order, one lane (segments are the grouped-order tiles); columns order, one lane per tile
    # row (segments are the tile columns, lane i computes m-tile i of each). A tile is STACK
    # m-tiles of BLOCK_M rows on top of one another that share each B tile (TMA loads only).
    TILE: tl.constexpr = BLOCK_M * BLOCK_N
    SLOT: tl.constexpr = STACK * TILE
    TALL: tl.constexpr = STACK * BLOCK_M
    local = tl.arange(0, BLOCK_M)[:, None] * BLOCK_N + tl.arange(0, BLOCK_N)[None, :]
    if FORWARD:  # lockstep: finishers wait for lower program ids only
        v = tl.program_id(0)
    else:  # rows and columns: owners wait for lower program ids only
        v = tl.num_programs(0) - 1 - tl.program_id(0)
    r = v // UNITS
    lane = v % UNITS
    start = r * Q + tl.minimum(r, E)
    end = start + Q + (r < E).to(tl.int32)
    first_seg = start // ITERS_PER_TILE
    last_seg = (end - 1) // ITERS_PER_TILE
    # the range's segments: one per tile it touches (a for loop, so each segment's K loop is
    # an innermost loop the pipeliner handles as in the tiled kernel). Lockstep walks them
    # last first: a range shorter than a tile then reads K upwards (the next tile's head,
    # then this tile's tail) and at any moment the programs read B rows at about two K
    # offsets, where rows order has them spread over all of K.
    for i in range(0, last_seg - first_seg + 1):
        if LOCKSTEP:
            seg = last_seg - i
        else:
            seg = first_seg + i
        tile_it0 = seg * ITERS_PER_TILE
        k0 = tl.maximum(start - tile_it0, 0)
        k1 = tl.minimum(end - tile_it0, ITERS_PER_TILE)
        if COLUMNS:
            pid_m = lane
            pid_n = seg
        else:
            pid_m, pid_n = _tile_coords(seg, M, N, TALL, BLOCK_N, GROUP_M)
        off_m = pid_m * TALL
        off_n = pid_n * BLOCK_N
        offs_m = off_m + tl.arange(0, BLOCK_M)
        offs_n = off_n + tl.arange(0, BLOCK_N)
        if EVEN_MN:
            offs_am = tl.max_contiguous(tl.multiple_of(offs_m, BLOCK_M), BLOCK_M)
            offs_bn = tl.max_contiguous(tl.multiple_of(offs_n, BLOCK_N), BLOCK_N)
        else:
            # ragged edge: wrap rows and columns instead of masking; wrapped lanes are never
            # stored
            offs_am = offs_m % M
            offs_bn = offs_n % N
        acc0 = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
        if STACK > 1:
            acc1 = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
        if STACK > 2:
            acc2 = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
        if STACK > 3:
            acc3 = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
        for kk in range(k0, k1):
            a_t, b_t = _ab_tiles(a, b, off_m, off_n, offs_am, offs_bn, kk * BLOCK_K, K,
                                 stride_am, stride_ak, stride_bk, stride_bn,
                                 BLOCK_K, TMA, A_COL, B_COL, EVEN_K)
            acc0 = tl.dot(a_t, b_t, acc0, input_precision=INPUT_PRECISION)
            if STACK > 1:
                acc1 = tl.dot(_a_rows(a, off_m + BLOCK_M, kk * BLOCK_K, A_COL), b_t, acc1,
                              input_precision=INPUT_PRECISION)
            if STACK > 2:
                acc2 = tl.dot(_a_rows(a, off_m + 2 * BLOCK_M, kk * BLOCK_K, A_COL), b_t,
                              acc2, input_precision=INPUT_PRECISION)
            if STACK > 3:
                acc3 = tl.dot(_a_rows(a, off_m + 3 * BLOCK_M, kk * BLOCK_K, A_COL), b_t,
                              acc3, input_precision=INPUT_PRECISION)
        # rows and columns: the segment that starts the tile owns it and adds the later
        # ranges' partials; lockstep: the segment that ends it finishes it and adds the
        # earlier ranges'. Either way in range order, so the sum's order is fixed.
        if LOCKSTEP:
            publish = k1 < ITERS_PER_TILE
        else:
            publish = k0 > 0
        if publish:
            # publish the partial in the program's slot
            base = ws_ptr + v * SLOT
            tl.store(base + local, acc0)
            if STACK > 1:
                tl.store(base + TILE + local, acc1)
            if STACK > 2:
                tl.store(base + 2 * TILE + local, acc2)
            if STACK > 3:
                tl.store(base + 3 * TILE + local, acc3)
            tl.debug_barrier()
            tl.atomic_xchg(flag_ptr + v, EPOCH, sem="release", scope="gpu")
        else:
            failed = 0
            if k1 - k0 < ITERS_PER_TILE:
                if LOCKSTEP:
                    lo = _range_of(tile_it0, Q, E)
                    hi = r - 1
                else:
                    lo = r + 1
                    hi = _range_of(tile_it0 + ITERS_PER_TILE - 1, Q, E)
                for q in range(lo, hi + 1):
                    slot = q * UNITS + lane
                    failed += (~_wait_flag(flag_ptr + slot, EPOCH, SPIN)).to(tl.int32)
                    base = ws_ptr + slot * SLOT
                    acc0 = _add_partial(acc0, base, local, TILE, 0)
                    if STACK > 1:
                        acc1 = _add_partial(acc1, base, local, TILE, 1)
                    if STACK > 2:
                        acc2 = _add_partial(acc2, base, local, TILE, 2)
                    if STACK > 3:
                        acc3 = _add_partial(acc3, base, local, TILE, 3)
            ok = failed == 0
            _store_c(c_ptr, tl.where(ok, acc0, float("nan")), offs_m, offs_n, M, N,
                     stride_cm, stride_cn, EVEN_MN)
            if STACK > 1:
                _store_c(c_ptr, tl.where(ok, acc1, float("nan")), offs_m + BLOCK_M, offs_n,
                         M, N, stride_cm, stride_cn, EVEN_MN)
            if STACK > 2:
                _store_c(c_ptr, tl.where(ok, acc2, float("nan")), offs_m + 2 * BLOCK_M,
                         offs_n, M, N, stride_cm, stride_cn, EVEN_MN)
            if STACK > 3:
                _store_c(c_ptr, tl.where(ok, acc3, float("nan")), offs_m + 3 * BLOCK_M,
                         offs_n, M, N, stride_cm, stride_cn, EVEN_MN)


# -- host side ----------------------------------------------------------------------------------


def check_streamk_config(config: dict[str, Any]) -> dict[str, Any]:
    """``config`` normalised (ints; ``GRID``, ``LOADS`` and ``ORDER`` filled in), or
    ``InvalidConfig``."""
    check_keys(config, CONFIG_KEYS, OPTIONAL_KEYS)
    cfg: dict[str, Any] = {k: int(config[k]) for k in CONFIG_KEYS}
    check_powers_of_two(cfg, ("BLOCK_M", "BLOCK_N", "BLOCK_K", "num_warps"))
    if min(cfg["BLOCK_M"], cfg["BLOCK_N"], cfg["BLOCK_K"]) < 16:
        raise InvalidConfig("tl.dot needs BLOCK_M, BLOCK_N and BLOCK_K of at least 16")
    if cfg["GROUP_M"] < 1 or cfg["num_stages"] < 1:
        raise InvalidConfig("GROUP_M and num_stages must be positive")
    grid = config.get("GRID", OPTIONAL_KEYS["GRID"])
    if grid not in GRIDS:
        raise InvalidConfig(f"GRID must be one of {list(GRIDS)}, got {grid!r}")
    loads = config.get("LOADS", OPTIONAL_KEYS["LOADS"])
    if loads not in LOADS:
        raise InvalidConfig(f"LOADS must be one of {list(LOADS)}, got {loads!r}")
    order = config.get("ORDER", OPTIONAL_KEYS["ORDER"])
    if order not in ORDERS:
        raise InvalidConfig(f"ORDER must be one of {list(ORDERS)}, got {order!r}")
    stack = config.get("STACK", OPTIONAL_KEYS["STACK"])
    if stack not in STACKS:
        raise InvalidConfig(f"STACK must be one of {list(STACKS)}, got {stack!r}")
    if stack > 1 and loads == "pointer":
        raise InvalidConfig("STACK > 1 needs TMA loads (LOADS 'auto' or 'tma'), got "
                            "LOADS='pointer'")
    idle = config.get("IDLE_SMS", OPTIONAL_KEYS["IDLE_SMS"])
    if idle not in IDLE:
        raise InvalidConfig(f"IDLE_SMS must be one of {list(IDLE)}, got {idle!r}")
    return {**cfg, "GRID": int(grid), "LOADS": loads, "ORDER": order, "STACK": int(stack),
            "IDLE_SMS": int(idle)}


class Partition(NamedTuple):
    """How a launch deals out the iterations: ``programs`` (``G``) in groups of ``units``
    consecutive programs; group ``r`` takes a contiguous range of the segments' iterations
    (``E`` ranges of ``Q + 1``, the rest of ``Q``), each of its programs on its own tile row
    of those segments (``ORDER="columns"``: segments are tile columns, ``units`` the tile
    rows) or alone (``"rows"``: segments are the tiles in grouped order, ``units`` 1)."""

    programs: int
    q: int
    e: int
    per_tile: int
    units: int


def partition(m: int, n: int, k: int, config: dict[str, Any], programs: int) -> Partition:
    """The partition of an ``m x n x k`` product under ``config`` on about ``programs``
    programs: never more groups than iterations; in columns order the most whole groups that
    fit (at least one, so a problem with more tile rows than ``programs`` still launches one
    group)."""
    per_tile = triton.cdiv(k, config["BLOCK_K"])
    tall = config["BLOCK_M"] * config.get("STACK", 1)
    rows, cols = triton.cdiv(m, tall), triton.cdiv(n, config["BLOCK_N"])
    columns = config.get("ORDER", OPTIONAL_KEYS["ORDER"]) == "columns"
    units, segments = (rows, cols) if columns else (1, rows * cols)
    total = segments * per_tile
    groups = max(1, min(programs // units, total))
    q, e = divmod(total, groups)
    return Partition(groups * units, q, e, per_tile, units)


def _descriptors(a: torch.Tensor, b: torch.Tensor, cfg: dict[str, Any]):
    """(a_desc, b_desc, A_COL, B_COL) when TMA loads apply, else ``None``."""
    loads = cfg["LOADS"]
    if loads == "pointer" or a.dtype not in (torch.bfloat16, torch.float16):
        return None
    if loads == "auto" and (a.device.type != "cuda" or cc_major(a.device) < 9):
        return None
    if a.device.type == "cuda" and cc_major(a.device) < 9:
        return None
    m, k = a.shape
    n = b.shape[1]
    da = tma_describe(a, m, k, (cfg["BLOCK_M"], cfg["BLOCK_K"]))
    db = tma_describe(b, k, n, (cfg["BLOCK_K"], cfg["BLOCK_N"]))
    if da is None or db is None:
        return None
    return da[0], db[0], da[1], db[1]



def matmul_streamk(a: torch.Tensor, b: torch.Tensor, config: dict[str, Any],
                   out: torch.Tensor | None = None, programs: int | None = None
                   ) -> torch.Tensor:
    """``a @ b`` for 2-D ``a[M, K]``, ``b[K, N]`` (any strides; bf16, fp16 or fp32) with the
    stream-K kernel under ``config``, into ``out`` (contiguous ``[M, N]``) or a new tensor of
    the input dtype. ``programs`` overrides the grid (default: (SMs - ``IDLE_SMS``) x
    ``GRID``; tests)."""
    cfg = check_streamk_config(config)
    if a.dim() != 2 or b.dim() != 2:
        raise Unsupported("the stream-K kernel serves 2-D operands (batch 1)")
    _, _, _, out = check_operands(a, b, out, None, "stream-K gemm")
    m, k = a.shape
    n = b.shape[1]
    if m == 0 or n == 0:
        return out
    if k == 0:
        return out.zero_()
    bm, bn, bk, stack = cfg["BLOCK_M"], cfg["BLOCK_N"], cfg["BLOCK_K"], cfg["STACK"]
    descs = _descriptors(a, b, cfg)
    if cfg["LOADS"] == "tma" and descs is None:
        raise Unsupported("LOADS='tma', but these operands cannot be described for TMA")
    if stack > 1 and descs is None:
        raise Unsupported(f"STACK={stack} needs TMA loads: bf16/fp16 operands TMA can "
                          "describe, on sm_90+ (or LOADS='tma' in the interpreter)")
    grid = programs or max(1, sm_count(a.device) - cfg["IDLE_SMS"]) * cfg["GRID"]
    g, q, e, per_tile, units = partition(m, n, k, cfg, grid)
    ws = cached_buffer(_WORKSPACE, a.device, g * stack * bm * bn, torch.float32,
                       zeroed=False, least=1 << 20)
    flags = cached_buffer(_FLAGS, a.device, g, torch.int32, zeroed=True, least=1024)
    epoch = next_epoch(_EPOCH, _FLAGS, a.device)
    precision = "ieee" if a.dtype == torch.float32 else "tf32"
    lockstep = cfg["ORDER"] == "lockstep"
    common = dict(BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk, GROUP_M=cfg["GROUP_M"],
                  COLUMNS=cfg["ORDER"] == "columns", LOCKSTEP=lockstep, STACK=stack,
                  EVEN_K=k % bk == 0, EVEN_MN=m % (bm * stack) == 0 and n % bn == 0,
                  INPUT_PRECISION=precision, SPIN=SPIN_LIMIT, FORWARD=lockstep == REVERSED,
                  num_warps=cfg["num_warps"], num_stages=cfg["num_stages"])
    if descs is not None:
        _streamk_kernel[(g,)](
            descs[0], descs[1], out, ws, flags, epoch, m, n, k, 0, 0, 0, 0,
            out.stride(0), out.stride(1), per_tile, q, e, units,
            TMA=True, A_COL=descs[2], B_COL=descs[3], **common)
    else:
        _streamk_kernel[(g,)](
            a, b, out, ws, flags, epoch, m, n, k, a.stride(0), a.stride(1), b.stride(0),
            b.stride(1),
            out.stride(0), out.stride(1), per_tile, q, e, units,
            TMA=False, A_COL=False, B_COL=False, **common)
    return out
