"""Tiled Triton GEMM with grouped tile order and deterministic split-K.

``C[b] = A[b] @ B[b]`` in the style of the Triton matmul tutorial: one program computes a
``BLOCK_M x BLOCK_N`` tile of C, walking K in steps of ``BLOCK_K`` with an fp32 accumulator.
Programs are ordered in groups of ``GROUP_M`` tile rows so that neighbouring programs share
tiles of B in L2. A and B may be row- or column-major (any strides); batch is grid axis 2.

Split-K (``SPLIT_K > 1``): grid axis 1 cuts K into ``SPLIT_K`` slices and each program writes
its fp32 partial tile to a workspace. Two ways to sum them (``SPLITK_MODE``; by default serial
up to ``search.kinds.gemm.triton_space.SERIAL_MAX_SPLIT`` slices, two launches beyond):

- ``"serial"`` (one launch): after storing its partial, a program bumps a per-tile counter
  (``atomic_add``, acq_rel, gpu scope, after a CTA barrier so every thread's stores are
  released); the program that arrives last sums the slices in a fixed order, casts, stores C and
  resets the counter to zero. With many slices the sum is two-level: groups of ``FANIN``
  slices (a config key; by default ``triton_gemm.fanin``) are summed by the last arrival of
  each group, then the group sums by the last group, so no single program reads all
  ``SPLIT_K`` partials.
- ``"two_launch"``: the partials go to ``[SPLIT_K, batch*M*N]`` and a second small kernel sums
  the slices in a fixed order.

Either way the summation order is fixed by the configuration (never by arrival order), so
results are bitwise reproducible for a given configuration. The workspace and the counters are
cached per device and grown on demand (the counters zeroed once: every launch leaves them at
zero), so a launch on a warm cache allocates nothing; two concurrent streams must not share
them.

Configuration keys (``search.kinds.gemm.triton_space.PARAMS``)::

    BLOCK_M, BLOCK_N, BLOCK_K, GROUP_M, SPLIT_K, num_warps, num_stages

and optional ones (``OPTIONAL_KEYS``); ``check_config`` fills each absent one with its default
(``search.kinds.gemm.triton_space.complete``, whose configurations always carry them all), so a
configuration fixes the kernel, whatever the process:

- ``SPLITK_MODE`` (``"serial"``, ``"two_launch"``) and ``FANIN`` (a power of two dividing
  ``SPLIT_K``, 1 unless the reduction is serial): the split-K reduction above.
- ``LOADS`` (``"auto"``, ``"tma"``, ``"pointer"``): tiles through Hopper's TMA engine or through
  pointers; ``"auto"`` (the default) takes TMA wherever it applies: a CUDA device of compute
  capability 9 or more, bf16/fp16, batch 1, 16-byte aligned operands. ``"tma"`` where the
  operands cannot be described is ``Unsupported``; the interpreter runs ``"tma"`` too.

- ``PERSISTENT`` (0/1): the persistent kernel (``_gemm_persistent_kernel``): a grid of
  ``min(#SMs // num_ctas, tiles)`` programs, each looping over output tiles in the grouped order,
  loading through TMA descriptors. Hopper (or the interpreter), batch 1, 16-byte aligned
  operands, bf16/fp16/fp32; ``SPLIT_K`` must be 1.
- ``WARP_SPECIALIZE`` (0/1): ``tl.range(..., warp_specialize=True)`` on the K loop; only with
  TMA loads (``PERSISTENT=1``, or the TMA kernel that Hopper takes automatically). With Triton
  3.6 on an H100 the compiled kernel is unchanged (no warp-specialize op, same shared memory,
  same time): Triton's automatic warp specialisation targets Blackwell.
- ``num_ctas`` (1/2): Triton's cluster launch option (Hopper only), ``SPLIT_K`` must be 1. Not
  with a column-major A through TMA (wrong results with Triton 3.6): refused where TMA is
  required, the pointer kernel where TMA was only automatic. Measured ~30% slower on an H100.
- ``INPUT_PRECISION`` (``"ieee"``, ``"tf32"``, ``"tf32x3"``): ``tl.dot``'s input precision for
  fp32 inputs (default ``"ieee"``: full fp32); bf16/fp16 inputs accept only ``"ieee"``. tf32
  results need a wider tolerance: ``kernel_templates.gemm.reference.tolerance_for``.
- ``FLATTEN`` (0/1, default 1), ``TMA_STORE`` (0/1, default 0), ``WS_LOOP`` (``"k"``, the
  default, or ``"tiles"``): the persistent kernel fuses its tile loop with the K loop into one
  pipeline, stores C through a TMA descriptor where C's rows are 16-byte aligned, and marks the
  K loop or the tile loop (as Triton's persistent-matmul tutorial does) for warp
  specialisation. They change nothing without ``PERSISTENT=1``.
"""

