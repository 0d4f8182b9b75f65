"""Probe (issue 18): the mid-m product computed as ``C^T = B^T A^T`` in Triton, one program per
64 columns of C, all of ``m`` in one program as two or three power-of-two parts.

    OUT=DIR python -m scripts.bench.swapped_probe [pass1|wide|ws]

The stacked stream-K tiles (``STACK``) run ``m`` as 64-row wgmma tiles: each 16-deep K step
reads the B tile from shared memory once per stacked tile. Swapped, the B tile (transposed in
shared memory) is the wgmma's A operand, read once per part, and ``m`` is its N extent (64x128
and 64x64 wgmma tiles for m = 192), as cuBLAS's 64x192 tile does. Each variant is checked
against float64 on two fresh input sets into NaN-poisoned outputs and 10 repeats for bitwise
equality, timed once (EventBench), and the fastest re-timed in 7 interleaved rounds beside
cuBLAS and the stacked tiles on one program per tile. Rows go to DIR/swapped.json.
"""

from __future__ import annotations

import os
import sys

import torch
import triton
import triton.language as tl

from kernel_templates.gemm import streamk
from kernel_templates.gemm.inputs import make_inputs
from kernel_templates.gemm.reference import reference_for
from kernel_templates.gemm.streamk import _range_of, _wait_flag
from scripts.bench.checked import checked_makers, fastest, interleaved, probe_mode, run_probe
from search.kinds.gemm.spec import GemmProblem
from workers.bench import EventBench

OUT = os.environ.get("OUT", "/tmp/swapped")
ROWS: list[dict] = []


@triton.jit
def _part(b_t, a_desc, row: tl.constexpr, k, acc):
    return tl.dot(b_t, tl.trans(a_desc.load([row, k])), acc)


@triton.jit
def _zeros(BN: tl.constexpr, P: tl.constexpr):
    # a part's accumulator; an absent part (P == 0) gets a 16-wide one that nothing uses
    return tl.zeros((BN, P + 16 * (P == 0)), tl.float32)


@triton.jit
def _k_step(b_desc, a0, a1, a2, n0, k, acc0, acc1, acc2, P0: tl.constexpr,
            P1: tl.constexpr, P2: tl.constexpr):
    # one K step of every part: the B tile loaded once, transposed, and each part's product
    b_t = tl.trans(b_desc.load([k, n0]))
    acc0 = _part(b_t, a0, 0, k, acc0)
    if P1 > 0:
        acc1 = _part(b_t, a1, P0, k, acc1)
    if P2 > 0:
        acc2 = _part(b_t, a2, P0 + P1, k, acc2)
    return acc0, acc1, acc2


@triton.jit
def swapped_kernel(a0, a1, a2, b_desc, c0, c1, c2, K,
                   BN: tl.constexpr, BK: tl.constexpr, P0: tl.constexpr, P1: tl.constexpr,
                   P2: tl.constexpr, STAGES: tl.constexpr, WS: tl.constexpr = False):
    """Program p: ``C[:, 64p:64p+BN]^T`` over all of K; parts of P0, P1, P2 rows of A (P1, P2
    may be 0); ``WS``: the K loop warp-specialized (Triton's producer warps for the loads)."""
    n0 = tl.program_id(0) * BN
    acc0, acc1, acc2 = _zeros(BN, P0), _zeros(BN, P1), _zeros(BN, P2)
    for k in tl.range(0, K, BK, num_stages=STAGES, warp_specialize=WS):
        acc0, acc1, acc2 = _k_step(b_desc, a0, a1, a2, n0, k, acc0, acc1, acc2, P0, P1, P2)
    c0.store([0, n0], tl.trans(acc0).to(c0.dtype))
    if P1 > 0:
        c1.store([P0, n0], tl.trans(acc1).to(c1.dtype))
    if P2 > 0:
        c2.store([P0 + P1, n0], tl.trans(acc2).to(c2.dtype))


