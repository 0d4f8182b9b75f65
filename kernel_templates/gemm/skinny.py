"""Skinny / long-K GEMM: split-K with the reduction spread over every program, in one launch.

``C = A @ B`` for 2-D ``A[M, K]``, ``B[K, N]`` (each row- or column-major) where the product is
memory-bound: few output tiles (``16 x 4096`` from ``K = 4096``, ``64 x 64`` from ``K = 65536``),
so the work has to be cut along K to occupy the GPU, and the cost of summing the K slices must
not land on one program per tile (which is what limits ``gemm.py``'s one-launch split-K at
``SPLIT_K >= 32``: docs/notes/kernels.md).

Programs. The grid is ``TILES * SPLIT_K`` programs, program ``p`` computing the fp32 partial of
output tile ``p % TILES`` over K slice ``p // TILES`` (slice-major, so programs running at the same
time read neighbouring columns of the same rows of B). Each K slice is a contiguous run of
``K_PER_SPLIT`` (a multiple of ``BLOCK_K``; the last slices shorter, or empty where the rounding
leaves them nothing) and the K loop is software-pipelined ``num_stages`` deep, with pointer loads
or Hopper TMA descriptors (``TMA``). How the partials are summed is the ``MODE``:

- ``"barrier"`` (one launch, deterministic): every program stores its partial tile to an fp32
  workspace (it stays in L2), then meets every other program at a grid-wide barrier (an atomic
  arrival counter, then a spin on it with acquire loads), then sums a ``1/SPLIT_K`` share of its
  tile's elements over all ``SPLIT_K`` partials, in a fixed order, casts and stores them. No
  program reads more than ``BLOCK_M * BLOCK_N`` partial values, however large ``SPLIT_K`` is.
  The barrier needs every program resident at once: the launcher allows it only when the grid
  is at most the number of SMs (each program then has an SM of its own; nothing the kernel uses
  can keep one program from fitting on an idle SM) and never in the CPU interpreter, which runs
  programs one after another (there it runs the ``"two_launch"`` path, whose arithmetic is
  identical). The spin is bounded (``SPIN_LIMIT`` polls, about a second): a program that gives
  up writes NaN into its share of C, so a broken residency assumption (another process holding
  SMs through MPS, say) fails a correctness check instead of hanging the GPU.
  Arrivals (``_grid_arrive_and_wait``): one int64 count per grid size ``G`` that only grows.
  Every launch of ``G`` programs adds exactly ``G`` (kernels on one stream do not overlap), so a
  launch starts on a multiple of ``G`` and its barrier opens at the next one: nothing is reset,
  no memset launch, no departure step, and a program's last act is its store of C. (The earlier
  scheme, kept behind ``GROWING_BARRIER = False`` to measure against, counted departures and
  had the last to depart zero both counters: one more atomic round trip before each program
  could exit.)
- ``"atomic"`` (one launch, any grid size, not bitwise reproducible): every program adds its
  partial into a zeroed fp32 tile with ``atomic_add`` (done in L2), then bumps a per-tile counter;
  the last arrival of a tile reads the sums, casts and stores C, re-zeroes the workspace tile and
  its counter. The order of the fp32 additions depends on arrival order.
- ``"tagged"`` (one launch, deterministic, no barrier and no counters): every program stores each
  fp32 value of its partial tile as a 64-bit word whose high half is the launch's *epoch* (a
  per-device launch count, as stream-K's flags), with ``st.relaxed.gpu`` (strong and single-copy
  atomic: a word that carries the epoch carries its value; two adjacent words of a thread in one
  16-byte vector store where the layout holds them so, ``TAGGED_PAIRS``). Then it polls one word
  of its share in each of its tile's ``SPLIT_K`` partials until all carry the epoch (a few hundred
  bytes a poll), loads its share, and polls again until every word does (stores land in any
  order), summing in the same fixed order as ``"barrier"``. A program waits only for its own
  tile's programs, and the wait is one load behind the last store instead of a release, an atomic
  and a poll. Words of earlier launches carry older epochs, so nothing needs resetting; the
  workspace (twice the bytes) is zeroed once when allocated, and after 2**31 - 2 launches. Like
  the barrier it needs every program resident at once (the same grid limit and bounded spin; the
  interpreter runs ``"two_launch"``).
- ``"two_launch"`` (reference path): partials as in ``"barrier"``, then a second kernel of the same
  grid does the same share-wise sum.

Every mode but ``"atomic"`` is bitwise reproducible for a given configuration. Across those modes
the slices are summed in the same order, but ``tl.sum``'s order within a chunk follows each
kernel's register layout, so two modes need not agree to the bit.

Memory order (barrier and atomic): all threads store (or add; the atomic mode and, if
``BARRIER_FENCE``, the barrier mode also fence each thread), ``bar.sync``, then one thread's
``acq_rel`` gpu-scope atomic releases the whole CTA's writes (cumulativity through the barrier);
the waiting side polls with ``acquire`` atomics and a ``bar.sync`` orders the other threads' loads
after the poll that saw the count, and those loads go to L2 (``.cg``), never to a stale L1 line.

Workspaces and counters are cached per device and grown on demand; every launch leaves the
atomic mode's counters and accumulator at zero and each barrier arrival count on a multiple of
its grid size. Two streams running this kernel concurrently must not share them (nor two
processes under MPS the SMs that the barrier counts on).

It is the ``skinny`` search tier (backend ``triton_skinny``, planned for long K and tiny outputs
by ``search.kinds.gemm.hard_tiers``; its space, which searches the deterministic modes only, is
``search.kinds.gemm.skinny_space``; measured against cuBLAS in docs/notes/kernels.md). Its host
side (operand checks, TMA descriptors, cached buffers, device queries) is ``host.py``'s, shared
with the tiled template.

Configuration (``check_skinny_config``)::

    BLOCK_M, BLOCK_N, BLOCK_K, num_warps   powers of two
    SPLIT_K, num_stages                    positive (SPLIT_K any count, so that the grid can
                                           fill the SMs: 4 tiles x 33 on 132 SMs)
    MODE  "barrier" | "atomic" | "two_launch" | "tagged"       (default "barrier")
    TMA   1: TMA loads where they apply (sm90+, bf16/fp16, 16-byte aligned, not MODE "atomic");
          0: pointer loads (the faster on the H100 for these shapes)
    SWAP  1: the K loop computes C^T = B^T A^T (TMA loads only, else ``Unsupported``): the B
          tile, transposed in shared memory, is the dot's left operand, so a tile of fewer
          than 64 rows (``BLOCK_M`` 32 on 32x512x98304) runs on Hopper's wgmma (M of 64 on
          ``BLOCK_N``) instead of mma.sync; default 0
"""