from __future__ import annotations

from typing import Any

import torch
import triton
import triton.language as tl

from kernel_templates.errors import InvalidConfig, Unsupported
from kernel_templates.gemm.host import (
    DTYPES,
    cached_buffer,
    cc_major,
    check_operands,
    sm_count,
    tma_describe,
)
from kernel_templates.gemm.triton_config import (
    CONFIG_KEYS,
    INPUT_PRECISIONS,
    LOADS,
    OPTIONAL_KEYS,
    check_config,
)
from search.kinds.gemm.cluster import cluster_refusal

__all__ = ["CONFIG_KEYS", "DTYPES", "INPUT_PRECISIONS", "LOADS", "OPTIONAL_KEYS", "bytes_moved",
           "check_config", "flops", "matmul", "tma_tiles"]


@triton.jit
def _tile_coords(pid, M, N, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                 GROUP_M: tl.constexpr):
    """Grouped ordering: GROUP_M tile rows are swept column by column, so the B tiles a group
    reads stay hot in L2 while its programs run."""
    num_pid_m = tl.cdiv(M, BLOCK_M)
    num_pid_n = tl.cdiv(N, BLOCK_N)
    num_pid_in_group = GROUP_M * num_pid_n
    group_id = pid // num_pid_in_group
    first_pid_m = group_id * GROUP_M
    group_size_m = min(num_pid_m - first_pid_m, GROUP_M)
    pid_m = first_pid_m + ((pid % num_pid_in_group) % group_size_m)
    pid_n = (pid % num_pid_in_group) // group_size_m
    return pid_m, pid_n


@triton.jit
def _store_c(c_ptr, total, offs_m, offs_n, M, N, stride_cm, stride_cn, EVEN_MN: tl.constexpr):
    c_ptrs = c_ptr + offs_m[:, None] * stride_cm + offs_n[None, :] * stride_cn
    if EVEN_MN:
        tl.store(c_ptrs, total.to(c_ptr.dtype.element_ty))
    else:
        mask = (offs_m[:, None] < M) & (offs_n[None, :] < N)
        tl.store(c_ptrs, total.to(c_ptr.dtype.element_ty), mask=mask)


