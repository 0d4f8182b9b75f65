#!/usr/bin/env python3
"""GPU check and benchmark of the Triton GEMM template against cuBLAS (run on purpose on a GPU).

For each shape: cuBLAS and a hand-picked set of Triton configurations go through the worker's
own path (``workers.execute.execute``: static check, fresh inputs, NaN-poisoned output, float64
reference, then ``workers.bench.EventBench`` with L2 flush), and a table is printed; ``--json``
writes every measurement. Kernels are compiled ahead in parallel (``workers.isolation.prepare``).

    PYTHONPATH=. python3 scripts/gpu_kernels_check.py --json /tmp/kernels.json
"""

from __future__ import annotations

import argparse
import json
import time
from typing import Any

from search.types import Candidate, GemmProblem, Measurement

SHAPES: dict[str, tuple[int, int, int]] = {
    "16x4096x4096": (16, 4096, 4096),
    "64x64x65536": (64, 64, 65536),
    "4096^3": (4096, 4096, 4096),
    "1000x3000x2000": (1000, 3000, 2000),
}


def cfg(bm: int, bn: int, bk: int, g: int, sk: int, w: int, s: int) -> dict[str, int]:
    return dict(BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk, GROUP_M=g, SPLIT_K=sk, num_warps=w,
                num_stages=s)


CONFIGS: dict[str, list[dict[str, int]]] = {
    "16x4096x4096": [
        cfg(16, 64, 128, 1, 1, 4, 4), cfg(16, 64, 128, 1, 2, 4, 4),
        cfg(16, 64, 128, 1, 4, 4, 4), cfg(16, 64, 128, 1, 8, 4, 4),
        cfg(16, 128, 128, 1, 2, 4, 4), cfg(16, 128, 128, 1, 4, 4, 4),
        cfg(16, 64, 256, 1, 2, 4, 3), cfg(16, 64, 256, 1, 4, 4, 3),
        cfg(16, 128, 64, 1, 4, 4, 6), cfg(16, 64, 64, 1, 4, 4, 6),
        cfg(16, 32, 128, 1, 4, 2, 5), cfg(16, 64, 128, 1, 4, 2, 5),
        cfg(16, 128, 256, 1, 4, 8, 3), cfg(16, 32, 256, 1, 2, 4, 4),
    ],
    "64x64x65536": [
        cfg(64, 64, 128, 1, 64, 4, 4), cfg(64, 64, 128, 1, 128, 4, 4),
        cfg(64, 64, 256, 1, 32, 4, 3), cfg(64, 64, 256, 1, 64, 4, 3),
        cfg(64, 64, 64, 1, 64, 4, 6), cfg(64, 64, 128, 1, 32, 4, 4),
        cfg(32, 64, 128, 1, 64, 4, 4), cfg(64, 32, 128, 1, 64, 4, 4),
        cfg(32, 32, 128, 1, 128, 4, 4), cfg(64, 64, 128, 1, 64, 8, 4),
        cfg(64, 64, 256, 1, 128, 4, 2), cfg(32, 64, 256, 1, 64, 4, 3),
    ],
    "4096^3": [
        cfg(128, 256, 64, 8, 1, 8, 3), cfg(128, 256, 64, 16, 1, 8, 3),
        cfg(256, 128, 64, 8, 1, 8, 3), cfg(256, 128, 64, 8, 1, 8, 4),
    ],
    "1000x3000x2000": [
        cfg(128, 128, 64, 8, 1, 8, 4), cfg(128, 128, 64, 8, 1, 4, 4),
        cfg(128, 256, 64, 8, 1, 8, 3), cfg(64, 128, 64, 8, 1, 4, 4),
        cfg(128, 128, 128, 8, 1, 8, 3), cfg(128, 64, 64, 8, 1, 4, 4),
    ],
}


