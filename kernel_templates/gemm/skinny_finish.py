"""How a skinny program's partial tile becomes C (``kernel_templates/gemm/skinny.py``, whose
docstring describes the modes and their memory order): ``finish`` stores it directly
(``SPLIT_K`` 1) or hands it to the mode's reduction. ``"barrier"``: partials to the fp32
workspace, the grid-wide barrier, then ``reduce_share``, the share-wise sum in a fixed order
(also the second launch of ``"two_launch"``). ``"tagged"``: epoch-tagged partial words and a
wait on the words themselves. ``"atomic"``: sums in L2 in arrival order. Device code only."""

from __future__ import annotations

import triton
import triton.language as tl

__all__ = ["finish", "reduce_share"]


@triton.jit
def _store_share(c_ptr, total, tile, local, mine, M, N, stride_cm, stride_cn,
                 BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, TILES_N: tl.constexpr):
    # A share's sums into C: ``local`` their offsets in tile ``tile`` (row-major BLOCK_M x
    # BLOCK_N), ``mine`` the lanes that hold one; only C's in-bounds elements are stored.
    pid_m = tile // TILES_N
    pid_n = tile % TILES_N
    offs_m = pid_m * BLOCK_M + local // BLOCK_N
    offs_n = pid_n * BLOCK_N + local % BLOCK_N
    tl.store(c_ptr + offs_m * stride_cm + offs_n * stride_cn,
             total.to(c_ptr.dtype.element_ty), mask=mine & (offs_m < M) & (offs_n < N))


@triton.jit
def reduce_share(ws_ptr, c_ptr, tile, share, TILES, M, N, stride_cm, stride_cn, ok,
                 BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, SPLIT_K: tl.constexpr,
                 TILES_N: tl.constexpr, CHUNK: tl.constexpr, SHARE: tl.constexpr,
                 SHARE_BLOCK: tl.constexpr):
    # Sums elements [share * SHARE, (share + 1) * SHARE) of ``tile`` (SHARE = ceil(TILE /
    # SPLIT_K), the last share cut at the tile's end; SHARE_BLOCK its power-of-two block) over
    # the SPLIT_K partials (workspace [SPLIT_K, TILES, BLOCK_M * BLOCK_N], whole tiles), CHUNK
    # slices per load, in a fixed order; stores the in-bounds ones to C (NaN where ``ok`` is
    # false).
    TILE: tl.constexpr = BLOCK_M * BLOCK_N
    lanes = tl.arange(0, SHARE_BLOCK)
    local = share * SHARE + lanes
    mine = (lanes < SHARE) & (local < TILE)
    rows = tl.arange(0, CHUNK)
    base = ws_ptr + tile.to(tl.int64) * TILE + local[None, :]
    total = tl.zeros((SHARE_BLOCK,), dtype=tl.float32)
    for s in tl.static_range(0, SPLIT_K, CHUNK):
        ptrs = base + ((s + rows).to(tl.int64) * TILES * TILE)[:, None]
        part = tl.load(ptrs, mask=((s + rows) < SPLIT_K)[:, None] & mine[None, :], other=0.0,
                       cache_modifier=".cg")
        total += tl.sum(part, axis=0)
    total = tl.where(ok, total, float("nan"))
    _store_share(c_ptr, total, tile, local, mine, M, N, stride_cm, stride_cn, BLOCK_M, BLOCK_N,
                 TILES_N)


@triton.jit
def _store_tagged(ptrs, acc, EPOCH, RELAXED: tl.constexpr, PAIRS: tl.constexpr):
    # Each fp32 partial value as one 64-bit word, this launch's EPOCH in its high half, stored
    # with st.relaxed.gpu (inline asm: a strong, single-copy atomic store, so a reader that sees
    # the epoch sees the value with it). The interpreter has no inline asm: a plain store.
    # PAIRS: a thread's consecutive two values go out as one 16-byte relaxed vector store
    # (each word still single-copy atomic) where their words are adjacent and 16-byte aligned,
    # as the matrix-unit layouts hold them; the asm checks that and else stores them apart.
    bits = acc.to(tl.uint32, bitcast=True).to(tl.uint64)
    word = (bits | (EPOCH.to(tl.uint64) << 32)).to(tl.int64, bitcast=True)
    if RELAXED and PAIRS:
        tl.inline_asm_elementwise(
            "{\n\t.reg .pred p;\n\t.reg .b64 d, a;\n\t"
            "sub.s64 d, $3, $2;\n\tand.b64 a, $2, 15;\n\t"
            "setp.eq.s64 p, d, 8;\n\tsetp.eq.and.s64 p, a, 0, p;\n\t"
            "@p st.relaxed.gpu.global.v2.b64 [$2], {$4, $5};\n\t"
            "@!p st.relaxed.gpu.global.b64 [$2], $4;\n\t"
            "@!p st.relaxed.gpu.global.b64 [$3], $5;\n\t"
            "mov.u32 $0, 0;\n\tmov.u32 $1, 0;\n\t}",
            "=r,=r,l,l,l,l", [ptrs.to(tl.int64), word], dtype=tl.int32, is_pure=False, pack=2)
    elif RELAXED:
        tl.inline_asm_elementwise("st.relaxed.gpu.global.b64 [$1], $2;\n\tmov.u32 $0, 0;",
                                  "=r,l,l", [ptrs.to(tl.int64), word], dtype=tl.int32,
                                  is_pure=False, pack=1)
    else:
        tl.store(ptrs, word)