@triton.jit
def _serial_splitk(
    acc, ws_ptr, cnt_ptr, c_ptr, tile, pid_k, NUM_TILES, offs_m, offs_n, M, N,
    stride_cm, stride_cn,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, SPLIT_K: tl.constexpr, FANIN: tl.constexpr,
    EVEN_MN: tl.constexpr,
):  # fmt: skip
    # One-launch split-K epilogue. Workspace: [NUM_TILES, SPLIT_K] whole tiles of partials (so
    # no masks: rows/columns past the edge hold values that are never stored to C), then
    # [NUM_TILES, GROUPS] tiles of group sums. Counters: GROUPS + 1 int32 per tile, zero on
    # entry and left at zero by the program that consumes them.
    #
    # Memory order: all threads store, bar.sync, then one thread's acq_rel gpu-scope atomic
    # releases the whole CTA's stores (cumulativity through the barrier). The atomic's result
    # comes back to every thread through shared memory after a barrier; the last arrival's
    # acquire plus another bar.sync orders the other threads' loads after it, and the loads go
    # to L2 (.cg), never to a possibly stale L1 line.
    TILE: tl.constexpr = BLOCK_M * BLOCK_N
    GROUPS: tl.constexpr = SPLIT_K // FANIN
    local = tl.arange(0, BLOCK_M)[:, None] * BLOCK_N + tl.arange(0, BLOCK_N)[None, :]
    tile64 = tile.to(tl.int64)
    tl.store(ws_ptr + (tile64 * SPLIT_K + pid_k) * TILE + local, acc)
    tl.debug_barrier()
    grp = pid_k // FANIN
    cnt1 = cnt_ptr + tile * (GROUPS + 1) + grp
    seen = tl.atomic_add(cnt1, 1, sem="acq_rel", scope="gpu")
    if seen == FANIN - 1:
        tl.debug_barrier()
        part_ptrs = ws_ptr + (tile64 * SPLIT_K + grp * FANIN) * TILE + local
        total = tl.load(part_ptrs, cache_modifier=".cg")
        for s in tl.static_range(1, FANIN):
            total += tl.load(part_ptrs + s * TILE, cache_modifier=".cg")
        tl.store(cnt1, 0)  # every member has counted: reset for the next launch
        if GROUPS == 1:
            _store_c(c_ptr, total, offs_m, offs_n, M, N, stride_cm, stride_cn, EVEN_MN)
        else:
            grp_base = ws_ptr + NUM_TILES.to(tl.int64) * SPLIT_K * TILE
            tl.store(grp_base + (tile64 * GROUPS + grp) * TILE + local, total)
            tl.debug_barrier()
            cnt2 = cnt_ptr + tile * (GROUPS + 1) + GROUPS
            seen2 = tl.atomic_add(cnt2, 1, sem="acq_rel", scope="gpu")
            if seen2 == GROUPS - 1:
                tl.debug_barrier()
                grp_ptrs = grp_base + tile64 * GROUPS * TILE + local
                total = tl.load(grp_ptrs, cache_modifier=".cg")
                for g in tl.static_range(1, GROUPS):
                    total += tl.load(grp_ptrs + g * TILE, cache_modifier=".cg")
                tl.store(cnt2, 0)
                _store_c(c_ptr, total, offs_m, offs_n, M, N, stride_cm, stride_cn, EVEN_MN)


@triton.jit
def _epilogue(
    acc, c_ptr, ws_ptr, cnt_ptr, pid, pid_k, pid_b, offs_m, offs_n, M, N, stride_cm, stride_cn,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, SPLIT_K: tl.constexpr, SERIAL: tl.constexpr,
    FANIN: tl.constexpr, EVEN_MN: tl.constexpr,
):  # fmt: skip
    # Where a program's tile goes, shared by the pointer and the TMA kernels. ``c_ptr`` is
    # already offset to this program's batch; grid axis 2 is the batch.
    if SPLIT_K == 1:
        _store_c(c_ptr, acc, offs_m, offs_n, M, N, stride_cm, stride_cn, EVEN_MN)
    elif SERIAL:
        tile = pid_b * tl.num_programs(0) + pid
        _serial_splitk(acc, ws_ptr, cnt_ptr, c_ptr, tile, pid_k,
                       tl.num_programs(0) * tl.num_programs(2), offs_m, offs_n, M, N,
                       stride_cm, stride_cn, BLOCK_M, BLOCK_N, SPLIT_K, FANIN, EVEN_MN)
    else:
        # Workspace [SPLIT_K, batch, M, N], contiguous fp32, summed by _splitk_reduce_kernel.
        slab = (pid_k.to(tl.int64) * tl.num_programs(2) + pid_b) * M * N
        ws_ptrs = ws_ptr + slab + offs_m[:, None] * N + offs_n[None, :]
        if EVEN_MN:
            tl.store(ws_ptrs, acc)
        else:
            tl.store(ws_ptrs, acc, mask=(offs_m[:, None] < M) & (offs_n[None, :] < N))


