"""Probe (issue 18): stream-K with the m-tile *stacked* for mid-m shapes (192x6144x6144).

A program computes ``STACK`` m-tiles of ``BLOCK_M`` rows against one B tile: each B tile
(TMA) is loaded once into shared memory and feeds ``STACK`` dots, so the whole of a 192-row
problem is one tile row (3 x 64) with no rows wasted on padding (``BLOCK_M`` 256 would
multiply a third of zeros). L2-to-SM traffic per K step is ``STACK * BLOCK_M * BLOCK_K + BLOCK_K
* BLOCK_N`` elements, against ``STACK`` times the B tile when three programs ("columns" order)
share it. The iterations are dealt out as in ``kernel_templates/gemm/streamk.py``: contiguous
ranges, reversed program order, the tile's owner adds the later ranges' partials in range
order (deterministic).

    OUT=DIR python -m scripts.bench.midm_probe [pass1|ws|carry]

Every variant is checked against float64 on two fresh input sets into NaN-poisoned outputs
and 10 repeats for bitwise equality, timed once (EventBench: L2 read flush, two rotated input
sets), and the fastest are then re-timed in 7 interleaved rounds beside cuBLAS and the
stream-K tier's best configurations. Rows go to DIR/midm.json."""

from __future__ import annotations

import itertools
import json
import os
import sys

import torch
import triton
import triton.language as tl
from triton.tools.tensor_descriptor import TensorDescriptor

from kernel_templates.gemm import streamk
from kernel_templates.gemm.inputs import make_inputs
from kernel_templates.gemm.reference import reference_for, rel_error
from kernel_templates.gemm.streamk import _range_of, _wait_flag
from search.kinds.gemm.spec import GemmProblem
from workers.bench import EventBench

OUT = os.environ.get("OUT", "/tmp/midm")
ROWS: list[dict] = []
_BUF: dict[str, torch.Tensor] = {}
_EPOCH = [0]


@triton.jit
def _partial(acc, base, local, TILE: tl.constexpr, IDX: tl.constexpr):
    return acc + tl.load(base + IDX * TILE + local, cache_modifier=".cg")


@triton.jit
def _store_rows(c_ptr, acc, IDX: tl.constexpr, offs_n, M, N, stride_cm,
                BLOCK_M: tl.constexpr):
    offs_m = IDX * BLOCK_M + tl.arange(0, BLOCK_M)
    mask = (offs_m[:, None] < M) & (offs_n[None, :] < N)
    tl.store(c_ptr + offs_m[:, None] * stride_cm + offs_n[None, :],
             acc.to(c_ptr.dtype.element_ty), mask=mask)