from __future__ import annotations

import os
from typing import Any

import torch
import triton
import triton.language as tl

from kernel_templates.configs import check_keys, check_powers_of_two
from kernel_templates.errors import InvalidConfig, Unsupported
from kernel_templates.gemm.host import (
    DTYPES,
    cached_buffer,
    cc_major,
    check_operands,
    next_epoch,
    sm_count,
    tma_describe,
)
from kernel_templates.gemm.skinny_finish import finish, reduce_share
from kernel_templates.gemm.triton import tma_tiles

__all__ = ["CONFIG_KEYS", "DTYPES", "MODES", "check_skinny_config", "matmul_skinny"]

CONFIG_KEYS = ("BLOCK_M", "BLOCK_N", "BLOCK_K", "SPLIT_K", "num_warps", "num_stages")
OPTIONAL_KEYS = {"MODE": "barrier", "TMA": 1, "SWAP": 0}
MODES = ("barrier", "atomic", "two_launch", "tagged")
_MODE_ID = {"two_launch": 0, "barrier": 1, "atomic": 2, "tagged": 3}
#: The modes whose programs wait for each other within the launch (all resident at once).
RESIDENT_MODES = ("barrier", "tagged")

#: Polls of the barrier counter before a program gives up and writes NaN (about 0.3-1 us a poll).
SPIN_LIMIT = 1 << 20
#: Test seam: let the interpreter run the barrier (or the tagged mode's wait) itself (it then times
#: out and writes NaN in all but the last program's share: programs run one after another there).
INTERPRETER_BARRIER = False
#: Barrier mode: also fence every thread before the CTA barrier (the atomic mode always does).
#: Off by default: bar.sync plus one thread's cumulative release is what the PTX memory model
#: asks for (and what gemm.py's serial split-K relies on); no lost partial was seen without it
#: (H100, 200 + 200 repetitions), and it costs about 0.6 us on 64x64x65536.
BARRIER_FENCE = False
#: Barrier mode: arrivals in an only-growing count per grid size (``_grid_arrive_and_wait``)
#: instead of a counter pair that the last program to depart zeroes (False: the earlier scheme,
#: to measure against: ``scripts/bench/hard_probe.py s6``).
GROWING_BARRIER = True
#: Tagged mode: a thread's two adjacent words in one 16-byte relaxed store (False: one 8-byte
#: store a word, to measure against).
TAGGED_PAIRS = True
#: Most partial values one program loads at once in the share-wise reduction.
_REDUCE_ELEMS = 4096