@triton.jit
def _gemm_kernel(
    a_ptr, b_ptr, c_ptr, ws_ptr, cnt_ptr,
    M, N, K, K_PER_SPLIT,
    stride_ab, stride_am, stride_ak,
    stride_bb, stride_bk, stride_bn,
    stride_cb, stride_cm, stride_cn,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
    GROUP_M: tl.constexpr, SPLIT_K: tl.constexpr,
    EVEN_K: tl.constexpr, EVEN_MN: tl.constexpr, INPUT_PRECISION: tl.constexpr,
    SERIAL: tl.constexpr, FANIN: tl.constexpr,
):  # fmt: skip
    pid = tl.program_id(0)
    pid_k = tl.program_id(1)
    pid_b = tl.program_id(2).to(tl.int64)
    pid_m, pid_n = _tile_coords(pid, M, N, BLOCK_M, BLOCK_N, GROUP_M)

    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    if EVEN_MN:
        # Whole tiles: the hints are true, so column-major operands get 16-byte loads too.
        offs_am = tl.max_contiguous(tl.multiple_of(offs_m, BLOCK_M), BLOCK_M)
        offs_bn = tl.max_contiguous(tl.multiple_of(offs_n, BLOCK_N), BLOCK_N)
    else:
        # Ragged edge: wrap rows/columns instead of masking the loads; the wrapped lanes are
        # masked at the store.
        offs_am = offs_m % M
        offs_bn = offs_n % N
    k_start = pid_k * K_PER_SPLIT
    if EVEN_K:
        k_start = tl.multiple_of(k_start, BLOCK_K)
    offs_k = k_start + tl.arange(0, BLOCK_K)
    a_ptrs = (a_ptr + pid_b * stride_ab
              + offs_am[:, None] * stride_am + offs_k[None, :] * stride_ak)
    b_ptrs = (b_ptr + pid_b * stride_bb
              + offs_k[:, None] * stride_bk + offs_bn[None, :] * stride_bn)

    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    # K_PER_SPLIT is a multiple of BLOCK_K, so a slice never reads into its neighbour; only the
    # global end of K needs a mask, and none at all when every slice is whole (EVEN_K).
    for kk in range(0, tl.cdiv(K_PER_SPLIT, BLOCK_K)):
        if EVEN_K:
            a = tl.load(a_ptrs)
            b = tl.load(b_ptrs)
        else:
            k_left = K - k_start - kk * BLOCK_K
            a = tl.load(a_ptrs, mask=tl.arange(0, BLOCK_K)[None, :] < k_left, other=0.0)
            b = tl.load(b_ptrs, mask=tl.arange(0, BLOCK_K)[:, None] < k_left, other=0.0)
        acc = tl.dot(a, b, acc, input_precision=INPUT_PRECISION)
        a_ptrs += BLOCK_K * stride_ak
        b_ptrs += BLOCK_K * stride_bk

    _epilogue(acc, c_ptr + pid_b * stride_cb, ws_ptr, cnt_ptr, pid, pid_k, pid_b,
              offs_m, offs_n, M, N, stride_cm, stride_cn,
              BLOCK_M, BLOCK_N, SPLIT_K, SERIAL, FANIN, EVEN_MN)


@triton.jit
def tma_tiles(a_desc, b_desc, off_m, off_n, k, A_COL: tl.constexpr, B_COL: tl.constexpr):
    """The A tile at (off_m, k) and the B tile at (k, off_n) through TMA descriptors; a
    column-major operand is described in its storage order and transposed in shared memory.
    Shared by every TMA K loop (here and ``skinny``)."""
    if A_COL:
        a = a_desc.load([k, off_m]).T
    else:
        a = a_desc.load([off_m, k])
    if B_COL:
        b = b_desc.load([off_n, k]).T
    else:
        b = b_desc.load([k, off_n])
    return a, b