@triton.jit(do_not_specialize=["EPOCH"])
def _stacked_kernel(a_desc, b_desc, c_ptr, ws_ptr, flag_ptr, EPOCH, M, N, stride_cm,
                    ITERS_PER_TILE, Q, E,
                    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
                    STACK: tl.constexpr, SPIN: tl.constexpr, LOCKSTEP: tl.constexpr,
                    WS: tl.constexpr):
    TILE: tl.constexpr = BLOCK_M * BLOCK_N
    local = tl.arange(0, BLOCK_M)[:, None] * BLOCK_N + tl.arange(0, BLOCK_N)[None, :]
    if LOCKSTEP:
        v = tl.program_id(0)
    else:
        v = tl.num_programs(0) - 1 - tl.program_id(0)
    start = v * Q + tl.minimum(v, E)
    end = start + Q + (v < E).to(tl.int32)
    first_seg = start // ITERS_PER_TILE
    last_seg = (end - 1) // ITERS_PER_TILE
    for i in range(0, last_seg - first_seg + 1):
        # LOCKSTEP walks the range's segments last first: a range shorter than a tile then
        # reads K in increasing order (the next tile's head, then this tile's tail), so all
        # programs read B rows near the same K at the same time
        if LOCKSTEP:
            seg = last_seg - i
        else:
            seg = first_seg + i
        tile_it0 = seg * ITERS_PER_TILE
        k0 = tl.maximum(start - tile_it0, 0)
        k1 = tl.minimum(end - tile_it0, ITERS_PER_TILE)
        off_n = seg * BLOCK_N
        offs_n = off_n + tl.arange(0, BLOCK_N)
        acc0 = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
        acc1 = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
        acc2 = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
        acc3 = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
        for kk in tl.range(k0, k1, warp_specialize=WS):
            k = kk * BLOCK_K
            b = b_desc.load([k, off_n])
            acc0 = tl.dot(a_desc.load([0, k]), b, acc0)
            if STACK > 1:
                acc1 = tl.dot(a_desc.load([BLOCK_M, k]), b, acc1)
            if STACK > 2:
                acc2 = tl.dot(a_desc.load([2 * BLOCK_M, k]), b, acc2)
            if STACK > 3:
                acc3 = tl.dot(a_desc.load([3 * BLOCK_M, k]), b, acc3)
        if LOCKSTEP:
            publish = k1 < ITERS_PER_TILE
        else:
            publish = k0 > 0
        if publish:
            base = ws_ptr + v * (STACK * TILE)
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
            if LOCKSTEP:
                # the tile's finisher: the earlier ranges' partials in range order
                lo = _range_of(tile_it0, Q, E)
                hi = v - 1
            else:
                # the tile's owner: the later ranges' partials in range order
                lo = v + 1
                hi = _range_of(tile_it0 + ITERS_PER_TILE - 1, Q, E)
                if k1 == ITERS_PER_TILE:
                    hi = v
            if k1 - k0 < ITERS_PER_TILE:
                for q in range(lo, hi + 1):
                    failed += (~_wait_flag(flag_ptr + q, EPOCH, SPIN)).to(tl.int32)
                    base = ws_ptr + q * (STACK * TILE)
                    acc0 = _partial(acc0, base, local, TILE, 0)
                    if STACK > 1:
                        acc1 = _partial(acc1, base, local, TILE, 1)
                    if STACK > 2:
                        acc2 = _partial(acc2, base, local, TILE, 2)
                    if STACK > 3:
                        acc3 = _partial(acc3, base, local, TILE, 3)
            ok = failed == 0
            _store_rows(c_ptr, tl.where(ok, acc0, float("nan")), 0, offs_n, M, N, stride_cm,
                        BLOCK_M)
            if STACK > 1:
                _store_rows(c_ptr, tl.where(ok, acc1, float("nan")), 1, offs_n, M, N,
                            stride_cm, BLOCK_M)
            if STACK > 2:
                _store_rows(c_ptr, tl.where(ok, acc2, float("nan")), 2, offs_n, M, N,
                            stride_cm, BLOCK_M)
            if STACK > 3:
                _store_rows(c_ptr, tl.where(ok, acc3, float("nan")), 3, offs_n, M, N,
                            stride_cm, BLOCK_M)