@triton.jit
def _tagged_missing(words, mask, EPOCH):
    # How many words under ``mask`` do not (yet) carry this launch's EPOCH.
    stale = ((words >> 32) != EPOCH.to(tl.int64)) & mask
    return tl.sum(stale.to(tl.int32))


@triton.jit
def _sum_tagged(base, mine, TILES, EPOCH, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                SPLIT_K: tl.constexpr, CHUNK: tl.constexpr, SHARE_BLOCK: tl.constexpr):
    # The share's sum over the SPLIT_K tagged partials, CHUNK at a time in a fixed order (every
    # chunk's loads issued before any is checked), and how many words were not this launch's.
    TILE: tl.constexpr = BLOCK_M * BLOCK_N
    rows = tl.arange(0, CHUNK)
    total = tl.zeros((SHARE_BLOCK,), dtype=tl.float32)
    missing = 0
    for s in tl.static_range(0, SPLIT_K, CHUNK):
        ptrs = base + ((s + rows).to(tl.int64) * TILES * TILE)[:, None]
        live = ((s + rows) < SPLIT_K)[:, None] & mine[None, :]
        words = tl.load(ptrs, mask=live, other=0, volatile=True)
        missing += _tagged_missing(words, live, EPOCH)
        part = (words & 0xFFFFFFFF).to(tl.int32).to(tl.float32, bitcast=True)
        total += tl.sum(tl.where(live, part, 0.0), axis=0)
    return total, missing


@triton.jit
def _reduce_tagged(ws_ptr, c_ptr, tile, share, TILES, M, N, stride_cm, stride_cn, EPOCH,
                   BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, SPLIT_K: tl.constexpr,
                   TILES_N: tl.constexpr, CHUNK: tl.constexpr, SHARE: tl.constexpr,
                   SHARE_BLOCK: tl.constexpr, K_BLOCK: tl.constexpr, SPIN: tl.constexpr):
    # reduce_share over tagged partials (workspace [SPLIT_K, TILES, BLOCK_M * BLOCK_N] of
    # 64-bit words), with no barrier: first poll one word of the share in each of the SPLIT_K
    # partials (a hint, a few hundred bytes a poll) until all carry EPOCH, then load and sum
    # the share, again until every word of it does (stores land in any order; a retry sums
    # from scratch, in the same fixed order). NaN in the share if a wait ran out of polls.
    TILE: tl.constexpr = BLOCK_M * BLOCK_N
    ks = tl.arange(0, K_BLOCK)
    in_k = ks < SPLIT_K
    probe = tl.minimum(share * SHARE, TILE - 1)
    probes = ws_ptr + (ks.to(tl.int64) * TILES + tile) * TILE + probe
    seen = tl.load(probes, mask=in_k, other=0, volatile=True)
    spins = 0
    while (_tagged_missing(seen, in_k, EPOCH) > 0) & (spins < SPIN):
        seen = tl.load(probes, mask=in_k, other=0, volatile=True)
        spins += 1
    lanes = tl.arange(0, SHARE_BLOCK)
    local = share * SHARE + lanes
    mine = (lanes < SHARE) & (local < TILE)
    base = ws_ptr + tile.to(tl.int64) * TILE + local[None, :]
    total, missing = _sum_tagged(base, mine, TILES, EPOCH, BLOCK_M, BLOCK_N, SPLIT_K,
                                 CHUNK, SHARE_BLOCK)
    while (missing > 0) & (spins < SPIN):
        total, missing = _sum_tagged(base, mine, TILES, EPOCH, BLOCK_M, BLOCK_N, SPLIT_K,
                                     CHUNK, SHARE_BLOCK)
        spins += 1
    total = tl.where(spins < SPIN, total, float("nan"))
    _store_share(c_ptr, total, tile, local, mine, M, N, stride_cm, stride_cn, BLOCK_M, BLOCK_N,
                 TILES_N)


@triton.jit
def _fence_each_thread(x, FENCE: tl.constexpr):
    # Every thread waits until its own earlier global writes and reductions are performed at gpu
    # scope (fence.acq_rel.gpu), as CUDA's threadFenceReduction does before __syncthreads: a red
    # still in flight from thread 5 is not covered by thread 0's release alone (seen on an H100:
    # the atomic mode lost partial sums without it). ``x`` is any scalar (inline asm needs an
    # operand); the interpreter has no inline asm and needs no fence.
    if FENCE:
        tl.inline_asm_elementwise("fence.acq_rel.gpu;\n\tmov.u32 $0, $1;", "=r,r", [x],
                                  dtype=tl.int32, is_pure=False, pack=1)