@triton.jit
def _gemm_tma_kernel(
    a_desc, b_desc, c_ptr, ws_ptr, cnt_ptr,
    M, N, K, K_PER_SPLIT, stride_cm, stride_cn,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
    GROUP_M: tl.constexpr, SPLIT_K: tl.constexpr,
    A_COL: tl.constexpr, B_COL: tl.constexpr, EVEN_MN: tl.constexpr,
    SERIAL: tl.constexpr, FANIN: tl.constexpr, WARP_SPECIALIZE: tl.constexpr = False,
):  # fmt: skip
    # Same tiling as _gemm_kernel, but tiles arrive through the TMA engine (Hopper): no address
    # arithmetic, no masks (out-of-bounds reads are zero-filled), asynchronous copies that the
    # pipeliner keeps num_stages deep. Column-major operands are described in their storage
    # order and transposed in shared memory.
    pid = tl.program_id(0)
    pid_k = tl.program_id(1)
    pid_m, pid_n = _tile_coords(pid, M, N, BLOCK_M, BLOCK_N, GROUP_M)
    off_m = pid_m * BLOCK_M
    off_n = pid_n * BLOCK_N
    k_start = pid_k * K_PER_SPLIT

    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for kk in tl.range(0, tl.cdiv(K_PER_SPLIT, BLOCK_K), warp_specialize=WARP_SPECIALIZE):
        a, b = tma_tiles(a_desc, b_desc, off_m, off_n, k_start + kk * BLOCK_K, A_COL, B_COL)
        acc = tl.dot(a, b, acc)

    offs_m = off_m + tl.arange(0, BLOCK_M)
    offs_n = off_n + tl.arange(0, BLOCK_N)
    _epilogue(acc, c_ptr, ws_ptr, cnt_ptr, pid, pid_k, 0, offs_m, offs_n, M, N,
              stride_cm, stride_cn, BLOCK_M, BLOCK_N, SPLIT_K, SERIAL, FANIN, EVEN_MN)


@triton.jit
def _gemm_persistent_kernel(
    a_desc, b_desc, c_ptr, c_desc, M, N, K, stride_cm, stride_cn,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
    GROUP_M: tl.constexpr, A_COL: tl.constexpr, B_COL: tl.constexpr, EVEN_MN: tl.constexpr,
    INPUT_PRECISION: tl.constexpr, WS_TILES: tl.constexpr, WS_K: tl.constexpr,
    FLATTEN: tl.constexpr, TMA_STORE: tl.constexpr,
):  # fmt: skip
    # Persistent: the grid is at most one program per SM (cluster) and each program walks the
    # output tiles tile0, tile0 + programs, ... in the grouped order of _tile_coords, so
    # neighbouring programs still share B tiles in L2 and no program waits for a launch slot.
    # Loads go through TMA descriptors (out-of-bounds rows, columns and K are zero-filled, so
    # ragged shapes need no masks); only the store of C is masked on ragged edges. With FLATTEN
    # the compiler fuses the tile loop with the K loop into one software pipeline, so the next
    # tile's first loads are in flight while this tile's epilogue runs.
    start = tl.program_id(0)
    num_tiles = tl.cdiv(M, BLOCK_M) * tl.cdiv(N, BLOCK_N)
    k_tiles = tl.cdiv(K, BLOCK_K)
    for tile in tl.range(start, num_tiles, tl.num_programs(0), flatten=FLATTEN,
                         warp_specialize=WS_TILES):
        pid_m, pid_n = _tile_coords(tile, M, N, BLOCK_M, BLOCK_N, GROUP_M)
        off_m = pid_m * BLOCK_M
        off_n = pid_n * BLOCK_N
        acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
        for kk in tl.range(0, k_tiles, warp_specialize=WS_K):
            a, b = tma_tiles(a_desc, b_desc, off_m, off_n, kk * BLOCK_K, A_COL, B_COL)
            acc = tl.dot(a, b, acc, input_precision=INPUT_PRECISION)
        if TMA_STORE:
            # The TMA engine clips the tile at C's edges: no mask.
            c_desc.store([off_m, off_n], acc.to(c_desc.dtype))
        else:
            offs_m = off_m + tl.arange(0, BLOCK_M)
            offs_n = off_n + tl.arange(0, BLOCK_N)
            _store_c(c_ptr, acc, offs_m, offs_n, M, N, stride_cm, stride_cn, EVEN_MN)


@triton.jit
def _splitk_reduce_kernel(
    ws_ptr, c_ptr, NUMEL,
    SPLIT_K: tl.constexpr, CHUNK: tl.constexpr, BLOCK: tl.constexpr,
):  # fmt: skip
    # Each program owns BLOCK outputs and loads CHUNK slices of them at once (a [CHUNK, BLOCK]
    # tile), so many loads are in flight even when the output is small and SPLIT_K large.
    pid = tl.program_id(0)
    offs = pid.to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    offs = tl.max_contiguous(tl.multiple_of(offs, BLOCK), BLOCK)
    mask = offs < NUMEL
    rows = tl.arange(0, CHUNK)
    acc = tl.zeros((BLOCK,), dtype=tl.float32)
    for s in tl.static_range(0, SPLIT_K, CHUNK):
        ptrs = ws_ptr + (s + rows)[:, None].to(tl.int64) * NUMEL + offs[None, :]
        part = tl.load(ptrs, mask=mask[None, :], other=0.0)
        acc += tl.sum(part, axis=0)
    tl.store(c_ptr + offs, acc.to(c_ptr.dtype.element_ty), mask=mask)


