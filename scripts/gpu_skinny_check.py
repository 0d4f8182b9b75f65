#!/usr/bin/env python3
"""GPU check of the skinny split-K kernel (``kernel_templates/gemm/skinny.py``) on the two
memory-bound shapes, side by side with cuBLAS and ``gemm.py``'s best configurations.

For each shape and candidate:

1. Correctness (bf16): two fresh input sets, each product written into a NaN-poisoned output
   twice in a row (back-to-back launches on one stream) and compared with a float64 reference;
   the deterministic modes (``barrier``, ``two_launch``) must give bitwise-equal results on the
   two calls. The skinny counters must be zero afterwards. A failing candidate is recorded and
   not timed; an exception in one candidate never stops the run.
2. Timing: ``workers.bench.EventBench`` with the clean-L2 read flush (the project's method) and
   with the write flush (``triton.testing.do_bench``'s), 4 rotating input sets.

Prints a table (us, and cuBLAS/candidate ratios: > 1 is faster than cuBLAS) and writes
``DIR/skinny_check.json``. The whole run stays under ``--budget-s`` (default 85 s): past it,
remaining timings are skipped and reported as such.

    PYTHONPATH=. python3 scripts/gpu_skinny_check.py --out DIR
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from kernel_templates.gemm import skinny
from kernel_templates.gemm import triton as gemm
from kernel_templates.gemm.inputs import make_inputs
from kernel_templates.gemm.reference import reference_matmul, rel_error
from search.types import GemmProblem
from workers.bench import EventBench

SHAPES: dict[str, tuple[int, int, int]] = {
    "16x4096x4096": (16, 4096, 4096),
    "64x64x65536": (64, 64, 65536),
}
TOL = 1e-2  # bf16 (kernel_templates.gemm.reference.BASE_TOLERANCE)
N_SETS = 4


def sk(bm: int, bn: int, bk: int, split: int, w: int, s: int, mode: str = "barrier",
       tma: int = 1) -> dict[str, Any]:
    return dict(BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk, SPLIT_K=split, num_warps=w, num_stages=s,
                MODE=mode, TMA=tma)


def gm(bm: int, bn: int, bk: int, split: int, w: int, s: int) -> dict[str, int]:
    return dict(BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk, GROUP_M=1, SPLIT_K=split, num_warps=w,
                num_stages=s)


# gemm.py: the measured best of docs/notes/kernels.md and the seeds of search/spaces/triton_gemm.py
GEMM_CONFIGS: dict[str, list[dict[str, int]]] = {
    "16x4096x4096": [gm(16, 32, 256, 1, 4, 4), gm(16, 64, 128, 2, 4, 4), gm(16, 64, 256, 2, 4, 3)],
    "64x64x65536": [gm(64, 32, 128, 64, 4, 5), gm(64, 64, 128, 64, 4, 4),
                    gm(64, 32, 256, 64, 4, 3)],
}
SKINNY_CONFIGS: dict[str, list[dict[str, Any]]] = {
    "16x4096x4096": [
        sk(16, 32, 256, 1, 4, 4, tma=0), sk(16, 64, 128, 2, 4, 4, tma=0),
        sk(16, 64, 256, 2, 4, 3, tma=0), sk(16, 64, 128, 2, 4, 4),
        sk(16, 128, 128, 4, 4, 4, tma=0),
        sk(16, 256, 64, 8, 4, 5, tma=0), sk(16, 256, 64, 8, 4, 4),
        sk(16, 128, 128, 4, 4, 4, "atomic"), sk(16, 64, 128, 2, 4, 4, "two_launch", tma=0),
    ],
    "64x64x65536": [
        sk(64, 64, 128, 128, 4, 4, tma=0), sk(64, 64, 64, 128, 4, 6, tma=0),
        sk(64, 32, 128, 64, 4, 5, tma=0), sk(64, 32, 64, 64, 4, 8, tma=0),
        sk(64, 64, 128, 128, 4, 4), sk(64, 32, 128, 64, 4, 5), sk(32, 64, 128, 64, 4, 5, tma=0),
        sk(64, 64, 128, 128, 8, 3, tma=0),
        sk(64, 64, 128, 128, 4, 4, "atomic", tma=0), sk(64, 64, 128, 256, 4, 3, "atomic"),
        sk(64, 64, 128, 128, 4, 4, "two_launch", tma=0),
    ],
}


def label(kind: str, c: dict[str, Any] | None) -> str:
    if c is None:
        return "cublas"
    base = (f"{c['BLOCK_M']}x{c['BLOCK_N']}x{c['BLOCK_K']} sk{c['SPLIT_K']} "
            f"w{c['num_warps']} s{c['num_stages']}")
    if kind == "gemm":
        return f"gemm {base}"
    return f"skinny {c['MODE']} {base}" + ("" if c.get("TMA", 1) else " ptr")


def runner(kind: str, c: dict[str, Any] | None) -> Callable[[torch.Tensor, torch.Tensor,
                                                          torch.Tensor], Any]:
    if kind == "cublas":
        return lambda a, b, out: torch.matmul(a, b, out=out)
    if kind == "gemm":
        return lambda a, b, out: gemm.matmul(a, b, c, out=out)
    return lambda a, b, out: skinny.matmul_skinny(a, b, c, out=out)


def counters_zero() -> bool:
    dev = torch.device("cuda", torch.cuda.current_device())
    cnt = skinny._COUNTERS.get(dev)
    acc = skinny._ACCUM.get(dev)
    return (cnt is None or not bool(cnt.any())) and (acc is None or not bool(acc.any()))


def check(fn: Callable, problem: GemmProblem, deterministic: bool) -> dict[str, Any]:
    errs: list[float] = []
    equal = True
    for seed in (11, 12):
        inp = make_inputs(problem, "cuda", seed)
        ref = reference_matmul(inp.a, inp.b)
        again = torch.full_like(inp.out, float("nan"))
        fn(inp.a, inp.b, inp.out)
        fn(inp.a, inp.b, again)  # back to back on the stream
        torch.cuda.synchronize()
        errs += [rel_error(inp.out, ref), rel_error(again, ref)]
        equal &= bool(torch.equal(inp.out, again))
    ok = all(e <= TOL for e in errs) and (equal or not deterministic) and counters_zero()
    return {"ok": ok, "max_rel_error": max(errs), "bitwise_repeat": equal,
            "counters_zero": counters_zero()}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", required=True, help="directory for skinny_check.json")
    ap.add_argument("--budget-s", type=float, default=85.0)
    ap.add_argument("--shapes", default=",".join(SHAPES))
    args = ap.parse_args()
    t0 = time.perf_counter()
    out_dir = Path(args.out)
    out_dir.mkdir(parents=True, exist_ok=True)
    props = torch.cuda.get_device_properties(0)
    env = {"gpu": props.name, "sms": props.multi_processor_count, "torch": torch.__version__,
           "triton": __import__("triton").__version__, "cuda": torch.version.cuda,
           "spin_limit": skinny.SPIN_LIMIT}
    print(env, flush=True)
    benches = {"read": EventBench(target_ms=40.0, warmup_ms=10.0, flush_mode="read"),
               "write": EventBench(target_ms=40.0, warmup_ms=10.0, flush_mode="write")}
    rows: list[dict[str, Any]] = []
    for shape in args.shapes.split(","):
        m, n, k = SHAPES[shape]
        problem = GemmProblem(m=m, n=n, k=k, dtype="bf16")
        sets = [make_inputs(problem, "cuda", 100 + i) for i in range(N_SETS)]
        cands: list[tuple[str, dict[str, Any] | None]] = [("cublas", None)]
        cands += [("gemm", c) for c in GEMM_CONFIGS[shape]]
        cands += [("skinny", c) for c in SKINNY_CONFIGS[shape]]
        for kind, c in cands:
            row: dict[str, Any] = {"shape": shape, "kind": kind, "label": label(kind, c),
                                   "config": c}
            rows.append(row)
            fn = runner(kind, c)
            try:
                if kind == "skinny":
                    row["grid"] = skinny.grid_size(m, n, c)
                tc = time.perf_counter()
                row.update(check(fn, problem, kind == "skinny" and c["MODE"] != "atomic"))
                row["check_s"] = round(time.perf_counter() - tc, 2)
            except Exception as e:  # noqa: BLE001 - recorded, the sweep goes on
                row.update(ok=False, error=f"{type(e).__name__}: {e}"[:500])
                traceback.print_exc(limit=2)
            if row["ok"]:
                for name, bench in benches.items():
                    if time.perf_counter() - t0 > args.budget_s:
                        row[f"{name}_us"] = None
                        row["skipped"] = "over the time budget"
                        continue
                    try:
                        fns = [lambda s=s, f=fn: f(s.a, s.b, s.out) for s in sets]
                        row[f"{name}_us"] = round(bench(fns).median_us, 2)
                    except Exception as e:  # noqa: BLE001
                        row[f"{name}_us"] = None
                        row["error"] = f"{type(e).__name__}: {e}"[:500]
            print(json.dumps({k_: v for k_, v in row.items() if k_ != "config"}), flush=True)
    # Ratios against cuBLAS of the same shape and flush.
    for row in rows:
        base = next(r for r in rows if r["shape"] == row["shape"] and r["kind"] == "cublas")
        for name in benches:
            t, tb = row.get(f"{name}_us"), base.get(f"{name}_us")
            row[f"{name}_vs_cublas"] = round(tb / t, 3) if t and tb else None
    print(f"\n{'shape':14} {'candidate':44} {'ok':3} {'err':>8} {'read us':>8} {'x cuBLAS':>8} "
          f"{'write us':>8} {'x cuBLAS':>8}")
    for r in rows:
        def f(v: Any, fmt: str) -> str:
            return format(v, fmt) if isinstance(v, float) and not math.isnan(v) else "-"
        print(f"{r['shape']:14} {r['label']:44} {'yes' if r['ok'] else 'NO':3} "
              f"{f(r.get('max_rel_error'), '.1e'):>8} {f(r.get('read_us'), '.2f'):>8} "
              f"{f(r.get('read_vs_cublas'), '.3f'):>8} {f(r.get('write_us'), '.2f'):>8} "
              f"{f(r.get('write_vs_cublas'), '.3f'):>8}" + (f"  {r['error'][:80]}"
                                                         if r.get("error") else ""))
    for shape in args.shapes.split(","):
        ok = [r for r in rows
              if r["shape"] == shape and r["kind"] == "skinny" and r.get("read_us")]
        if ok:
            best = min(ok, key=lambda r: r["read_us"])
            print(f"best skinny {shape}: {best['label']} {best['read_us']} us, "
                  f"{best['read_vs_cublas']}x cuBLAS (read flush)")
    env["wall_s"] = round(time.perf_counter() - t0, 1)
    (out_dir / "skinny_check.json").write_text(json.dumps({"env": env, "rows": rows}, indent=1))
    print(f"wrote {out_dir / 'skinny_check.json'} ({env['wall_s']} s)")
    return 0 if all(r["ok"] for r in rows) else 1


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    sys.exit(main())