@triton.jit
def _publish(ws, acc, OFF: tl.constexpr, P: tl.constexpr, BN: tl.constexpr):
    tl.store(ws + OFF + tl.arange(0, BN)[:, None] * P + tl.arange(0, P)[None, :], acc)


@triton.jit
def _gather(ws, acc, OFF: tl.constexpr, P: tl.constexpr, BN: tl.constexpr):
    return acc + tl.load(ws + OFF + tl.arange(0, BN)[:, None] * P + tl.arange(0, P)[None, :],
                         cache_modifier=".cg")


@triton.jit(do_not_specialize=["EPOCH"])
def swapped_sk_kernel(a0, a1, a2, b_desc, c0, c1, c2, ws_ptr, flag_ptr, EPOCH, K,
                      ITERS_PER_TILE, Q, E,
                      BN: tl.constexpr, BK: tl.constexpr, P0: tl.constexpr, P1: tl.constexpr,
                      P2: tl.constexpr, SPIN: tl.constexpr):
    """Lockstep stream-K over the swapped tiles (ranges of Q or Q + 1 iterations, program p
    takes range p, walks its segments last first; the segment ending a tile adds the earlier
    ranges' partials in range order)."""
    SLOT: tl.constexpr = BN * (P0 + P1 + P2)
    v = tl.program_id(0)
    start = v * Q + tl.minimum(v, E)
    end = start + Q + (v < E).to(tl.int32)
    first_seg = start // ITERS_PER_TILE
    last_seg = (end - 1) // ITERS_PER_TILE
    for i in range(0, last_seg - first_seg + 1):
        seg = last_seg - i
        tile_it0 = seg * ITERS_PER_TILE
        k0 = tl.maximum(start - tile_it0, 0)
        k1 = tl.minimum(end - tile_it0, ITERS_PER_TILE)
        n0 = seg * BN
        acc0, acc1, acc2 = _zeros(BN, P0), _zeros(BN, P1), _zeros(BN, P2)
        for kk in range(k0, k1):
            acc0, acc1, acc2 = _k_step(b_desc, a0, a1, a2, n0, kk * BK, acc0, acc1, acc2,
                                       P0, P1, P2)
        if k1 < ITERS_PER_TILE:
            base = ws_ptr + v * SLOT
            _publish(base, acc0, 0, P0, BN)
            if P1 > 0:
                _publish(base, acc1, BN * P0, P1, BN)
            if P2 > 0:
                _publish(base, acc2, BN * (P0 + P1), P2, BN)
            tl.debug_barrier()
            tl.atomic_xchg(flag_ptr + v, EPOCH, sem="release", scope="gpu")
        else:
            failed = 0
            if k1 - k0 < ITERS_PER_TILE:
                for q in range(_range_of(tile_it0, Q, E), v):
                    failed += (~_wait_flag(flag_ptr + q, EPOCH, SPIN)).to(tl.int32)
                    base = ws_ptr + q * SLOT
                    acc0 = _gather(base, acc0, 0, P0, BN)
                    if P1 > 0:
                        acc1 = _gather(base, acc1, BN * P0, P1, BN)
                    if P2 > 0:
                        acc2 = _gather(base, acc2, BN * (P0 + P1), P2, BN)
            ok = failed == 0
            c0.store([0, n0], tl.trans(tl.where(ok, acc0, float("nan"))).to(c0.dtype))
            if P1 > 0:
                c1.store([P0, n0], tl.trans(tl.where(ok, acc1, float("nan"))).to(c1.dtype))
            if P2 > 0:
                c2.store([P0 + P1, n0],
                         tl.trans(tl.where(ok, acc2, float("nan"))).to(c2.dtype))


def parts_of(m: int, widest: int = 256) -> tuple[int, ...]:
    """``m`` rounded up to 16 as powers of two, widest first (192 -> (128, 64))."""
    left, out = triton.cdiv(m, 16) * 16, []
    while left:
        p = min(widest, 1 << (left.bit_length() - 1))
        out.append(p)
        left -= p
    if len(out) > 3:
        raise ValueError(f"m={m} needs {len(out)} parts; the probe kernel has three")
    return tuple(out)


