"""Probe of the hard-shape kernels (issue 18) on a GPU: the pieces of the 511x1024x4097 repair
(copies, the split plan, cuBLAS on views, Triton on the copies) and the long-K skinny kernel
(read ceiling, modes, tiles, where its time goes), timed with the worker's ``EventBench`` (read
flush, rotated input sets), each kernel checked against the float64 reference first.

    OUT=DIR python -m scripts.bench.hard_probe [u] [s] [s2] [s3] [s4] [s5] [s6] [s8] [s9] [s10] [r]

(no argument: ``u`` and ``s``). Writes ``$OUT/probe.json`` and prints a table. The numbers of
docs/benchmarks/gemm_hard_h100_2026-11-25.md come from it, and ``s6`` (the barrier's two
counting schemes and the tagged mode's two store widths, interleaved) those of
docs/benchmarks/gemm_longk_h100_2026-11-27.md; ``s8`` (the split layout's grid on
32x512x98304) the sweep in docs/benchmarks/gemm_even_deal_h100_2026-11-27.md, whose ``s7`` is
in commit 454655b only; ``s9`` the swapped dot (``SWAP``) on 32x512x98304, ``s10`` its 32x64
tile deeper."""

from __future__ import annotations

import itertools
import json
import os
import sys
import traceback

import torch
import triton
import triton.language as tl

from kernel_templates.gemm import repair, skinny
from kernel_templates.gemm.inputs import make_inputs
from kernel_templates.gemm.reference import reference_for, rel_error
from kernel_templates.gemm.triton import matmul as tiled
from scripts.bench.checked import checked_makers, fastest, interleaved
from search.kinds.gemm import repair_space, skinny_space
from search.kinds.gemm.alignment import RepairPlan
from search.kinds.gemm.spec import GemmProblem
from search.limits import DeviceLimits
from workers.bench import EventBench

OUT = os.environ.get("OUT", "/tmp/probe")
os.makedirs(OUT, exist_ok=True)
ROWS: list[dict] = []
BENCH = EventBench(max_reps=300, target_ms=20.0, warmup_ms=10.0)
ONLY = set(sys.argv[1:])


def record(shape: str, name: str, sets, make, check: bool = True, refs=None) -> None:
    row = {"shape": shape, "name": name}
    try:
        calls = [make(s) for s in sets]
        if check:
            s = sets[0]
            s.out.fill_(float("nan"))
            calls[0]()
            torch.cuda.synchronize()
            row["err"] = rel_error(s.out, refs[0])
            if not row["err"] < 2e-2:
                raise RuntimeError(f"wrong: rel_error {row['err']}")
        t = BENCH(calls)
        row.update(us=t.median_us, p20=t.p20_us, p80=t.p80_us, reps=t.reps)
    except Exception as exc:  # noqa: BLE001
        row["error"] = repr(exc)[:400]
        traceback.print_exc(limit=2)
    ROWS.append(row)
    print(json.dumps(row), flush=True)


def _cublas(s):
    return lambda: torch.matmul(s.a, s.b, out=s.out)


def _shape(p: GemmProblem, seed: int, n_sets: int = 2):
    """``(label, input sets, references)`` of ``p``, and cuBLAS's row for it."""
    sh = f"{p.m}x{p.n}x{p.k}"
    sets = [make_inputs(p, "cuda", seed=seed + i) for i in range(n_sets)]
    refs = [reference_for(s) for s in sets]
    record(sh, "cublas", sets, _cublas, refs=refs)
    return sh, sets, refs


def _cfg(bm, bn, bk, sk, w, st, mode, tma) -> dict:
    return dict(BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk, SPLIT_K=sk, num_warps=w, num_stages=st,
                MODE=mode, TMA=tma)


def _maker(cfg: dict):
    return lambda s: (lambda: skinny.matmul_skinny(s.a, s.b, cfg, out=s.out))