# -- launcher -------------------------------------------------------------------------------------

_WORKSPACE: dict[torch.device, torch.Tensor] = {}
_COUNTERS: dict[torch.device, torch.Tensor] = {}


def _tma_descriptors(a3: torch.Tensor, b3: torch.Tensor, cfg: dict[str, int], auto: bool):
    """(a_desc, b_desc, A_COL, B_COL) when TMA applies to these operands, else ``None``.
    Automatic use needs a Hopper-or-later GPU; asked for explicitly, the interpreter runs it."""
    if a3.shape[0] != 1 or a3.dtype not in (torch.bfloat16, torch.float16):
        return None
    if (a3.device.type == "cuda" or auto) and cc_major(a3.device) < 9:
        return None
    _, m, k = a3.shape
    n = b3.shape[2]
    da = tma_describe(a3[0], m, k, (cfg["BLOCK_M"], cfg["BLOCK_K"]))
    db = tma_describe(b3[0], k, n, (cfg["BLOCK_K"], cfg["BLOCK_N"]))
    if da is None or db is None:
        return None
    return da[0], db[0], da[1], db[1]


def _workspace(device: torch.device, numel: int) -> torch.Tensor:
    """An fp32 buffer of at least ``numel`` elements on ``device``, reused across calls."""
    return cached_buffer(_WORKSPACE, device, numel, torch.float32, zeroed=False, least=1 << 20)


def _counters(device: torch.device, numel: int) -> torch.Tensor:
    """A zeroed int32 buffer of at least ``numel`` counters on ``device``, reused across calls:
    every serial split-K launch leaves the counters it used at zero."""
    return cached_buffer(_COUNTERS, device, numel, torch.int32, zeroed=True, least=1 << 16)


