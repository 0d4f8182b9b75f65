"""Build the CUTLASS artifact cache a GPU host's worker loads from (compile only, no GPU).

For each public shape: enumerate the SM90 operations that serve it, rank them
(nvMatmulHeuristics for ``--gpu``, else the analytic order) and take the first ``--max-ops``
(at most two per tile and cluster; 1000 is every op). A shape whose rows are unaligned (which
CUTLASS cannot serve) gets the ops the ``repaired`` library backend runs instead: those ranked
for its padded problem, per B layout (``search.kinds.gemm.repair_space``). Every shape's ops
are compiled together, in parallel, into ``--cache`` (the directory ``KS_CUTLASS_CACHE`` then
points to), then looked up again to prove the cache serves them. Needs nvcc and the
``cutlass`` extra, not torch-CUDA. Writes ``cutlass_cache.json`` and ``cutlass_cache.md``
under ``--out`` when given.

    python -m scripts.bench cutlass-cache --max-ops 12 --cache DIR [--jobs 2] [--cold]
"""

from __future__ import annotations

import argparse
import faulthandler
import json
import os
import shutil
import sys
import time
from pathlib import Path
from typing import Any

from search.kinds.gemm.spec import GemmProblem


def problem_of(shape: dict[str, Any]) -> GemmProblem:
    """A public shape as the service serves it (fp8: B column-major)."""
    dtype = shape.get("dtype", "bf16")
    layout_b = shape.get("layout_b", "col" if dtype == "fp8_e4m3" else "row")
    return GemmProblem(m=shape["m"], n=shape["n"], k=shape["k"], batch=shape.get("batch", 1),
                       dtype=dtype, layout_a=shape.get("layout_a", "row"), layout_b=layout_b)


def chosen_ops(problem: GemmProblem, max_ops: int, gpu: str) -> tuple[list[Any], str | None]:
    """The ops to build for ``problem`` (the first ``max_ops`` seeds) and why none, if none."""
    from kernel_templates.gemm import cutlass as kc
    from search.kinds.gemm import cutlass_space as space

    reason = kc.why_unsupported(problem)
    ops = kc.ops_for(problem)
    by_name = {o.name: o for o in ops}
    seeds = space.seeds(problem, ops, n=max_ops, gpu=gpu) if ops else []
    return [by_name[c["op"]] for c in seeds], reason


def repaired_ops(problem: GemmProblem, gpu: str) -> list[Any]:
    """The ops the ``repaired`` backend's library stage runs for ``problem`` (none when its
    rows are aligned): per B layout, the first ``CUTLASS_PER_LAYOUT`` of its padded problem."""
    from search.kinds.gemm.alignment import RepairPlan, b_layouts, unaligned
    from search.kinds.gemm.repair_space import CUTLASS_PER_LAYOUT

    if not unaligned(problem) or problem.batch != 1 or problem.dtype not in ("bf16", "fp16"):
        return []
    out: list[Any] = []
    for layout in b_layouts(problem, padded=True):
        inner = RepairPlan.of(problem, layout, padded=True).inner
        out += chosen_ops(inner, CUTLASS_PER_LAYOUT, gpu)[0]
    return out


def add_arguments(ap: argparse.ArgumentParser) -> None:
    """The ``cutlass-cache`` subcommand's options."""
    ap.add_argument("--cache", type=Path, required=True, help="artifact cache directory")
    ap.add_argument("--shapes", type=Path, default=Path("docs/benchmarks/gemm_public.json"))
    ap.add_argument("--only", default="", help="comma-separated shape indices")
    ap.add_argument("--max-ops", type=int, default=6, help="ops built per shape")
    ap.add_argument("--jobs", type=int, default=os.cpu_count() or 1, help="nvcc processes")
    ap.add_argument("--per-file", type=int, default=1,
                    help="ops per .cu file (1 lets the cache share ops between shapes best)")
    ap.add_argument("--gpu", default="H100_SXM", help="nvMatmulHeuristics GPU name")
    ap.add_argument("--cold", action="store_true",
                    help="empty the cache first (to time a cold build); default: keep it")
    ap.add_argument("--out", type=Path, default=None, help="where to write the report")
    ap.add_argument("--deadline", type=float, default=3600.0,
                    help="seconds after which a hung build dumps its stack and exits")