def _skinny(sh, name, sets, refs, cfg, check: bool = True) -> None:
    record(sh, name, sets, _maker(cfg), check=check, refs=refs)


def cublas_inner(a_in, b_in, c):
    return lambda: torch.matmul(a_in, b_in, out=c)


def tiled_inner(cfg):
    return lambda a_in, b_in, c: (lambda: tiled(a_in, b_in, cfg, out=c))


# -- 511x1024x4097 ------------------------------------------------------------------------------
def unaligned() -> None:
    p = GemmProblem(511, 1024, 4097)
    sh, sets, refs = _shape(p, 100, n_sets=4)
    for b_layout, padded in (("row", True), ("kmajor", True), ("keep", False)):
        plan = RepairPlan.of(p, b_layout, padded)
        record(sh, f"repaired {'padded' if padded else 'views'} {b_layout}", sets,
               lambda s, plan=plan: repair.RepairedCall(plan, s.a, s.b, s.out, cublas_inner),
               refs=refs)

        def copy_only(s, plan=plan):
            scratch = repair.allocate(plan, s.a.device, s.a.dtype, s.out.dtype)
            return lambda: repair.repair(plan, s.a, s.b, scratch)
        record(sh, f"copy only {'padded' if padded else 'views'} {b_layout}", sets, copy_only,
               check=False)
    pa = GemmProblem(511, 1024, 4096)
    asets = [make_inputs(pa, "cuda", seed=200 + i) for i in range(4)]
    record("511x1024x4096", "cublas aligned", asets, _cublas,
           refs=[reference_for(s) for s in asets])

    k_al = 4096

    def split(s):
        buf = torch.empty((511, 4160), dtype=s.a.dtype, device="cuda")

        def call():
            repair.split_launch(s.a, s.b, buf, s.out, k_al)
            s.out.addmm_(buf[:, :k_al], s.b[:k_al])
        return call

    def split_copy(s):
        buf = torch.empty((511, 4160), dtype=s.a.dtype, device="cuda")
        return lambda: repair.split_launch(s.a, s.b, buf, s.out, k_al)

    def split_gemm(s):
        buf = torch.randn((511, 4160), device="cuda").to(s.a.dtype)
        return lambda: s.out.addmm_(buf[:, :k_al], s.b[:k_al])

    def views_gemm(s):
        buf = torch.randn((511, 4160), device="cuda").to(s.a.dtype)
        return lambda: torch.matmul(buf[:, :4097], s.b, out=s.out)

    record(sh, "split total (copy+tail, addmm)", sets, split, refs=refs)
    record(sh, "split copy+tail only", sets, split_copy, check=False)
    record(sh, "split addmm only", sets, split_gemm, check=False)
    record(sh, "views cublas only (k=4097, lda 4160)", sets, views_gemm, check=False)
    base = (repair.COPY_BLOCK, repair._COPY_WARPS)
    for br, bc, w in ((32, 256, 4), (16, 512, 4), (64, 256, 8), (128, 128, 8), (32, 128, 4),
                      (16, 256, 4), (8, 512, 4), (32, 512, 8)):
        repair.COPY_BLOCK, repair._COPY_WARPS = (br, bc), w
        record(sh, f"split total copy {br}x{bc} w{w}", sets, split, refs=refs)
        record(sh, f"split copy+tail only {br}x{bc} w{w}", sets, split_copy, check=False)
    repair.COPY_BLOCK, repair._COPY_WARPS = base
    plan = RepairPlan.of(p, "keep", False)
    cfgs = []
    for (bm, bn, bk, w, st), sk in itertools.product(
            ((128, 128, 64, 4, 4), (128, 128, 64, 8, 4), (64, 128, 64, 4, 4), (128, 64, 64, 4, 4),
             (128, 256, 64, 8, 3), (64, 64, 64, 4, 4)), (2, 4, 8)):
        cfgs.append(dict(BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk, GROUP_M=8, SPLIT_K=sk,
                         num_warps=w, num_stages=st))
    for cfg in cfgs:
        record(sh, f"triton_repair keep {cfg}", sets,
               lambda s, cfg=cfg: repair.RepairedCall(plan, s.a, s.b, s.out, tiled_inner(cfg)),
               refs=refs)
    for seed in repair_space.seeds(p, "tiles")[:6]:
        pl = RepairPlan.of(p, seed["B_LAYOUT"], False)
        cfg = repair_space.inner_config(seed)
        record(sh, f"seed {seed}", sets,
               lambda s, cfg=cfg, pl=pl: repair.RepairedCall(pl, s.a, s.b, s.out,
                                                            tiled_inner(cfg)), refs=refs)


