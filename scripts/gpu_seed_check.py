#!/usr/bin/env python3
"""Side by side on the GPU: the CUTLASS seeds the first stage measures, ranked with and without
the direct-store epilogue cost (``search.spaces.cutlass_gemm.epilogue_us``).

For each public shape: the six seeds of each ranking (nvMatmulHeuristics for ``--gpu``). Every
op is measured as a first-stage trial is (``workers.execute.execute``: checked on fresh inputs
against the reference, then timed with CUDA events), in ``--passes`` passes whose order
alternates, with cuBLAS in every pass. An op's time is its best pass's median. The report: per
shape, the best of each seed set, its top seed, and the ratio (new over old: under 1 is faster).
The ops must be in the CUTLASS cache (``KS_CUTLASS_CACHE``), or they are compiled here.

    python3 scripts/gpu_seed_check.py --shapes docs/benchmarks/gemm_public.json --out DIR
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import search.spaces.cutlass_gemm as space  # noqa: E402
from search.types import GemmProblem  # noqa: E402


def problems(path: Path) -> list[GemmProblem]:
    """The shapes CUTLASS serves (no fp32 inputs), as ``gpu_cutlass_check`` reads them."""
    from gpu_cutlass_check import problem_of

    return [problem_of(s) for s in json.loads(path.read_text())["shapes"]
            if s.get("dtype", "bf16") != "fp32"]


def seed_sets(p: GemmProblem, gpu: str) -> dict[str, Any]:
    from kernel_templates.gemm.cutlass import ops_for

    ops = ops_for(p)
    by_name = {o.name: o for o in ops}
    real = space.epilogue_us
    new = [c["op"] for c in space.seeds(p, ops, n=6, gpu=gpu)]
    try:
        space.epilogue_us = lambda problem, op: 0.0  # the ranking before the epilogue cost
        old = [c["op"] for c in space.seeds(p, ops, n=6, gpu=gpu)]
    finally:
        space.epilogue_us = real
    direct = {k: sum(space.direct_store(by_name[n]) for n in v)
              for k, v in (("old", old), ("new", new))}
    return {"old": old, "new": new, "direct": direct}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--shapes", type=Path, default=Path("docs/benchmarks/gemm_public.json"))
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--gpu", default="H100_SXM")
    ap.add_argument("--passes", type=int, default=2)
    args = ap.parse_args()
    from workers.execute import execute

    args.out.mkdir(parents=True, exist_ok=True)
    rows: list[dict[str, Any]] = []
    for p in problems(args.shapes):
        sets = seed_sets(p, args.gpu)
        union = list(dict.fromkeys(sets["old"] + sets["new"]))
        times: dict[str, list[float]] = {}
        errors: dict[str, str] = {}
        for i in range(args.passes):
            order = ["cublas", *union] if i % 2 == 0 else [*union[::-1], "cublas"]
            for name in order:
                backend, config = ("cublas", {}) if name == "cublas" else (
                    "cutlass", {"op": name, "raster": "heuristic", "swizzle": 1, "splits": 1})
                m = execute({"problem": p.to_dict(), "backend": backend, "config": config},
                            {"seed": 100 + i})
                if m.get("median_us"):
                    times.setdefault(name, []).append(m["median_us"])
                else:
                    errors[name] = f"{m.get('status')}: {(m.get('error') or '')[-200:]}"
        best = {n: min(v) for n, v in times.items()}
        old_best, new_best = ([best[n] for n in sets[k] if n in best] for k in ("old", "new"))
        row = {"problem": p.key(), "old": sets["old"], "new": sets["new"], "times": times,
               "errors": errors, "cublas_us": best.get("cublas"),
               "old_best_us": min(old_best, default=None),
               "new_best_us": min(new_best, default=None),
               "old_top_us": best.get(sets["old"][0]), "new_top_us": best.get(sets["new"][0]),
               "old_direct_store": sets["direct"]["old"],
               "new_direct_store": sets["direct"]["new"]}
        rows.append(row)
        print(p.key(), {k: (round(v, 1) if isinstance(v, float) else v) for k, v in row.items()
                        if k.endswith("_us") or k.endswith("_store")}, len(errors), "errors",
              flush=True)
        (args.out / "seed_check.json").write_text(json.dumps(
            {"date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "rows": rows},
            indent=1))
    lines = ["| shape | cuBLAS us | old seeds: best | new seeds: best | new/old | old top | "
             "new top | direct-store seeds old/new |", "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        ratio = (r["new_best_us"] / r["old_best_us"]
                 if r["new_best_us"] and r["old_best_us"] else None)

        def f(x: float | None) -> str:
            return "-" if x is None else f"{x:.1f}"
        lines.append(f"| {r['problem']} | {f(r['cublas_us'])} | {f(r['old_best_us'])} | "
                     f"{f(r['new_best_us'])} | {'-' if ratio is None else f'{ratio:.3f}'} | "
                     f"{f(r['old_top_us'])} | {f(r['new_top_us'])} | "
                     f"{r['old_direct_store']}/{r['new_direct_store']} |")
    (args.out / "seed_check.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