def _descriptors(a: torch.Tensor, b: torch.Tensor, out: torch.Tensor, bn: int, bk: int,
                 parts: tuple[int, ...]):
    """(parts padded to three with 0, A's three descriptors, B's, C's three)."""
    from triton.tools.tensor_descriptor import TensorDescriptor

    ps = tuple(parts) + (0,) * (3 - len(parts))
    a_d = [TensorDescriptor.from_tensor(a, [p or 16, bk]) for p in ps]
    c_d = [TensorDescriptor.from_tensor(out, [p or 16, bn]) for p in ps]
    return ps, a_d, TensorDescriptor.from_tensor(b, [bk, bn]), c_d


def swapped(a: torch.Tensor, b: torch.Tensor, out: torch.Tensor, bn: int, bk: int, stages: int,
            warps: int, parts: tuple[int, ...], ws: bool = False):
    k, n = b.shape
    ps, a_d, b_d, c_d = _descriptors(a, b, out, bn, bk, parts)
    grid = (triton.cdiv(n, bn),)

    def call():
        swapped_kernel[grid](*a_d, b_d, *c_d, k, BN=bn, BK=bk, P0=ps[0], P1=ps[1], P2=ps[2],
                             STAGES=stages, WS=ws, num_warps=warps, num_stages=stages)
        return out

    return call


def swapped_sk(a: torch.Tensor, b: torch.Tensor, out: torch.Tensor, bn: int, bk: int,
               stages: int, warps: int, parts: tuple[int, ...], programs: int):
    k, n = b.shape
    ps, a_d, b_d, c_d = _descriptors(a, b, out, bn, bk, parts)
    per_tile = triton.cdiv(k, bk)
    total = triton.cdiv(n, bn) * per_tile
    g = min(programs, total)
    q, e = divmod(total, g)
    ws = torch.empty(g * bn * sum(parts), dtype=torch.float32, device=a.device)
    flags = torch.zeros(g, dtype=torch.int32, device=a.device)
    epoch = [0]

    def call():
        epoch[0] += 1
        swapped_sk_kernel[(g,)](*a_d, b_d, *c_d, ws, flags, epoch[0], k, per_tile, q, e,
                                BN=bn, BK=bk, P0=ps[0], P1=ps[1], P2=ps[2],
                                SPIN=streamk.SPIN_LIMIT, num_warps=warps, num_stages=stages)
        return out

    return call


def _wide_variants(m: int, n: int) -> dict:
    """``wide``: 128-column swapped tiles (8 warps, one wgmma M block each) on 96, 128 and
    132 programs (lockstep; on 96 programs each takes half a tile of 192x6144x6144), and
    128-deep K steps three stages deep on one program per 64 columns."""
    parts = parts_of(m)
    label = "+".join(map(str, parts))
    out = {f"swapped {label} BK128 w4 s3 DP": (
        lambda st: swapped(st.a, st.b, st.out, 64, 128, 3, 4, parts))}
    for g in (96, 128, 132):
        for s in (3, 4):
            out[f"swapped {label} BN128 w8 s{s} lockstep G{g}"] = (
                lambda st, g=g, s=s: swapped_sk(st.a, st.b, st.out, 128, 64, s, 8, parts, g))
    out[f"swapped {label} w4 s7 DP"] = (
        lambda st: swapped(st.a, st.b, st.out, 64, 64, 7, 4, parts))
    return out


def _ws_variants(m: int, n: int) -> dict:
    """``ws``: the data-parallel swapped tile with its K loop warp-specialized (4 consumer
    warps), 5-7 stages deep, beside the same tile without."""
    parts = parts_of(m)
    label = "+".join(map(str, parts))
    out = {}
    for s in (5, 6, 7):
        for ws in (False, True):
            out[f"swapped {label} w4 s{s} DP{' WS' if ws else ''}"] = (
                lambda st, s=s, ws=ws: swapped(st.a, st.b, st.out, 64, 64, s, 4, parts, ws))
    return out


