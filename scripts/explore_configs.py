#!/usr/bin/env python3
"""Sweep a hand-written grid of Triton GEMM configurations on one shape (a GPU experiment, not
part of the service): compile in parallel, check each against the reference, time with the
service's method, print the fastest beside cuBLAS.

    PYTHONPATH=. python3 scripts/explore_configs.py 16 4096 4096 --bm 16 --bn 128,256 \
        --bk 64,128,256 --sk 1,2,4,8,16 --warps 4,8 --stages 3,4,5
"""

from __future__ import annotations

import argparse
import itertools
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402

from kernel_templates.gemm.inputs import make_inputs  # noqa: E402
from kernel_templates.gemm.reference import reference_matmul, rel_error, tolerance  # noqa: E402
from kernel_templates.registry import make_callable  # noqa: E402
from search.constraints import DeviceLimits, violations  # noqa: E402
from search.types import Candidate, GemmProblem  # noqa: E402
from workers.bench import EventBench  # noqa: E402
from workers.isolation import prepare  # noqa: E402


def ints(text: str) -> list[int]:
    return [int(x) for x in text.split(",") if x]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("m", type=int)
    ap.add_argument("n", type=int)
    ap.add_argument("k", type=int)
    for name, default in (("bm", "16"), ("bn", "64"), ("bk", "128"), ("sk", "1"),
                          ("warps", "4"), ("stages", "4"), ("group", "1")):
        ap.add_argument(f"--{name}", default=default)
    ap.add_argument("--budget-s", type=float, default=150.0)
    ap.add_argument("--out", type=Path)
    a = ap.parse_args()
    problem = GemmProblem(a.m, a.n, a.k)
    limits = DeviceLimits(torch.cuda.get_device_properties(0).shared_memory_per_block_optin)
    grid = [dict(BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk, GROUP_M=g, SPLIT_K=sk, num_warps=w,
                 num_stages=s)
            for bm, bn, bk, sk, w, s, g in itertools.product(
                ints(a.bm), ints(a.bn), ints(a.bk), ints(a.sk), ints(a.warps), ints(a.stages),
                ints(a.group))]
    grid = [c for c in grid if not violations(problem, c, limits)]
    t0 = time.perf_counter()
    cands = [Candidate(problem, "triton", c) for c in grid]
    prepare(cands, processes=14)
    print(f"{len(grid)} feasible configs compiled in {time.perf_counter() - t0:.1f} s",
          flush=True)
    sets = [make_inputs(problem, "cuda", seed=7 + i) for i in range(4)]
    ref = reference_matmul(sets[0].a, sets[0].b)
    bench = EventBench()
    rows = []
    cublas = [make_callable(Candidate(problem, "cublas", {}), s) for s in sets]
    base = bench(cublas).median_us
    for cand in cands:
        if time.perf_counter() - t0 > a.budget_s:
            print("time budget reached", flush=True)
            break
        calls = [make_callable(cand, s) for s in sets]
        sets[0].out.fill_(float("nan"))
        err = rel_error(calls[0](), ref)
        if not err <= tolerance(problem):
            rows.append((float("inf"), cand.config, f"wrong {err:.1e}"))
            continue
        rows.append((bench(calls).median_us, cand.config, ""))
    again = bench(cublas).median_us
    rows.sort(key=lambda r: r[0])
    print(f"cuBLAS {base:.2f} / {again:.2f} µs")
    for us, c, note in rows[:15]:
        print(f"{us:8.2f} µs  {base / us:5.3f}x  {json.dumps(c)} {note}")
    if a.out:
        a.out.write_text(json.dumps({"cublas_us": [base, again], "rows": rows}, indent=1))


if __name__ == "__main__":
    main()