_WORKSPACE: dict[torch.device, torch.Tensor] = {}
_ACCUM: dict[torch.device, torch.Tensor] = {}
_COUNTERS: dict[torch.device, torch.Tensor] = {}
_ARRIVALS: dict[torch.device, torch.Tensor] = {}
_TAGGED: dict[torch.device, torch.Tensor] = {}
_EPOCH: dict[torch.device, int] = {}


# -- device code --------------------------------------------------------------------------------


@triton.jit(do_not_specialize=["EPOCH"])
def _skinny_kernel(
    a_ptr, b_ptr, c_ptr, ws_ptr, cnt_ptr, EPOCH,
    M, N, K, K_PER_SPLIT,
    stride_am, stride_ak, stride_bk, stride_bn, stride_cm, stride_cn,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
    SPLIT_K: tl.constexpr, TILES_N: tl.constexpr, MODE: tl.constexpr, SPIN: tl.constexpr,
    CHUNK: tl.constexpr, SHARE: tl.constexpr, SHARE_BLOCK: tl.constexpr,
    FENCE: tl.constexpr, BARRIER_FENCE: tl.constexpr, K_BLOCK: tl.constexpr,
    GROWING: tl.constexpr, PAIRS: tl.constexpr, EVEN_K: tl.constexpr, EVEN_MN: tl.constexpr,
    INPUT_PRECISION: tl.constexpr,
):  # fmt: skip
    pid = tl.program_id(0)
    TILES = tl.num_programs(0) // SPLIT_K
    tile = pid % TILES
    pid_k = pid // TILES
    pid_m = tile // TILES_N
    pid_n = tile % TILES_N
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    if EVEN_MN:
        offs_am = tl.max_contiguous(tl.multiple_of(offs_m, BLOCK_M), BLOCK_M)
        offs_bn = tl.max_contiguous(tl.multiple_of(offs_n, BLOCK_N), BLOCK_N)
    else:
        # Ragged edge: wrap instead of masking the loads; wrapped lanes are never stored.
        offs_am = offs_m % M
        offs_bn = offs_n % N
    k_start = pid_k * K_PER_SPLIT
    if EVEN_K:
        k_start = tl.multiple_of(k_start, BLOCK_K)
    offs_k = k_start + tl.arange(0, BLOCK_K)
    a_ptrs = a_ptr + offs_am[:, None] * stride_am + offs_k[None, :] * stride_ak
    b_ptrs = b_ptr + offs_k[:, None] * stride_bk + offs_bn[None, :] * stride_bn
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    # the last slices may be shorter than K_PER_SPLIT (or empty): they stop at K
    for kk in range(0, tl.cdiv(tl.minimum(K_PER_SPLIT, K - k_start), BLOCK_K)):
        if EVEN_K:
            a = tl.load(a_ptrs)
            b = tl.load(b_ptrs, eviction_policy="evict_first")
        else:
            k_left = K - k_start - kk * BLOCK_K
            a = tl.load(a_ptrs, mask=tl.arange(0, BLOCK_K)[None, :] < k_left, other=0.0)
            b = tl.load(b_ptrs, mask=tl.arange(0, BLOCK_K)[:, None] < k_left, other=0.0,
                        eviction_policy="evict_first")
        acc = tl.dot(a, b, acc, input_precision=INPUT_PRECISION)
        a_ptrs += BLOCK_K * stride_ak
        b_ptrs += BLOCK_K * stride_bk
    finish(acc, c_ptr, ws_ptr, cnt_ptr, tile, pid_k, TILES, M, N, stride_cm, stride_cn,
           BLOCK_M, BLOCK_N, SPLIT_K, TILES_N, MODE, SPIN, CHUNK, SHARE, SHARE_BLOCK,
           FENCE, BARRIER_FENCE, EPOCH, K_BLOCK, GROWING, PAIRS)