@triton.jit
def _grid_arrive_and_wait(cnt_ptr, SPIN: tl.constexpr, GROWING: tl.constexpr):
    # All programs of the grid meet here; returns False in a program that gave up waiting.
    # GROWING: grid size G counts in slot G of an int64 array that only grows: every launch of
    # G programs adds exactly G, so a launch starts on a multiple of G and opens at the next;
    # no departure step resets it (one atomic round trip less at the end of every program).
    # Else cnt_ptr[0] counts arrivals; _grid_depart (after the program's last use of the
    # workspace) counts departures, and the last to depart zeroes both.
    nprog = tl.num_programs(0)
    if GROWING:
        slot = cnt_ptr + nprog
    else:
        slot = cnt_ptr
    tl.debug_barrier()
    old = tl.atomic_add(slot, 1, sem="acq_rel", scope="gpu")
    if GROWING:
        target = old - old % nprog + nprog
    else:
        target = nprog
    seen = old + 1
    spins = 0
    while (seen < target) & (spins < SPIN):
        seen = tl.atomic_add(slot, 0, sem="acquire", scope="gpu")
        spins += 1
    tl.debug_barrier()
    return seen >= target


@triton.jit
def _grid_depart(cnt_ptr):
    # Every arrival precedes its program's departure, so when the departures reach the grid
    # size no program is still spinning on (or yet to add to) the arrival counter.
    nprog = tl.num_programs(0)
    gone = tl.atomic_add(cnt_ptr + 1, 1, sem="acq_rel", scope="gpu")
    if gone == nprog - 1:
        tl.atomic_xchg(cnt_ptr, 0, sem="relaxed", scope="gpu")
        tl.atomic_xchg(cnt_ptr + 1, 0, sem="relaxed", scope="gpu")


@triton.jit
def finish(acc, c_ptr, ws_ptr, cnt_ptr, tile, pid_k, TILES, M, N, stride_cm, stride_cn,
           BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, SPLIT_K: tl.constexpr,
           TILES_N: tl.constexpr, MODE: tl.constexpr, SPIN: tl.constexpr,
           CHUNK: tl.constexpr, SHARE: tl.constexpr, SHARE_BLOCK: tl.constexpr,
           FENCE: tl.constexpr, BARRIER_FENCE: tl.constexpr, EPOCH, K_BLOCK: tl.constexpr,
           GROWING: tl.constexpr, PAIRS: tl.constexpr):
    TILE: tl.constexpr = BLOCK_M * BLOCK_N
    pid_m = tile // TILES_N
    pid_n = tile % TILES_N
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    c_ptrs = c_ptr + offs_m[:, None] * stride_cm + offs_n[None, :] * stride_cn
    c_mask = (offs_m[:, None] < M) & (offs_n[None, :] < N)
    local = tl.arange(0, BLOCK_M)[:, None] * BLOCK_N + tl.arange(0, BLOCK_N)[None, :]
    if SPLIT_K == 1:
        tl.store(c_ptrs, acc.to(c_ptr.dtype.element_ty), mask=c_mask)
    elif MODE == 3:
        # tagged: no barrier, no counters; readers wait for this launch's epoch in the words
        part = ws_ptr + (pid_k.to(tl.int64) * TILES + tile) * TILE + local
        _store_tagged(part, acc, EPOCH, FENCE, PAIRS)
        _reduce_tagged(ws_ptr, c_ptr, tile, pid_k, TILES, M, N, stride_cm, stride_cn, EPOCH,
                       BLOCK_M, BLOCK_N, SPLIT_K, TILES_N, CHUNK, SHARE, SHARE_BLOCK, K_BLOCK,
                       SPIN)
    elif MODE == 2:
        # atomic: accumulate in L2, the tile's last arrival converts and re-zeroes.
        acc_ptrs = ws_ptr + tile.to(tl.int64) * TILE + local
        tl.atomic_add(acc_ptrs, acc, sem="relaxed", scope="gpu")
        _fence_each_thread(tile, FENCE)
        tl.debug_barrier()
        seen = tl.atomic_add(cnt_ptr + tile, 1, sem="acq_rel", scope="gpu")
        if seen == SPLIT_K - 1:
            tl.debug_barrier()
            total = tl.load(acc_ptrs, cache_modifier=".cg")
            tl.store(acc_ptrs, tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32))
            tl.atomic_xchg(cnt_ptr + tile, 0, sem="relaxed", scope="gpu")
            tl.store(c_ptrs, total.to(c_ptr.dtype.element_ty), mask=c_mask)
    else:
        part = ws_ptr + (pid_k.to(tl.int64) * TILES + tile) * TILE + local
        tl.store(part, acc)
        if MODE == 1:
            _fence_each_thread(tile, FENCE and BARRIER_FENCE)
            ok = _grid_arrive_and_wait(cnt_ptr, SPIN, GROWING)
            reduce_share(ws_ptr, c_ptr, tile, pid_k, TILES, M, N, stride_cm, stride_cn, ok,
                         BLOCK_M, BLOCK_N, SPLIT_K, TILES_N, CHUNK, SHARE, SHARE_BLOCK)
            if not GROWING:
                _grid_depart(cnt_ptr)