def _reduce_launch(numel: int, split_k: int, device: torch.device) -> tuple[int, int, int]:
    """(BLOCK, CHUNK, num_warps) of the reduce: about two programs per SM or more, each with up
    to 8K fp32 values in flight."""
    block = 1024
    while block > 64 and triton.cdiv(numel, block) < 2 * sm_count(device):
        block //= 2
    chunk = min(split_k, max(1, 8192 // block))
    return block, chunk, 4


def _input_precision(cfg: dict[str, Any], dtype: torch.dtype) -> str:
    """``tl.dot``'s input_precision: ``INPUT_PRECISION`` for fp32; for 16-bit inputs only
    ``"ieee"`` is valid and the kernels get what they always got (the value does not matter to
    a 16-bit dot)."""
    asked = cfg["INPUT_PRECISION"]
    if dtype == torch.float32:
        return asked
    if asked != "ieee":
        raise InvalidConfig(f"INPUT_PRECISION={asked!r} applies to fp32 inputs only; {dtype} "
                            "inputs take 'ieee'")
    return "tf32"


def _check_device(cfg: dict[str, Any], device: torch.device) -> None:
    """Hopper-only keys on an older CUDA GPU: ``Unsupported``. The interpreter runs them (it
    ignores ``num_ctas`` and ``warp_specialize``, which change scheduling, not results)."""
    asked = [name for name, on in (("PERSISTENT=1", cfg["PERSISTENT"]),
                                   ("WARP_SPECIALIZE=1", cfg["WARP_SPECIALIZE"]),
                                   ("num_ctas=2", cfg["num_ctas"] > 1)) if on]
    if asked and device.type == "cuda" and cc_major(device) < 9:
        raise Unsupported(f"{', '.join(asked)} needs a Hopper or later GPU (compute capability "
                          f"9+), this one is {cc_major(device)}.x")


def _check_clusters(launch: dict[str, int], a_col: bool) -> None:
    """The cluster rule (``search.kinds.gemm.cluster``): num_ctas=2 with a column-major A
    loaded through TMA computed wrong results on an H100 with Triton 3.6, in the TMA and the
    persistent kernel alike. Refused until a Triton fixes it (``tests/gpu/test_clusters.py``
    says when)."""
    why = cluster_refusal(launch.get("num_ctas", 1), a_col)
    if why is not None:
        raise Unsupported(why)


def _matmul_persistent(a3: torch.Tensor, b3: torch.Tensor, c3: torch.Tensor,
                       cfg: dict[str, Any], precision: str, warp_spec: bool,
                       launch: dict[str, int]) -> None:
    """Launch ``_gemm_persistent_kernel`` (``PERSISTENT=1``) into ``c3``."""
    if cfg["LOADS"] == "pointer":
        raise Unsupported("PERSISTENT=1 loads through TMA, but pointer loads were asked for "
                          "(LOADS='pointer')")
    batch, m, k = a3.shape
    n = b3.shape[2]
    if batch != 1:
        raise Unsupported(f"PERSISTENT=1 serves batch 1 only, got batch {batch}")
    bm, bn, bk = cfg["BLOCK_M"], cfg["BLOCK_N"], cfg["BLOCK_K"]
    da = tma_describe(a3[0], m, k, (bm, bk))
    db = tma_describe(b3[0], k, n, (bk, bn))
    if da is None or db is None:
        raise Unsupported("PERSISTENT=1 loads through TMA: each operand needs a 16-byte aligned "
                          "base, unit stride along rows or columns and a 16-byte aligned "
                          "leading dimension")
    _check_clusters(launch, da[1])
    dc = tma_describe(c3[0], m, n, (bm, bn)) if cfg["TMA_STORE"] else None
    tiles = triton.cdiv(m, bm) * triton.cdiv(n, bn)
    programs = max(1, min(sm_count(a3.device) // launch.get("num_ctas", 1), tiles))
    _gemm_persistent_kernel[(programs,)](
        da[0], db[0], c3, dc[0] if dc is not None else None, m, n, k, c3.stride(1), c3.stride(2),
        BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk, GROUP_M=cfg["GROUP_M"], A_COL=da[1], B_COL=db[1],
        EVEN_MN=m % bm == 0 and n % bn == 0, INPUT_PRECISION=precision,
        WS_TILES=warp_spec and cfg["WS_LOOP"] == "tiles",
        WS_K=warp_spec and cfg["WS_LOOP"] != "tiles",
        FLATTEN=bool(cfg["FLATTEN"]), TMA_STORE=dc is not None,
        **launch,
    )  # fmt: skip


def matmul(a: torch.Tensor, b: torch.Tensor, config: dict[str, Any],
           out: torch.Tensor | None = None,
           out_dtype: torch.dtype | None = None) -> torch.Tensor:
    """``a @ b`` with the tiled kernel under ``config``.

    ``a`` is ``[M, K]`` or ``[batch, M, K]``, ``b`` ``[K, N]`` or ``[batch, K, N]``, any strides
    (row- or column-major); both of one dtype among bf16, fp16, fp32, on one device. The output
    is ``out`` when given (contiguous, the right shape) or a new tensor of ``out_dtype``
    (default: the input dtype). fp32 inputs are multiplied in full fp32 (``ieee``), not tf32,
    unless ``INPUT_PRECISION`` says otherwise. ``LOADS`` picks TMA or pointer loads.
    """
    cfg = check_config(config)
    a3, b3, c3, out = check_operands(a, b, out, out_dtype, "triton gemm")
    batch, m, k = a3.shape
    n = b3.shape[2]

    precision = _input_precision(cfg, a.dtype)
    warp_spec = bool(cfg["WARP_SPECIALIZE"])
    launch = {"num_warps": cfg["num_warps"], "num_stages": cfg["num_stages"]}
    if cfg["num_ctas"] > 1:  # 1: no cluster option, the launch is exactly as before
        launch["num_ctas"] = cfg["num_ctas"]
    _check_device(cfg, a.device)
    if cfg["PERSISTENT"]:
        _matmul_persistent(a3, b3, c3, cfg, precision, warp_spec, launch)
        return out

    bm, bn, bk, split_k = cfg["BLOCK_M"], cfg["BLOCK_N"], cfg["BLOCK_K"], cfg["SPLIT_K"]
    k_per_split = triton.cdiv(triton.cdiv(k, split_k), bk) * bk
    even_k = k % (bk * split_k) == 0
    even_mn = m % bm == 0 and n % bn == 0
    tiles = triton.cdiv(m, bm) * triton.cdiv(n, bn)
    grid = (tiles, split_k, batch)
    serial = split_k > 1 and cfg["SPLITK_MODE"] == "serial"
    fanin = cfg["FANIN"] if serial else 1
    if serial:
        groups = split_k // fanin
        extra = groups if groups > 1 else 0
        ws = _workspace(a.device, batch * tiles * (split_k + extra) * bm * bn)
        cnt = _counters(a.device, batch * tiles * (groups + 1))
    elif split_k > 1:
        ws = _workspace(a.device, split_k * batch * m * n)
        cnt = ws
    else:
        ws = cnt = c3
    loads = cfg["LOADS"]
    descs = (_tma_descriptors(a3, b3, cfg, auto=loads == "auto") if loads != "pointer"
             else None)
    if descs is not None and loads == "auto" and launch.get("num_ctas", 1) > 1 and descs[2]:
        descs = None  # automatic: the pointer kernel, as TMA clusters fail here (_check_clusters)
    if loads == "tma" and descs is None:
        raise Unsupported("LOADS='tma', but these operands cannot be described for TMA")
    if warp_spec and descs is None:
        if a.device.type != "cuda":
            raise Unsupported("WARP_SPECIALIZE=1 with PERSISTENT=0 needs the TMA kernel, which "
                              "the interpreter takes only with LOADS='tma'")
        raise InvalidConfig("WARP_SPECIALIZE=1 needs TMA loads: PERSISTENT=1, or the TMA kernel "
                            "(bf16/fp16, batch 1, 16-byte aligned operands); these operands take "
                            "the pointer kernel")
    if descs is not None:
        _check_clusters(launch, descs[2])
        _gemm_tma_kernel[grid](
            descs[0], descs[1], c3, ws, cnt,
            m, n, k, k_per_split, c3.stride(1), c3.stride(2),
            BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk, GROUP_M=cfg["GROUP_M"], SPLIT_K=split_k,
            A_COL=descs[2], B_COL=descs[3], EVEN_MN=even_mn, SERIAL=serial, FANIN=fanin,
            WARP_SPECIALIZE=warp_spec, **launch,
        )  # fmt: skip
    else:
        _gemm_kernel[grid](
            a3, b3, c3, ws, cnt,
            m, n, k, k_per_split,
            a3.stride(0), a3.stride(1), a3.stride(2),
            b3.stride(0), b3.stride(1), b3.stride(2),
            c3.stride(0), c3.stride(1), c3.stride(2),
            BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk, GROUP_M=cfg["GROUP_M"], SPLIT_K=split_k,
            EVEN_K=even_k, EVEN_MN=even_mn,
            INPUT_PRECISION=precision, SERIAL=serial, FANIN=fanin, **launch,
        )  # fmt: skip
    if split_k > 1 and not serial:
        numel = batch * m * n
        block, chunk, warps = _reduce_launch(numel, split_k, a.device)
        _splitk_reduce_kernel[(triton.cdiv(numel, block),)](
            ws, c3, numel, SPLIT_K=split_k, CHUNK=chunk, BLOCK=block, num_warps=warps,
        )
    return out


def flops(m: int, n: int, k: int, batch: int = 1) -> int:
    """Floating-point operations of the product (a multiply and an add per term)."""
    return 2 * batch * m * n * k


def bytes_moved(m: int, n: int, k: int, elt_in: int, elt_out: int, batch: int = 1,
                split_k: int = 1) -> int:
    """Fewest bytes the kernel moves through device memory: A and B read once, C written once,
    plus the fp32 partials written and read back when ``split_k > 1``."""
    partials = 2 * 4 * split_k * m * n if split_k > 1 else 0
    return batch * ((m * k + k * n) * elt_in + m * n * elt_out + partials)