def probe_shape(m: int, n: int, k: int, bench: EventBench, top: int = 6,
                which: str = "pass1") -> None:
    p = GemmProblem(m, n, k)
    sh = f"{m}x{n}x{k}"
    sets = [make_inputs(p, "cuda", seed=1300 + i) for i in range(2)]
    refs = [reference_for(st) for st in sets]
    if which in ("wide", "ws"):
        more = _wide_variants(m, n) if which == "wide" else _ws_variants(m, n)
        _probe(sh, sets, refs, more, m, n, bench, top)
        return
    variants = {}
    options = set()
    for widest in (256, 128):
        try:
            options.add(parts_of(m, widest))
        except ValueError:
            pass
    tiles = triton.cdiv(n, 64)
    for parts in sorted(options):
        rows = sum(parts)
        if rows > 256:
            continue
        for stages in (5, 6, 7):
            if stages * (rows + 64) * 64 * 2 > 224 * 1024:
                continue
            name = f"swapped {'+'.join(map(str, parts))} w4 s{stages} DP"
            variants[name] = (lambda st, parts=parts, s=stages:
                              swapped(st.a, st.b, st.out, 64, 64, s, 4, parts))
            if stages == 7:
                continue
            for g in (120, 128, 132):
                if g <= tiles:
                    continue
                name = f"swapped {'+'.join(map(str, parts))} w4 s{stages} lockstep G{g}"
                variants[name] = (lambda st, parts=parts, s=stages, g=g:
                                  swapped_sk(st.a, st.b, st.out, 64, 64, s, 4, parts, g))
    _probe(sh, sets, refs, variants, m, n, bench, top)


def _probe(sh: str, sets: list, refs: list, variants: dict, m: int, n: int, bench: EventBench,
           top: int) -> None:
    calls = checked_makers(variants, sets, refs, 10, sh, ROWS)
    finalists = fastest(calls, bench, sh, ROWS, top)
    stack = triton.cdiv(m, 64)
    makers = {"cublas": lambda st: (lambda: torch.matmul(st.a, st.b, out=st.out))}
    if stack <= 4:
        s = 6 if stack < 4 else 5
        cfg = dict(BLOCK_M=64, BLOCK_N=64, BLOCK_K=64, GROUP_M=1, num_warps=4, num_stages=s,
                   STACK=stack, LOADS="tma", ORDER="rows")
        for name, c, g in ((f"stacked {stack}x64x64x64 w4 s{s} DP", cfg, triton.cdiv(n, 64)),
                           (f"stacked {stack}x64x64x64 w4 s{s} lockstep G128",
                            {**cfg, "ORDER": "lockstep", "IDLE_SMS": 4}, None)):
            makers[name] = (lambda st, c=c, g=g: (lambda: streamk.matmul_streamk(
                st.a, st.b, c, out=st.out, programs=g)))
    makers.update({name: variants[name] for name in finalists})
    interleaved(checked_makers(makers, sets, refs, 10, sh, ROWS), bench, sh, ROWS)


def main() -> None:
    which = probe_mode(sys.argv, "swapped_probe", ("pass1", "wide", "ws"))
    bench = EventBench(max_reps=300, target_ms=20.0, warmup_ms=10.0)
    shapes = {"pass1": ((192, 6144, 6144), (192, 4096, 12288), (256, 4096, 8192),
                        (128, 8192, 8192), (160, 6144, 6144)),
              "wide": ((192, 6144, 6144), (160, 6144, 6144), (192, 4096, 12288)),
              "ws": ((192, 6144, 6144), (160, 6144, 6144), (128, 8192, 8192),
                     (192, 4096, 12288))}[which]
    for m, n, k in shapes:
        probe_shape(m, n, k, bench, top=8, which=which)


if __name__ == "__main__":
    run_probe(main, OUT, "swapped.json", ROWS)