# -- long K ---------------------------------------------------------------------------------------
@triton.jit
def _read_kernel(x, out, n, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    nprog = tl.num_programs(0)
    acc = tl.zeros((BLOCK,), dtype=tl.float32)
    for start in range(pid * BLOCK, n, nprog * BLOCK):
        offs = start + tl.arange(0, BLOCK)
        acc += tl.load(x + offs, mask=offs < n, other=0.0).to(tl.float32)
    tl.store(out + pid, tl.sum(acc))


def long_k() -> None:
    sink = torch.empty(1 << 16, device="cuda")
    nothing = torch.empty(1, device="cuda")
    record("-", "empty kernel", [None], lambda s: (lambda: nothing.add_(1.0)), check=False)
    for p in (GemmProblem(128, 128, 262144), GemmProblem(32, 512, 98304)):
        sh, sets, refs = _shape(p, 300)
        numel = p.m * p.k + p.k * p.n
        flats = [torch.randn(numel, device="cuda").to(torch.bfloat16) for _ in range(2)]
        for grid_per_sm, block in ((2, 4096), (4, 4096), (8, 2048), (1, 8192)):
            record(sh, f"read ceiling grid {grid_per_sm}/SM block {block}", flats,
                   lambda x, g=grid_per_sm, b=block: (lambda: _read_kernel[(132 * g,)](
                       x, sink, x.numel(), BLOCK=b, num_warps=8)), check=False)
        cfgs = [dict(c) for c in skinny_space.seeds(p, 132)]
        extra = []
        if p.m == 128:
            for bm, bn, bk, sk, w, st in ((64, 64, 128, 33, 4, 4), (64, 64, 128, 33, 8, 4),
                                          (64, 64, 256, 33, 4, 3), (64, 64, 64, 33, 4, 6),
                                          (128, 128, 64, 132, 8, 4), (128, 128, 64, 132, 8, 6),
                                          (128, 128, 128, 132, 8, 3), (64, 128, 128, 66, 4, 4),
                                          (64, 128, 128, 66, 8, 4), (128, 64, 128, 66, 8, 4),
                                          (128, 128, 64, 132, 4, 4)):
                extra.append((bm, bn, bk, sk, w, st))
        else:
            for bm, bn, bk, sk, w, st in ((32, 128, 128, 33, 4, 4), (32, 256, 128, 66, 4, 4),
                                          (32, 256, 128, 66, 8, 4), (32, 512, 64, 132, 8, 4),
                                          (32, 512, 64, 132, 8, 6), (32, 512, 128, 132, 8, 3),
                                          (32, 64, 128, 16, 4, 4), (32, 256, 64, 66, 4, 6),
                                          (32, 128, 256, 33, 4, 3)):
                extra.append((bm, bn, bk, sk, w, st))
        for shape in extra:
            for tma in (0, 1):
                cfgs.append(_cfg(*shape, "barrier", tma))
        seen = []
        for cfg in cfgs:
            if cfg in seen:
                continue
            seen.append(cfg)
            _skinny(sh, f"skinny {cfg}", sets, refs, cfg)


def long_k2() -> None:
    """The barrier with 2-3 programs per SM (the grid's residency limit raised)."""
    real_sms = skinny._sm_count
    for p, base in ((GemmProblem(128, 128, 262144),
                     [(64, 64, 128, 33, 4, 5, 1), (64, 64, 128, 33, 4, 4, 1),
                      (64, 64, 128, 66, 4, 3, 2), (64, 64, 64, 66, 4, 6, 2),
                      (64, 64, 64, 99, 4, 4, 3), (64, 64, 128, 66, 4, 2, 2),
                      (64, 128, 64, 66, 4, 5, 1), (64, 128, 64, 132, 4, 3, 2)]),
                    (GemmProblem(32, 512, 98304),
                     [(32, 64, 128, 16, 4, 4, 1), (32, 64, 256, 16, 4, 3, 1),
                      (32, 64, 128, 33, 4, 4, 2), (32, 64, 64, 33, 4, 8, 2),
                      (32, 64, 256, 33, 4, 2, 2), (32, 64, 64, 49, 4, 5, 3),
                      (32, 128, 128, 33, 4, 4, 1), (32, 128, 128, 66, 4, 3, 2)])):
        sh, sets, refs = _shape(p, 400)
        for *shape, per_sm in base:
            for tma in (0, 1):
                cfg = _cfg(*shape, "barrier", tma)
                skinny._sm_count = lambda d, n=per_sm: n * real_sms(d)
                _skinny(sh, f"skinny per_sm={per_sm} {cfg}", sets, refs, cfg)
        skinny._sm_count = real_sms


class _NoLaunch:
    def __getitem__(self, grid):
        return lambda *args, **kwargs: None


def long_k3() -> None:
    """Where the skinny kernel's time goes: the stream alone (two-launch mode without its
    second launch) against the whole barrier kernel, at K and 2K (the slope)."""
    sink = torch.empty(1 << 16, device="cuda")
    reduce_kernel = skinny._reduce_kernel
    cases = {(128, 128): [(64, 64, 128, 33, 4, 5, 1), (64, 64, 128, 33, 4, 5, 0),
                          (64, 64, 64, 33, 4, 8, 1), (64, 64, 128, 33, 2, 5, 1),
                          (64, 64, 256, 33, 4, 3, 1)],
             (32, 512): [(32, 64, 256, 16, 4, 3, 1), (32, 64, 256, 16, 4, 3, 0),
                         (32, 64, 128, 16, 4, 6, 1), (32, 64, 128, 16, 2, 4, 1),
                         (32, 128, 128, 33, 4, 5, 1)]}
    for (m, n), cfgs in cases.items():
        for k in ((262144, 524288) if m == 128 else (98304, 196608)):
            sh, sets, refs = _shape(GemmProblem(m, n, k), 500)
            flats = [torch.randn(m * k + k * n, device="cuda").to(torch.bfloat16)
                     for _ in range(2)]
            record(sh, "read ceiling grid 8/SM block 2048", flats,
                   lambda x: (lambda: _read_kernel[(132 * 8,)](x, sink, x.numel(), BLOCK=2048,
                                                              num_warps=8)), check=False)
            for *shape, tma in cfgs:
                cfg = _cfg(*shape, "barrier", tma)
                _skinny(sh, f"skinny {cfg}", sets, refs, cfg)
                two = {**cfg, "MODE": "two_launch"}
                skinny._reduce_kernel = _NoLaunch()
                _skinny(sh, f"stream only {two}", sets, refs, two, check=False)
                skinny._reduce_kernel = reduce_kernel


def long_k4() -> None:
    """The tagged mode (no barrier) against the barrier, same configs; bitwise against
    two_launch."""
    cases = {(128, 128, 262144): [(64, 64, 128, 33, 4, 5, 1), (64, 64, 128, 33, 4, 5, 0),
                                  (64, 64, 128, 32, 4, 5, 0), (64, 128, 64, 66, 4, 6, 0)],
             (32, 512, 98304): [(32, 64, 256, 16, 4, 3, 1), (32, 64, 128, 16, 4, 4, 0),
                                (32, 64, 128, 16, 2, 4, 1), (32, 128, 64, 33, 4, 6, 0),
                                (32, 64, 128, 16, 4, 5, 0)]}
    for (m, n, k), cfgs in cases.items():
        sh, sets, refs = _shape(GemmProblem(m, n, k), 600)
        for bm, bn, bk, sk, w, st, tma in cfgs:
            outs = {}
            for mode in ("tagged", "barrier", "two_launch"):
                cfg = _cfg(bm, bn, bk, sk, w, st, mode, tma)
                _skinny(sh, f"skinny {cfg}", sets, refs, cfg)
                s0 = sets[0]
                s0.out.fill_(float("nan"))
                skinny.matmul_skinny(s0.a, s0.b, cfg, out=s0.out)
                outs[mode] = s0.out.clone()
            same = {mo: torch.equal(outs["two_launch"], o) for mo, o in outs.items()}
            bad = 0
            for _ in range(50):  # back to back: a lost or stale partial would show
                s0.out.fill_(float("nan"))
                skinny.matmul_skinny(s0.a, s0.b, {**cfg, "MODE": "tagged"}, out=s0.out)
                bad += int(not torch.equal(s0.out, outs["tagged"]))
            ROWS.append({"shape": sh, "name": f"bitwise {bm}x{bn}x{bk} sk{sk}",
                         "equal_to_two_launch": same, "tagged_repeat_mismatches_of_50": bad})
            print(ROWS[-1], flush=True)


def long_k5() -> None:
    """The tagged reduction over warps, stages and loads, beside the barrier."""
    cases = {(32, 512, 98304): [(32, 64, 128, 16, 2, 4, 1), (32, 64, 128, 16, 2, 4, 0),
                                (32, 64, 128, 16, 2, 6, 1), (32, 64, 256, 16, 2, 3, 1),
                                (32, 64, 64, 16, 2, 8, 1), (32, 64, 128, 16, 4, 4, 1)],
             (128, 128, 262144): [(64, 64, 128, 33, 4, 5, 1), (64, 64, 128, 33, 4, 4, 0)]}
    for (m, n, k), cfgs in cases.items():
        sh, sets, refs = _shape(GemmProblem(m, n, k), 700)
        for *shape, tma in cfgs:
            for mode in ("tagged", "barrier"):
                cfg = _cfg(*shape, mode, tma)
                _skinny(sh, f"skinny {cfg}", sets, refs, cfg)


def _flagged(cfg: dict, growing: bool, pairs: bool):
    """A skinny call factory under the module's reduction switches (read at each launch)."""
    def make(s):
        def call():
            skinny.GROWING_BARRIER, skinny.TAGGED_PAIRS = growing, pairs
            try:
                skinny.matmul_skinny(s.a, s.b, cfg, out=s.out)
            finally:
                skinny.GROWING_BARRIER, skinny.TAGGED_PAIRS = True, True
        return call
    return make


def long_k6(rounds: int = 7) -> None:
    """The barrier without its departure step (an only-growing arrival count) and the tagged
    mode with paired 16-byte stores, each beside the mode it replaces, interleaved round by
    round (one median per variant per round), after a bitwise and a 50-call repeat check."""
    cases = {(128, 128, 262144): [(64, 64, 128, 33, 4, 5, 1), (64, 64, 128, 33, 4, 4, 0)],
             (32, 512, 98304): [(32, 64, 128, 16, 2, 4, 1), (32, 64, 128, 16, 2, 4, 0),
                                (32, 128, 128, 33, 4, 4, 0)]}
    variants = (("barrier", False, True, "barrier (depart)"),
                ("barrier", True, True, "barrier (growing)"),
                ("tagged", True, False, "tagged (single)"),
                ("tagged", True, True, "tagged (pairs)"))
    for (m, n, k), cfgs in cases.items():
        p = GemmProblem(m, n, k)
        sh = f"{m}x{n}x{k}"
        sets = [make_inputs(p, "cuda", seed=800 + i) for i in range(2)]
        refs = [reference_for(st) for st in sets]
        calls = {"cublas": [_cublas(st) for st in sets]}
        s0 = sets[0]
        for *shape, tma in cfgs:
            ref_out = None
            for mode, growing, pairs, label in variants:
                cfg = _cfg(*shape, mode, tma)
                make = _flagged(cfg, growing, pairs)
                name = f"{label} {shape} tma{tma}"
                row = {"shape": sh, "name": "check " + name}
                try:
                    s0.out.fill_(float("nan"))
                    make(s0)()
                    torch.cuda.synchronize()
                    row["err"] = rel_error(s0.out, refs[0])
                    first = s0.out.clone()
                    bad = 0
                    for _ in range(50):
                        s0.out.fill_(float("nan"))
                        make(s0)()
                        bad += int(not torch.equal(s0.out, first))
                    row["repeat_mismatches_of_50"] = bad
                    if mode == "barrier":
                        row["bitwise_as_depart"] = (ref_out is None
                                                    or bool(torch.equal(first, ref_out)))
                        ref_out = first if ref_out is None else ref_out
                    if row["err"] < 2e-2 and bad == 0:
                        calls[name] = [make(st) for st in sets]
                except Exception as exc:  # noqa: BLE001
                    row["error"] = repr(exc)[:400]
                    traceback.print_exc(limit=2)
                ROWS.append(row)
                print(json.dumps(row), flush=True)
        interleaved(calls, BENCH, sh, ROWS, rounds, prefix="interleaved ")


def long_k8(rounds: int = 7, finalists: int = 6) -> None:
    """The split layout's K step, depth, warps and reduction on 32x512x98304: every feasible
    configuration of its best tile and split timed once (after a check), then the fastest few
    interleaved round by round beside cuBLAS."""
    cases = {(32, 512, 98304): (32, 64, 16)}
    limits = DeviceLimits(sm_count=132, smem_per_block=skinny_space.SEED_SMEM)
    for (m, n, k), (bm, bn, sk) in cases.items():
        p = GemmProblem(m, n, k)
        sh, sets, refs = _shape(p, 1000)
        timed = []
        for bk, st, w, mode in itertools.product((64, 128, 256, 512), (2, 3, 4, 5, 6),
                                                 (1, 2, 4), ("barrier", "tagged")):
            cfg = _cfg(bm, bn, bk, sk, w, st, mode, 1)
            if (w == 1 and bm * bn > 2048) or skinny_space.violations(p, cfg, limits):
                continue
            _skinny(sh, f"skinny {cfg}", sets, refs, cfg)
            if "us" in ROWS[-1]:
                timed.append((ROWS[-1]["us"], cfg))
        best = [cfg for _, cfg in sorted(timed, key=lambda t: t[0])[:finalists]]
        calls = {"cublas": [_cublas(st) for st in sets]}
        for cfg in best:
            calls[json.dumps(cfg)] = [
                (lambda st=st, cfg=cfg: skinny.matmul_skinny(st.a, st.b, cfg, out=st.out))
                for st in sets]
        interleaved(calls, BENCH, sh, ROWS, rounds, prefix="interleaved ")


#: s9's tiles (columns, split) and K steps (BLOCK_K, stages); s10 goes deeper on the first
S9 = (((64, 16), (128, 33), (256, 66)), ((64, 6), (64, 8), (128, 4), (128, 5), (256, 3)))
S10 = (((64, 16),), ((64, 10), (64, 12), (128, 6), (128, 7), (128, 8), (256, 2), (256, 4),
                    (512, 2)))


def long_k9(rounds: int = 7, finalists: int = 6, grid: tuple = S9) -> None:
    """The skinny TMA kernel computing C^T = B^T A^T (``SWAP``: the B tile is the
    dot's left operand, so a 32-row tile runs on wgmma) on 32x512x98304: tiles, K steps and
    depths (``grid``) timed once after a check, then the fastest interleaved round by round
    beside the unswapped best two and cuBLAS."""
    p = GemmProblem(32, 512, 98304)
    sh, sets, refs = _shape(p, 1100)
    makers = {}
    for bn, sk in grid[0]:
        for bk, st in grid[1]:
            for w, mode in itertools.product((4, 8), ("barrier", "tagged")):
                if (bn + 32) * bk * 2 * st > 220 * 1024 or (w == 8 and bn == 64):
                    continue
                cfg = {**_cfg(32, bn, bk, sk, w, st, mode, 1), "SWAP": 1}
                makers["swapped " + json.dumps(cfg)] = _maker(cfg)
    calls = checked_makers(makers, sets, refs, 10, sh, ROWS)
    best = fastest(calls, BENCH, sh, ROWS, finalists)
    final = {"cublas": _cublas}
    for cfg in (_cfg(32, 64, 256, 16, 2, 3, "barrier", 1),
                _cfg(32, 64, 128, 16, 2, 4, "tagged", 1)):
        final["unswapped " + json.dumps(cfg)] = _maker(cfg)
    final.update({name: makers[name] for name in best})
    interleaved(checked_makers(final, sets, refs, 10, sh, ROWS), BENCH, sh, ROWS, rounds,
                prefix="interleaved ")


def read_ceiling_mid() -> None:
    """What reading the operands of the mid-m shapes alone takes (the floor under any kernel
    of them that reads A and B once), beside cuBLAS on the same shapes."""
    sink = torch.empty(1 << 16, device="cuda")
    for p in (GemmProblem(192, 6144, 6144), GemmProblem(320, 4096, 12288)):
        sh, sets, refs = _shape(p, 950)
        numel = p.m * p.k + p.k * p.n
        flats = [torch.randn(numel, device="cuda").to(torch.bfloat16) for _ in range(2)]
        for grid_per_sm, block, warps in ((2, 4096, 8), (4, 4096, 8), (8, 2048, 4), (1, 8192, 8),
                                          (4, 8192, 8), (16, 2048, 4)):
            record(sh, f"read A and B: grid {grid_per_sm}/SM block {block} warps {warps}", flats,
                   lambda x, g=grid_per_sm, b=block, w=warps: (lambda: _read_kernel[(132 * g,)](
                       x, sink, x.numel(), BLOCK=b, num_warps=w)), check=False)


if __name__ == "__main__":
    print(torch.cuda.get_device_name(), torch.__version__, triton.__version__, flush=True)
    try:
        if not ONLY or "u" in ONLY:
            unaligned()
        if not ONLY or "s" in ONLY:
            long_k()
        if "s2" in ONLY:
            long_k2()
        if "s3" in ONLY:
            long_k3()
        if "s4" in ONLY:
            long_k4()
        if "s5" in ONLY:
            long_k5()
        if "s6" in ONLY:
            long_k6()
        if "s8" in ONLY:
            long_k8()
        if "s9" in ONLY:
            long_k9()
        if "s10" in ONLY:
            long_k9(grid=S10)
        if "r" in ONLY:
            read_ceiling_mid()
    finally:
        with open(os.path.join(OUT, "probe.json"), "w") as f:
            json.dump(ROWS, f, indent=1)
        for r in ROWS:
            us = f"{r['us']:8.2f}" if "us" in r else "   ERROR"
            print(f"{r['shape']:>15} {us} {r.get('err', 0) or 0:.1e} {r['name'][:110]}"
                  + (f" {r['error'][:120]}" if "error" in r else ""))