def stacked(a: torch.Tensor, b: torch.Tensor, out: torch.Tensor, cfg: dict) -> None:
    """``out = a @ b`` (bf16, row-major, one tile row: ``m <= STACK * BLOCK_M``)."""
    m, k = a.shape
    n = b.shape[1]
    bm, bn, bk, stack = cfg["BLOCK_M"], cfg["BLOCK_N"], cfg["BLOCK_K"], cfg["STACK"]
    if m > stack * bm:
        raise ValueError(f"m={m} exceeds STACK*BLOCK_M={stack * bm}")
    per_tile = triton.cdiv(k, bk)
    total = triton.cdiv(n, bn) * per_tile
    g = min(cfg["G"], total)
    q, e = divmod(total, g)
    need = g * stack * bm * bn
    if "ws" not in _BUF or _BUF["ws"].numel() < need:
        _BUF["ws"] = torch.empty(need, dtype=torch.float32, device=a.device)
    if "flags" not in _BUF or _BUF["flags"].numel() < g:
        _BUF["flags"] = torch.zeros(max(g, 1024), dtype=torch.int32, device=a.device)
        _EPOCH[0] = 0
    _EPOCH[0] += 1
    da = TensorDescriptor(a, [m, k], [a.stride(0), 1], [bm, bk])
    db = TensorDescriptor(b, [k, n], [b.stride(0), 1], [bk, bn])
    _stacked_kernel[(g,)](da, db, out, _BUF["ws"], _BUF["flags"], _EPOCH[0], m, n,
                          out.stride(0), per_tile, q, e, BLOCK_M=bm, BLOCK_N=bn,
                          BLOCK_K=bk, STACK=stack, SPIN=streamk.SPIN_LIMIT,
                          LOCKSTEP=bool(cfg.get("LOCKSTEP", 0)), WS=bool(cfg.get("WS", 0)),
                          num_warps=cfg["num_warps"], num_stages=cfg["num_stages"])


def _name(cfg: dict) -> str:
    return (f"stacked {cfg['STACK']}x{cfg['BLOCK_M']}x{cfg['BLOCK_N']}x{cfg['BLOCK_K']} "
            f"w{cfg['num_warps']} s{cfg['num_stages']} G{cfg['G']}"
            + (" lockstep" if cfg.get("LOCKSTEP") else "") + (" ws" if cfg.get("WS") else ""))


def _variants(m: int, n: int, sms: int, which: str) -> list[dict]:
    out = []
    stack = triton.cdiv(m, 64)
    if which == "carry":
        for s_ in (5, 6):
            if s_ * (stack * 64 * 64 + 64 * 64) * 2 > 220 * 1024:
                continue
            base = dict(BLOCK_M=64, BLOCK_N=64, BLOCK_K=64, STACK=stack, num_warps=4,
                        num_stages=s_)
            out += [{**base, "G": triton.cdiv(n, 64)}, {**base, "G": 128, "LOCKSTEP": 1},
                    {**base, "G": sms, "LOCKSTEP": 1}]
        return out
    if which == "ws":
        for s_, ws in itertools.product((5, 6), (0, 1)):
            base = dict(BLOCK_M=64, BLOCK_N=64, BLOCK_K=64, STACK=stack, num_warps=4,
                        num_stages=s_, WS=ws)
            out += [{**base, "G": triton.cdiv(n, 64)}, {**base, "G": 128, "LOCKSTEP": 1}]
        out.append(dict(BLOCK_M=64, BLOCK_N=128, BLOCK_K=64, STACK=stack, num_warps=8,
                        num_stages=4, WS=1, G=128, LOCKSTEP=1))
        return out
    for bn, bk, w, s in itertools.product((64, 128), (64,), (4, 8), (4, 5, 6)):
        smem = s * (stack * 64 * bk + bk * bn) * 2
        if smem > 220 * 1024 or stack > 4 or (bn == 64 and w == 8):
            continue
        base = dict(BLOCK_M=64, BLOCK_N=bn, BLOCK_K=bk, STACK=stack, num_warps=w,
                    num_stages=s)
        out.append({**base, "G": triton.cdiv(n, bn)})
        for g in (sms, sms - 4):
            out += [{**base, "G": g, "LOCKSTEP": 1}, {**base, "G": g}]
    return out


def _check(make, sets, refs, row) -> bool:
    errs, bad = [], 0
    for st, ref in zip(sets, refs, strict=True):
        st.out.fill_(float("nan"))
        make(st)()
        torch.cuda.synchronize()
        errs.append(rel_error(st.out, ref))
    first = sets[0].out.clone()
    for _ in range(10):
        sets[0].out.fill_(float("nan"))
        make(sets[0])()
        bad += int(not torch.equal(sets[0].out, first))
    row.update(err=max(errs), repeat_mismatches_of_10=bad)
    return max(errs) < 2e-2 and bad == 0