def run(args: argparse.Namespace) -> int:
    """Build every chosen op into the cache; 1 when any failed to compile, 2 on no toolchain."""
    from kernel_templates.gemm import cutlass as kc

    faulthandler.dump_traceback_later(args.deadline, exit=True)
    missing = kc.cutlass_available()
    if missing:
        print(f"FATAL: {missing}", file=sys.stderr)
        return 2
    try:
        tc = kc.toolchain()
    except kc.CompileError as exc:
        print(f"FATAL: {exc}", file=sys.stderr)
        return 2
    if args.cold and args.cache.exists():
        shutil.rmtree(args.cache)
    cache = kc.CutlassCache(args.cache)
    shapes = json.loads(args.shapes.read_text())["shapes"]
    only = {int(i) for i in args.only.split(",") if i.strip()}
    todo: dict[str, Any] = {}
    per_shape: list[dict[str, Any]] = []
    for i, shape in enumerate(shapes):
        if only and i not in only:
            continue
        problem = problem_of(shape)
        ops, reason = chosen_ops(problem, args.max_ops, args.gpu)
        repaired = repaired_ops(problem, args.gpu)
        if repaired:
            ops += repaired
            reason = f"{reason}; {len(repaired)} ops of the repaired (padded) problem"
        per_shape.append({"shape": problem.describe(), "ops": len(ops), "unsupported": reason})
        todo.update((op.name, op) for op in ops)
        print(f"{problem.describe()}: {reason or f'{len(ops)} ops'}", flush=True)
    t0 = time.perf_counter()
    done = [0]

    def progress(name: str, value: Any) -> None:
        done[0] += 1
        tag = "ERROR" if isinstance(value, kc.CompileError) else "ok"
        print(f"[{time.perf_counter() - t0:7.1f}s] {done[0]}/{len(todo)} {tag} {name}",
              flush=True)

    built = kc.build(list(todo.values()), cache, jobs=args.jobs, per_file=args.per_file,
                     tc=tc, on_done=progress)
    warm = kc.build(list(todo.values()), cache, jobs=args.jobs, per_file=args.per_file, tc=tc)
    report = {"toolchain": tc.to_dict(), "cache": str(args.cache), "gpu": args.gpu,
              "max_ops": args.max_ops, "jobs": args.jobs, "ops": len(todo),
              "wall_s": built.wall_s, "compile_s": built.compile_s,
              "compiled_files": built.compiled, "errors": sorted(built.errors),
              "warm_wall_s": warm.wall_s, "warm_compiled": warm.compiled, "shapes": per_shape}
    text = render(report)
    print(text)
    if args.out is not None:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "cutlass_cache.json").write_text(json.dumps(report, indent=1))
        (args.out / "cutlass_cache.md").write_text(text)
    return 1 if built.errors else 0


def render(report: dict[str, Any]) -> str:
    lines = [f"CUTLASS cache {report['cache']} ({report['gpu']} ranking, {report['max_ops']} ops "
             f"per shape, {report['jobs']} nvcc jobs): {report['ops']} ops, wall "
             f"{report['wall_s']:.1f} s, nvcc {report['compile_s']:.1f} s, "
             f"{len(report['errors'])} errors; warm lookup {report['warm_wall_s']:.2f} s, "
             f"{report['warm_compiled']} compiled", "", "| shape | ops | unsupported |",
             "|---|---|---|"]
    lines += [f"| {s['shape']} | {s['ops']} | {s['unsupported'] or ''} |"
              for s in report["shapes"]]
    return "\n".join(lines) + "\n"