def short(config: dict[str, Any]) -> str:
    if not config:
        return "-"
    c = config
    return (f"{c['BLOCK_M']}x{c['BLOCK_N']}x{c['BLOCK_K']} g{c['GROUP_M']} sk{c['SPLIT_K']} "
            f"w{c['num_warps']} s{c['num_stages']}")


def measure(cand: Candidate, options: dict[str, Any]) -> Measurement:
    from workers.execute import execute

    return Measurement.from_dict(execute(cand.to_dict(), options))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", help="write all measurements here")
    ap.add_argument("--shapes", default=",".join(SHAPES), help="comma-separated shape names")
    ap.add_argument("--target-ms", type=float, default=60.0, help="timed work per candidate")
    ap.add_argument("--budget-s", type=float, default=200.0, help="stop sweeping after this")
    ap.add_argument("--no-prepare", action="store_true", help="compile serially")
    ap.add_argument("--no-pointer", action="store_true",
                    help="skip re-measuring the best configs with pointer loads (no TMA)")
    ap.add_argument("--pointer-top", type=int, default=6,
                    help="how many of the best configs to re-measure with pointer loads")
    ap.add_argument("--dtype", default="bf16", help="bf16, fp16 or fp32")
    ap.add_argument("--layouts", default="rr,cc", help="layouts to check each shape's best in")
    args = ap.parse_args()

    import torch

    from workers.device import detect_device, environment
    from workers.isolation import prepare

    t_start = time.perf_counter()
    dev = detect_device()
    print(f"device: {dev.gpu_model} sm={dev.sm_count} cc={dev.cc} driver={dev.driver} "
          f"cuda={dev.cuda} torch={dev.torch} triton={dev.triton}", flush=True)
    print(f"env: {environment()}", flush=True)
    options = {"target_ms": args.target_ms, "warmup_ms": 25.0}
    names = [s for s in args.shapes.split(",") if s]
    lay = {"r": "row", "c": "col"}

    todo: list[Candidate] = []
    for name in names:  # row-major sweeps; other layouts only re-run the best two
        m, n, k = SHAPES[name]
        p = GemmProblem(m=m, n=n, k=k, dtype=args.dtype)
        todo += [Candidate(problem=p, backend="triton", config=c) for c in CONFIGS[name]]
    if not args.no_prepare:
        t0 = time.perf_counter()
        ok = prepare(todo, processes=12, timeout_s=150.0)
        print(f"prepare: {ok}/{len(todo)} compiled in {time.perf_counter() - t0:.1f} s",
              flush=True)

    rows: list[dict[str, Any]] = []
    for name in names:
        m, n, k = SHAPES[name]
        for layouts in args.layouts.split(","):
            p = GemmProblem(m=m, n=n, k=k, dtype=args.dtype, layout_a=lay[layouts[0]],
                            layout_b=lay[layouts[1]])
            cands = [Candidate(problem=p, backend="cublas")]
            cands += [Candidate(problem=p, backend="triton", config=c) for c in CONFIGS[name]]
            if layouts != "rr":  # other layouts: cuBLAS and the two best row-major configs
                best = sorted((r for r in rows if r["shape"] == name and r["layouts"] == "rr"
                               and r["backend"] == "triton" and r["median_us"]),
                              key=lambda r: r["median_us"])
                keys = list(dict.fromkeys(json.dumps(r["config"], sort_keys=True) for r in best))
                cands = cands[:1] + [Candidate(problem=p, backend="triton",
                                               config=json.loads(key)) for key in keys[:2]]
            base = None
            for cand in cands:
                if time.perf_counter() - t_start > args.budget_s:
                    print("budget spent; stopping the sweep", flush=True)
                    break
                meas = measure(cand, options)
                if cand.backend == "cublas":
                    base = meas.median_us
                rows.append(_row(name, layouts, cand, meas, base, "auto"))
            if layouts == "rr" and not args.no_pointer:
                # The same kernels through plain pointer loads instead of TMA: the best few,
                # and every one that failed.
                mine = [r for r in rows if r["shape"] == name and r["backend"] == "triton"]
                good = sorted((r for r in mine if r["median_us"]), key=lambda r: r["median_us"])
                again = good[:args.pointer_top] + [r for r in mine if not r["median_us"]]
                for r in again:
                    if time.perf_counter() - t_start > args.budget_s:
                        break
                    cand = Candidate(problem=p, backend="triton",
                                     config={**r["config"], "LOADS": "pointer"})
                    rows.append(_row(name, layouts, cand, measure(cand, options), base,
                                     "pointer"))
    if torch.cuda.is_available():
        torch.cuda.synchronize()

    print(f"\n== summary ({args.dtype}, median us; p20-p80; speed-up vs cuBLAS) ==")
    print(f"{'shape':15s} {'lay':3s} {'backend':7s} {'loads':7s} {'config':30s} {'median':>9s} "
          f"{'p20-p80':>17s} {'TFLOP/s':>8s} {'TB/s':>6s} {'vs cuBLAS':>9s}")
    for r in rows:
        if r["status"] != "ok":
            continue
        m, n, k = SHAPES[r["shape"]]
        p = GemmProblem(m=m, n=n, k=k, dtype=args.dtype)
        tb = p.min_bytes / (r["median_us"] * 1e-6) / 1e12
        print(f"{r['shape']:15s} {r['layouts']:3s} {r['backend']:7s} {r['loads']:7s} "
              f"{short(r['config']):30s} "
              f"{r['median_us']:9.1f} {r['p20_us']:8.1f}-{r['p80_us']:<8.1f} "
              f"{p.tflops(r['median_us']):8.1f} {tb:6.2f} {_g(r['speedup_vs_cublas']):>9s}")
    print("\n== best per shape and layout ==")
    for name in names:
        for layouts in args.layouts.split(","):
            mine = [r for r in rows if r["shape"] == name and r["layouts"] == layouts
                    and r["median_us"]]
            lib = [r for r in mine if r["backend"] == "cublas"]
            tri = sorted((r for r in mine if r["backend"] == "triton"),
                         key=lambda r: r["median_us"])
            if lib and tri:
                b = tri[0]
                print(f"{name:15s} {layouts} cublas {lib[0]['median_us']:.1f} us  triton "
                      f"{b['median_us']:.1f} us ({b['loads']}, {short(b['config'])})  "
                      f"x{lib[0]['median_us'] / b['median_us']:.2f}  host "
                      f"{_g(b['env'].get('host_us_per_call'))} us/call")
    bad = [r for r in rows if r["status"] not in ("ok",)]
    print(f"\n{len(rows)} measured, {len(bad)} not ok; {time.perf_counter() - t_start:.0f} s")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"device": dev.to_dict(), "rows": rows}, f, indent=1, default=str)
    return 1 if any(r["status"] == "wrong_result" for r in rows) else 0


def _row(name: str, layouts: str, cand: Candidate, meas: Measurement, base: float | None,
         loads: str) -> dict[str, Any]:
    row = {"shape": name, "layouts": layouts, "backend": cand.backend, "loads": loads,
           "config": cand.config, **meas.to_dict()}
    row["speedup_vs_cublas"] = base / meas.median_us if base and meas.median_us else None
    print(f"{name:15s} {layouts} {cand.backend:7s} {loads:7s} {short(cand.config):30s} "
          f"{meas.status:12s} {_us(meas.median_us)} err={_g(meas.rel_error)} "
          f"x{_g(row['speedup_vs_cublas'])} compile={_g(meas.compile_s)}s"
          + (f" {meas.error[-300:]}" if meas.error else ""), flush=True)
    return row


def _us(x: float | None) -> str:
    return f"{x:9.1f}us" if x is not None else f"{'-':>9s}  "


def _g(x: float | None) -> str:
    return f"{x:.3g}" if x is not None else "-"


if __name__ == "__main__":
    raise SystemExit(main())