@triton.jit(do_not_specialize=["EPOCH"])
def _skinny_tma_kernel(
    a_desc, b_desc, c_ptr, ws_ptr, cnt_ptr, EPOCH,
    M, N, K, K_PER_SPLIT, stride_cm, stride_cn,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
    SPLIT_K: tl.constexpr, TILES_N: tl.constexpr, MODE: tl.constexpr, SPIN: tl.constexpr,
    CHUNK: tl.constexpr, SHARE: tl.constexpr, SHARE_BLOCK: tl.constexpr,
    FENCE: tl.constexpr, BARRIER_FENCE: tl.constexpr, K_BLOCK: tl.constexpr,
    GROWING: tl.constexpr, PAIRS: tl.constexpr, A_COL: tl.constexpr, B_COL: tl.constexpr,
    SWAP: tl.constexpr,
):  # fmt: skip
    # Same work as _skinny_kernel, tiles through the TMA engine (out-of-bounds reads are zeros;
    # a K slice past the end of K reads only zeros).
    pid = tl.program_id(0)
    TILES = tl.num_programs(0) // SPLIT_K
    tile = pid % TILES
    pid_k = pid // TILES
    off_m = (tile // TILES_N) * BLOCK_M
    off_n = (tile % TILES_N) * BLOCK_N
    k_start = pid_k * K_PER_SPLIT
    # SWAP: C^T = B^T A^T, the B tile the dot's left operand (wgmma's M of 64 on n), so a
    # tile of fewer than 64 rows still runs on wgmma
    if SWAP:
        acc = tl.zeros((BLOCK_N, BLOCK_M), dtype=tl.float32)
    else:
        acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for kk in tl.range(0, tl.cdiv(K_PER_SPLIT, BLOCK_K)):
        a, b = tma_tiles(a_desc, b_desc, off_m, off_n, k_start + kk * BLOCK_K, A_COL, B_COL)
        if SWAP:
            acc = tl.dot(tl.trans(b), tl.trans(a), acc)
        else:
            acc = tl.dot(a, b, acc)
    if SWAP:
        acc = tl.trans(acc)
    finish(acc, c_ptr, ws_ptr, cnt_ptr, tile, pid_k, TILES, M, N, stride_cm, stride_cn,
           BLOCK_M, BLOCK_N, SPLIT_K, TILES_N, MODE, SPIN, CHUNK, SHARE, SHARE_BLOCK,
           FENCE, BARRIER_FENCE, EPOCH, K_BLOCK, GROWING, PAIRS)


@triton.jit
def _reduce_kernel(ws_ptr, c_ptr, M, N, stride_cm, stride_cn,
                   BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, SPLIT_K: tl.constexpr,
                   TILES_N: tl.constexpr, CHUNK: tl.constexpr, SHARE: tl.constexpr,
                   SHARE_BLOCK: tl.constexpr):
    # The second launch of "two_launch": the same grid and the same share-wise sum as "barrier".
    pid = tl.program_id(0)
    TILES = tl.num_programs(0) // SPLIT_K
    reduce_share(ws_ptr, c_ptr, pid % TILES, pid // TILES, TILES, M, N, stride_cm, stride_cn,
                 True, BLOCK_M, BLOCK_N, SPLIT_K, TILES_N, CHUNK, SHARE, SHARE_BLOCK)


# -- host side ----------------------------------------------------------------------------------


def _interpreting(device: torch.device) -> bool:
    return device.type != "cuda" or os.environ.get("TRITON_INTERPRET", "0") not in ("", "0")


def _capturing(device: torch.device) -> bool:
    """Whether the current CUDA stream is being captured into a graph."""
    return device.type == "cuda" and torch.cuda.is_current_stream_capturing()


def _sm_count(device: torch.device) -> int:
    if device.type == "cuda":
        return sm_count(device)
    return 1 << 30  # interpreter: no residency limit (the barrier is not run there anyway)


def _buffer(cache_: dict[torch.device, torch.Tensor], device: torch.device, numel: int,
            dtype: torch.dtype, zeroed: bool) -> torch.Tensor:
    return cached_buffer(cache_, device, numel, dtype, zeroed, least=1 << 16)



def check_skinny_config(config: dict[str, Any]) -> dict[str, Any]:
    """``config`` normalised (ints, ``MODE`` and ``TMA`` filled in), or ``InvalidConfig``."""
    check_keys(config, CONFIG_KEYS, OPTIONAL_KEYS)
    cfg: dict[str, Any] = {k: int(config[k]) for k in CONFIG_KEYS}
    check_powers_of_two(cfg, ("BLOCK_M", "BLOCK_N", "BLOCK_K", "num_warps"))
    if cfg["SPLIT_K"] < 1:
        raise InvalidConfig("SPLIT_K must be positive")
    if min(cfg["BLOCK_M"], cfg["BLOCK_N"], cfg["BLOCK_K"]) < 16:
        raise InvalidConfig("tl.dot needs BLOCK_M, BLOCK_N and BLOCK_K of at least 16")
    if cfg["num_stages"] < 1:
        raise InvalidConfig("num_stages must be positive")
    if cfg["SPLIT_K"] > cfg["BLOCK_M"] * cfg["BLOCK_N"]:
        raise InvalidConfig("SPLIT_K must not exceed BLOCK_M * BLOCK_N (each program reduces "
                            "a share of its tile)")
    mode = config.get("MODE", OPTIONAL_KEYS["MODE"])
    if mode not in MODES:
        raise InvalidConfig(f"MODE must be one of {MODES}, got {mode!r}")
    cfg["MODE"] = mode
    tma = int(config.get("TMA", OPTIONAL_KEYS["TMA"]))
    if tma not in (0, 1):
        raise InvalidConfig(f"TMA must be 0 or 1, got {tma}")
    cfg["TMA"] = tma
    swap = int(config.get("SWAP", OPTIONAL_KEYS["SWAP"]))
    if swap not in (0, 1):
        raise InvalidConfig(f"SWAP must be 0 or 1, got {swap}")
    if swap and not tma:
        raise InvalidConfig("SWAP=1 runs on the TMA kernel only: it needs TMA=1")
    cfg["SWAP"] = swap
    return cfg


def grid_size(m: int, n: int, config: dict[str, Any]) -> int:
    """Programs launched for an ``m x n`` output under ``config``."""
    cfg = check_skinny_config(config)
    return triton.cdiv(m, cfg["BLOCK_M"]) * triton.cdiv(n, cfg["BLOCK_N"]) * cfg["SPLIT_K"]


def matmul_skinny(a: torch.Tensor, b: torch.Tensor, config: dict[str, Any],
                  out: torch.Tensor | None = None) -> torch.Tensor:
    """``a @ b`` for 2-D ``a[M, K]``, ``b[K, N]`` (any strides, one dtype among bf16, fp16, fp32)
    with the skinny split-K kernel under ``config``; the output is ``out`` when given (contiguous
    ``[M, N]``, any served dtype) or a new tensor of the input dtype.

    Under CUDA-graph capture ``MODE="tagged"`` runs as ``"barrier"`` (same tiles and split):
    its epoch is a launch argument, which a graph would replay unchanged.

    ``Unsupported``: ``MODE="barrier"`` or ``"tagged"`` on a GPU with a grid larger than its SM
    count (their programs wait for each other, so all must be resident at once). In the CPU
    interpreter both run as ``"two_launch"`` (same arithmetic), unless ``INTERPRETER_BARRIER``.
    ``Unsupported`` too for ``SWAP=1`` where the TMA kernel does not apply (fp32, rows TMA
    cannot describe, ``MODE="atomic"``, before sm_90, the interpreter).
    """
    cfg = check_skinny_config(config)
    if a.dim() != 2 or b.dim() != 2:
        raise ValueError(f"a and b must be 2-D, got {a.dim()} and {b.dim()}")
    _, _, _, out = check_operands(a, b, out, None, "skinny gemm")
    m, k = a.shape
    n = b.shape[1]
    if m == 0 or n == 0:
        return out
    if k == 0:
        return out.zero_()

    bm, bn, bk, split_k = cfg["BLOCK_M"], cfg["BLOCK_N"], cfg["BLOCK_K"], cfg["SPLIT_K"]
    tiles_n = triton.cdiv(n, bn)
    tiles = triton.cdiv(m, bm) * tiles_n
    grid = tiles * split_k
    tile = bm * bn
    mode = cfg["MODE"] if split_k > 1 else "two_launch"
    if mode == "tagged" and _capturing(a.device):
        # the epoch is a launch argument: a graph would replay one epoch, and its readers
        # would take the previous replay's words for this one's. The barrier is graph-safe.
        mode = "barrier"
    if mode in RESIDENT_MODES and _interpreting(a.device) and not INTERPRETER_BARRIER:
        mode = "two_launch"
    if mode in RESIDENT_MODES and grid > _sm_count(a.device):
        raise Unsupported(f"MODE={mode} needs at most {_sm_count(a.device)} programs (one per "
                          f"SM, all resident), this config launches {grid}")
    k_per_split = triton.cdiv(triton.cdiv(k, split_k), bk) * bk
    share = triton.cdiv(tile, split_k)
    share_block = triton.next_power_of_2(share)
    chunk = 1 << (max(1, min(split_k, _REDUCE_ELEMS // share_block)).bit_length() - 1)
    if mode == "atomic":
        ws = _buffer(_ACCUM, a.device, tiles * tile, torch.float32, zeroed=True)
        cnt = _buffer(_COUNTERS, a.device, tiles, torch.int32, zeroed=True)
    elif mode == "tagged":
        # zeroed once: no word carries an epoch before a launch writes it (next_epoch)
        ws = _buffer(_TAGGED, a.device, split_k * tiles * tile, torch.int64, zeroed=True)
        cnt = ws
    elif split_k > 1:
        ws = _buffer(_WORKSPACE, a.device, split_k * tiles * tile, torch.float32, zeroed=False)
        if mode == "barrier" and GROWING_BARRIER:
            cnt = _buffer(_ARRIVALS, a.device, grid + 1, torch.int64, zeroed=True)
        else:
            cnt = _buffer(_COUNTERS, a.device, 2, torch.int32, zeroed=True)
    else:
        ws = cnt = out
    mode_id = _MODE_ID[mode]
    epoch = next_epoch(_EPOCH, _TAGGED, a.device) if mode == "tagged" else 0
    descs = None
    # The atomic mode lost partial sums with TMA loads on an H100 (16x4096x4096, 16x128x128 sk4:
    # 28 of 200 calls wrong, with or without fences; pointer loads 0 of 200): pointer loads only.
    if (cfg["TMA"] and mode != "atomic" and a.device.type == "cuda" and cc_major(a.device) >= 9
            and a.dtype in (torch.bfloat16, torch.float16)):
        da, db = tma_describe(a, m, k, (bm, bk)), tma_describe(b, k, n, (bk, bn))
        if da is not None and db is not None:
            descs = (da, db)
    if cfg["SWAP"] and descs is None:
        raise Unsupported("SWAP=1 needs TMA loads: bf16/fp16 operands TMA can describe, on "
                          "sm_90+, and a MODE other than 'atomic'")
    common = dict(BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk, SPLIT_K=split_k, TILES_N=tiles_n,
                  MODE=mode_id, SPIN=SPIN_LIMIT, CHUNK=chunk, SHARE=share,
                  SHARE_BLOCK=share_block, K_BLOCK=triton.next_power_of_2(split_k),
                  FENCE=not _interpreting(a.device), BARRIER_FENCE=BARRIER_FENCE,
                  GROWING=GROWING_BARRIER, PAIRS=TAGGED_PAIRS,
                  num_warps=cfg["num_warps"], num_stages=cfg["num_stages"])
    if descs is not None:
        (a_desc, a_col), (b_desc, b_col) = descs
        _skinny_tma_kernel[(grid,)](
            a_desc, b_desc, out, ws, cnt, epoch, m, n, k, k_per_split, out.stride(0),
            out.stride(1),
            A_COL=a_col, B_COL=b_col, SWAP=bool(cfg["SWAP"]), **common)
    else:
        _skinny_kernel[(grid,)](
            a, b, out, ws, cnt, epoch, m, n, k, k_per_split,
            a.stride(0), a.stride(1), b.stride(0), b.stride(1), out.stride(0), out.stride(1),
            EVEN_K=k % bk == 0, EVEN_MN=m % bm == 0 and n % bn == 0,
            INPUT_PRECISION="ieee" if a.dtype == torch.float32 else "tf32", **common)
    if mode == "two_launch" and split_k > 1:
        _reduce_kernel[(grid,)](ws, out, m, n, out.stride(0), out.stride(1),
                                BLOCK_M=bm, BLOCK_N=bn, SPLIT_K=split_k, TILES_N=tiles_n,
                                CHUNK=chunk, SHARE=share, SHARE_BLOCK=share_block,
                                num_warps=4)
    return out