def probe_shape(m: int, n: int, k: int, top: int, bench: EventBench, which: str) -> None:
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    p = GemmProblem(m, n, k)
    sh = f"{m}x{n}x{k}"
    sets = [make_inputs(p, "cuda", seed=1200 + i) for i in range(2)]
    refs = [reference_for(st) for st in sets]
    pass1 = []
    for cfg in _variants(m, n, sms, which):
        name = _name(cfg)

        def make(st, c=cfg):
            return lambda: stacked(st.a, st.b, st.out, c)
        row = {"shape": sh, "name": name, "pass": 1}
        try:
            if _check(make, sets, refs, row):
                row["us"] = bench([make(st) for st in sets]).median_us
                pass1.append((row["us"], name, make))
        except Exception as exc:  # noqa: BLE001
            row["error"] = repr(exc)[:200]
        ROWS.append(row)
        print(json.dumps(row), flush=True)
    pass1.sort(key=lambda t: t[0])
    makers = {"cublas": lambda st: (lambda: torch.matmul(st.a, st.b, out=st.out))}
    tier = [({"BLOCK_M": 64, "BLOCK_N": 128, "BLOCK_K": 64, "GROUP_M": 1, "num_warps": 4,
              "num_stages": 4, "ORDER": "columns"}, None),
            ({"BLOCK_M": 256, "BLOCK_N": 64, "BLOCK_K": 64, "GROUP_M": 1, "num_warps": 4,
              "num_stages": 4}, 128),
            ({"BLOCK_M": 256, "BLOCK_N": 128, "BLOCK_K": 64, "GROUP_M": 1, "num_warps": 8,
              "num_stages": 4}, 128),
            ({"BLOCK_M": 256, "BLOCK_N": 64, "BLOCK_K": 64, "GROUP_M": 1, "num_warps": 4,
              "num_stages": 4}, None)]
    for cfg, g in tier:
        makers[f"streamk tier G{g or sms} " + json.dumps(cfg)] = (
            lambda st, c=cfg, g=g: (lambda: streamk.matmul_streamk(st.a, st.b, c, out=st.out,
                                                                   programs=g)))
    for _, name, make in pass1[:top]:
        makers[name] = make
    calls = {}
    for name, make in makers.items():
        row = {"shape": sh, "name": "check " + name}
        try:
            if _check(make, sets, refs, row):
                calls[name] = [make(st) for st in sets]
        except Exception as exc:  # noqa: BLE001
            row["error"] = repr(exc)[:200]
        ROWS.append(row)
    per: dict[str, list[float]] = {name: [] for name in calls}
    for _ in range(7):
        for name, fns in calls.items():
            per[name].append(bench(fns).median_us)
    for name, us in per.items():
        s = sorted(us)
        ROWS.append({"shape": sh, "name": name, "us": s[3], "min_us": s[0], "max_us": s[-1],
                     "pass": 2})
        print(f"{sh:>16} {s[3]:8.2f} ({s[0]:.2f}-{s[-1]:.2f}) {name}", flush=True)


def main() -> None:
    os.makedirs(OUT, exist_ok=True)
    print(torch.cuda.get_device_name(), torch.__version__, triton.__version__, flush=True)
    which = sys.argv[1] if len(sys.argv) > 1 else "pass1"
    shapes = [(192, 6144, 6144)]
    if which == "carry":
        shapes = [(128, 8192, 8192), (256, 4096, 8192), (192, 4096, 12288), (192, 8192, 4096)]
    bench = EventBench(max_reps=300, target_ms=20.0, warmup_ms=10.0)
    for m, n, k in shapes:
        probe_shape(m, n, k, top=6, bench=bench, which=which)


if __name__ == "__main__":
    try:
        main()
    finally:
        with open(os.path.join(OUT, "midm.json"), "w") as f:
            json.dump(ROWS, f, indent=1)
