#!/usr/bin/env python3
"""GPU check of the CUTLASS library candidates (``kernel_templates/gemm/cutlass``) on the public
GEMM shapes, beside cuBLAS (``torch.matmul``) and, for fp8, ``torch._scaled_mm``.

Per shape: enumerate the SM90 operations that serve it, rank them (nvMatmulHeuristics for the
detected GPU, else the analytic order), take the first ``--max-ops`` (at most two per tile and
cluster). All shapes' ops are compiled together, in parallel on every core, into a *cold* cache
(``DIR/cache`` unless ``--cache``; its wall time is "compile cold"), then looked up again
("compile warm": cache hits only). Then, shape by shape, with the warm cache: enumerate, rank,
build (hits), load, fresh inputs, and the time until the first benchmark starts is recorded
("warm start", the issue's 10 s target). Each op runs once into a NaN-poisoned output on fresh
random inputs and is checked against the float64 reference (``rel_error`` under
``tolerance``); correct ones are timed with ``workers.bench.EventBench`` (CUDA events,
L2 read-flush), and the best op's runtime knobs (raster, swizzle, stream-K splits) are swept.
cuBLAS is timed before and after the CUTLASS runs (the better of the two is kept).

fp8 shapes use B column-major: both ``torch._scaled_mm`` and the fp8 WGMMA kernels need it.
Per-tensor scales (not 1.0) are applied as ``torch._scaled_mm`` does; CUTLASS gets
alpha = scale_a * scale_b on the device.

One bad kernel (compile error, launch error, wrong result) is recorded, not fatal; a sticky
CUDA error ends the GPU part and the results so far are still written. Results are rewritten
after every shape: ``DIR/gpu_cutlass.json`` and ``DIR/gpu_cutlass.md``. ``--compile-only``
needs no GPU nor torch-CUDA (it proves the kernels build).

    PYTHONPATH=. python3 scripts/gpu_cutlass_check.py --out /tmp/cutlass \\
        --shapes docs/benchmarks/gemm_public.json --max-ops 6
"""

from __future__ import annotations

import argparse
import faulthandler
import json
import math
import os
import sys
import time
import traceback
from pathlib import Path
from typing import Any

from kernel_templates.gemm import cutlass as kc
from search.spaces import cutlass_gemm as space
from search.types import GemmProblem

T0 = time.perf_counter()


def log(msg: str) -> None:
    print(f"[{time.perf_counter() - T0:7.1f}s] {msg}", flush=True)


def problem_of(shape: dict[str, Any]) -> GemmProblem:
    dtype = shape.get("dtype", "bf16")
    layout_b = shape.get("layout_b", "col" if dtype == "fp8_e4m3" else "row")
    return GemmProblem(m=shape["m"], n=shape["n"], k=shape["k"], batch=shape.get("batch", 1),
                       dtype=dtype, layout_a=shape.get("layout_a", "row"), layout_b=layout_b)


def plan(problem: GemmProblem, max_ops: int, gpu: str | None) -> dict[str, Any]:
    """Enumerate and rank; the ops to compile for ``problem``."""
    t = time.perf_counter()
    reason = kc.why_unsupported(problem)
    ops = kc.ops_for(problem)
    seeds = space.seeds(problem, ops, n=max_ops, gpu=gpu) if ops else []
    ranked = space.rank(problem, ops, gpu) if ops else []
    by_name = {o.name: o for o in ops}
    return {"problem": problem, "reason": reason, "ops": ops, "n_ops": len(ops),
            "chosen": [by_name[c["op"]] for c in seeds],
            "rank_source": ranked[0].source if ranked else None,
            "est_us": {r.op: r.est_us for r in ranked},
            "ranked": [by_name[r.op] for r in space.diverse(ranked, ops)],
            "plan_s": time.perf_counter() - t}


# -- GPU side ---------------------------------------------------------------------------------
def make_operands(problem: GemmProblem, seed: int) -> dict[str, Any]:
    """Fresh random operands (never zeros), a NaN-poisoned output, and for fp8 the scales."""
    import torch

    from kernel_templates.gemm.inputs import make_inputs

    if problem.dtype != "fp8_e4m3":
        inp = make_inputs(problem, "cuda", seed)
        return {"a": inp.a, "b": inp.b, "out": inp.out, "scale_a": None, "scale_b": None}
    gen = torch.Generator(device="cuda")
    gen.manual_seed(seed)
    m, n, k = problem.m, problem.n, problem.k
    f8 = torch.float8_e4m3fn
    # values around 1..4 in magnitude use fp8's mantissa; scales bring the product to N(0, 1)
    a = (torch.randn(m, k, generator=gen, device="cuda") * 2).to(f8)
    b_t = (torch.randn(n, k, generator=gen, device="cuda") * 2).to(f8)
    b = b_t.t()  # [k, n] column-major, as torch._scaled_mm wants
    if problem.layout_b == "row":
        b = b.contiguous()
    scale_a = torch.tensor(0.5 * k ** -0.25, device="cuda")
    scale_b = torch.tensor(0.5 * k ** -0.25, device="cuda")
    out = torch.full((m, n), float("nan"), dtype=torch.bfloat16, device="cuda")
    return {"a": a, "b": b, "out": out, "scale_a": scale_a, "scale_b": scale_b}


def reference(ops_: dict[str, Any]) -> Any:
    import torch

    a, b = ops_["a"].to(torch.float64), ops_["b"].to(torch.float64)
    if ops_["scale_a"] is not None:
        a = a * ops_["scale_a"].double()
        b = b * ops_["scale_b"].double()
    return torch.matmul(a, b)


def library_call(problem: GemmProblem, x: dict[str, Any]) -> Any:
    """cuBLAS: ``torch.matmul`` (bf16/fp16) or ``torch._scaled_mm`` (fp8)."""
    import torch

    a, b, out = x["a"], x["b"], x["out"]
    if problem.dtype == "fp8_e4m3":
        sa, sb = x["scale_a"], x["scale_b"]
        # no ``out=``: the functional form is the one every torch version has
        return lambda: torch._scaled_mm(a, b, scale_a=sa, scale_b=sb, out_dtype=torch.bfloat16)
    return lambda: torch.matmul(a, b, out=out)


def cuda_alive() -> str | None:
    import torch

    try:
        torch.cuda.synchronize()
        return None
    except RuntimeError as exc:
        return str(exc)


def died(res: dict[str, Any], where: str) -> bool:
    """Whether the CUDA context is lost; if so ``res["cuda_dead"]`` says after what."""
    dead = cuda_alive()
    if dead:
        res["cuda_dead"] = f"{where}: {dead}"
    return dead is not None


def status_counts(rows: list[dict[str, Any]]) -> dict[str, int]:
    return {st: sum(r.get("status") == st for r in rows)
            for st in sorted({r.get("status") for r in rows})}


def check_and_time(problem: GemmProblem, kernel: Any, knobs: dict[str, Any], seed: int,
                   bench: Any, tol: float) -> dict[str, Any]:
    """One correctness run on fresh inputs, then the timing (only when correct)."""
    import torch

    from kernel_templates.gemm.reference import rel_error

    row: dict[str, Any] = {"knobs": knobs}
    x = make_operands(problem, seed)
    try:
        call = kernel.bind(x["a"], x["b"], x["out"], scale_a=x["scale_a"],
                           scale_b=x["scale_b"], **knobs)
        call()
        torch.cuda.synchronize()
    except Exception as exc:  # a launch error is data
        row.update(status="launch_error", error=f"{type(exc).__name__}: {exc}"[:500])
        return row
    err = rel_error(x["out"], reference(x))
    row["rel_error"] = err
    if not err <= tol:
        row["status"] = "wrong_result"
        return row
    t = bench([call])
    row.update(status="ok", median_us=t.median_us, p20_us=t.p20_us, p80_us=t.p80_us,
               reps=t.reps, tflops=problem.tflops(t.median_us))
    return row


def knob_sweep(problem: GemmProblem, op: Any, limit: int = 8) -> list[dict[str, Any]]:
    """A few non-default runtime knob settings of ``op`` (no recompilation)."""
    cfgs = space.configs(problem, op)[1:]
    wanted = [c for c in cfgs if c["splits"] > 1][:3]
    wanted += [c for c in cfgs if c["splits"] == 1 and c["swizzle"] in (1, 2, 4, 8)
               and c["raster"] != "heuristic"][:limit - len(wanted)]
    return [{k: c[k] for k in space.KNOBS} for c in wanted[:limit]]


def run_shape(entry: dict[str, Any], pl: dict[str, Any], cache: Any, tc: Any, args: Any,
              gpu: str | None) -> dict[str, Any]:
    import torch

    from kernel_templates.gemm.reference import tolerance
    from workers.bench import EventBench

    problem: GemmProblem = pl["problem"]
    res: dict[str, Any] = {"shape": entry, "key": problem.key(), "n_ops": pl["n_ops"],
                           "unsupported": pl["reason"], "rank_source": pl["rank_source"]}
    bench = EventBench(warmup_ms=10.0, target_ms=args.target_ms, max_reps=500)
    tol = tolerance(problem)
    res["tolerance"] = tol
    # The baseline first (before and after: keep the better).
    x = make_operands(problem, 1)
    try:
        lib = library_call(problem, x)
        base_t = [bench([lib]).median_us]
        res["library"] = "torch._scaled_mm" if problem.dtype == "fp8_e4m3" else "cublas"
    except Exception as exc:
        base_t = []
        res["library_error"] = f"{type(exc).__name__}: {exc}"[:300]
    if pl["reason"]:
        res["library_us"] = min(base_t) if base_t else None
        return res
    # Warm start: what a worker does for a new shape with a warm cache.
    t_start = time.perf_counter()
    pl2 = plan(problem, args.max_ops, gpu)
    chosen = list(pl2["chosen"])
    if args.extra_cached:
        # Ops built earlier (another shape, another host of the same arch): free to try.
        names = {o.name for o in chosen}
        extra = [o for o in pl2["ranked"] if o.name not in names and cache.find(o.name, tc)]
        chosen += extra[:args.extra_cached]
    res["ops_tried"] = len(chosen)
    built = kc.build(chosen, cache, jobs=args.jobs, per_file=args.per_file, tc=tc)
    kernels = {}
    for name, art in built.artifacts.items():
        try:
            kernels[name] = kc.load(name, cache, artifact=art)
        except Exception as exc:
            res.setdefault("load_errors", {})[name] = f"{type(exc).__name__}: {exc}"[:300]
    make_operands(problem, 2)
    torch.cuda.synchronize()
    res["warm_start_s"] = time.perf_counter() - t_start
    res["warm_build_compiled"] = built.compiled
    rows = []
    for i, op in enumerate(chosen):
        row: dict[str, Any] = {"op": op.name, "est_us": pl2["est_us"].get(op.name)}
        if op.name in built.errors:
            row.update(status="compile_error", error=str(built.errors[op.name])[-800:])
        elif op.name not in kernels:
            row.update(status="load_error")
        else:
            row.update(check_and_time(problem, kernels[op.name], dict(
                raster="heuristic", swizzle=1, splits=1), 100 + i, bench, tol))
        rows.append(row)
        if died(res, f"after {op.name}"):
            break
    ok = [r for r in rows if r.get("status") == "ok"]
    # Knob sweep on the fastest ops.
    if ok and not res.get("cuda_dead"):
        by_name = {o.name: o for o in chosen}
        for r in sorted(ok, key=lambda r: r["median_us"])[:args.sweep_top]:
            for j, knobs in enumerate(knob_sweep(problem, by_name[r["op"]])):
                row = {"op": r["op"], "est_us": r["est_us"]}
                row.update(check_and_time(problem, kernels[r["op"]], knobs, 500 + j, bench, tol))
                rows.append(row)
                if died(res, f"after {r['op']} {knobs}"):
                    break
            if res.get("cuda_dead"):
                break
    if base_t and not res.get("cuda_dead"):
        try:
            base_t.append(bench([library_call(problem, x)]).median_us)
        except Exception:
            pass
    res["rows"] = rows
    res["library_us"] = min(base_t) if base_t else None
    ok = [r for r in rows if r.get("status") == "ok"]
    if ok:
        best = min(ok, key=lambda r: r["median_us"])
        res["best"] = {"op": best["op"], "knobs": best["knobs"], "median_us": best["median_us"],
                       "tflops": best["tflops"]}
        if res["library_us"]:
            res["ratio_vs_library"] = res["library_us"] / best["median_us"]
    res["statuses"] = status_counts(rows)
    if args.search_trials and not res.get("cuda_dead"):
        res["search"] = optuna_search(problem, cache, tc, args, bench, tol, gpu,
                                      res.get("library_us"))
        if res["search"].get("cuda_dead"):
            res["cuda_dead"] = res["search"]["cuda_dead"]
    sb = (res.get("search") or {}).get("best")
    if sb and (not res.get("best") or sb["median_us"] < res["best"]["median_us"]):
        res["best"] = {**sb, "tflops": problem.tflops(sb["median_us"]), "from": "search"}
        if res.get("library_us"):
            res["ratio_vs_library"] = res["library_us"] / sb["median_us"]
        if sb["op"] not in kernels:
            kernels[sb["op"]] = kc.load(sb["op"], cache, tc=tc)
    if res.get("best") and base_t and not res.get("cuda_dead") and args.confirm_rounds:
        res["confirm"] = confirm(problem, kernels[res["best"]["op"]], res["best"]["knobs"],
                                 bench, args.confirm_rounds)
    return res


def optuna_search(problem: GemmProblem, cache: Any, tc: Any, args: Any, bench: Any, tol: float,
                  gpu: str | None, library_us: float | None) -> dict[str, Any]:
    """The service's CUTLASS search (``search.cutlass_tuner.CutlassTuner``: Optuna over the
    factored space, ranked seeds first) run here against the real GPU with a compile-seconds
    budget: ops already in the cache are free, the others are compiled (in parallel, a batch
    at a time) and their measured nvcc seconds are charged. Every proposal is checked against
    the reference before it is timed, exactly like the sweep above."""
    import tempfile

    from search.cutlass_tuner import CompileBudget, CutlassTuner
    from search.types import Measurement, Status

    t0 = time.perf_counter()
    ops = kc.ops_for(problem)
    by_name = {o.name: o for o in ops}
    db = Path(tempfile.mkdtemp(prefix="ks-cut-", dir="/dev/shm" if Path("/dev/shm").is_dir()
                               else None)) / "study.db"
    tuner = CutlassTuner(f"sqlite:///{db}", problem, gpu or "H100_SXM", ops)
    built = {o.name for o in ops if cache.find(o.name, tc)}
    prebuilt = len(built)
    spent, trials, rows, broken = 0.0, 0, [], set()
    kernels: dict[str, Any] = {}
    out: dict[str, Any] = {"trials_budget": args.search_trials,
                           "compile_budget_s": args.compile_budget, "prebuilt_ops": prebuilt}
    while trials < args.search_trials:
        props = tuner.propose(min(args.jobs, args.search_trials - trials), lambda c: None,
                              CompileBudget(left_s=args.compile_budget - spent,
                                            built=frozenset(built - broken)))
        if not props:
            break
        need = [by_name[p.config["op"]] for p in props if p.config["op"] not in built]
        compile_s: dict[str, float] = {}
        if need:
            b = kc.build(need, cache, jobs=args.jobs, per_file=1, tc=tc)
            spent += b.compile_s
            for o in need:
                compile_s[o.name] = b.compile_s / len(need)
                if o.name in b.errors:
                    broken.add(o.name)
                else:
                    built.add(o.name)
        for prop in props:
            trials += 1
            name = prop.config["op"]
            knobs = {k: prop.config[k] for k in space.KNOBS}
            if name in broken:
                m = Measurement(Status.COMPILE_ERROR, compile_s=compile_s.get(name),
                                error="nvcc failed")
                row = {"op": name, "knobs": knobs, "status": "compile_error"}
            else:
                if name not in kernels:
                    kernels[name] = kc.load(name, cache, tc=tc)
                row = {"op": name, **check_and_time(problem, kernels[name], knobs,
                                                    900 + trials, bench, tol)}
                st = Status(row["status"])
                m = Measurement(st, median_us=row.get("median_us"), p20_us=row.get("p20_us"),
                                p80_us=row.get("p80_us"), reps=row.get("reps", 0),
                                rel_error=row.get("rel_error"), compile_s=compile_s.get(name, 0.0))
            tuner.record(prop.trial_number, m)
            row["trial"] = trials
            rows.append(row)
            if died(out, f"search, after {name}"):
                break
        if out.get("cuda_dead"):
            break
    ok = [r for r in rows if r.get("status") == "ok"]
    out.update(trials=trials, compile_s=spent, compiled_ops=len(built) - prebuilt,
               exhausted=tuner.exhausted, wall_s=time.perf_counter() - t0, rows=rows,
               statuses=status_counts(rows))
    if ok:
        best = min(ok, key=lambda r: r["median_us"])
        first = next(i for i, r in enumerate(rows, 1) if r is best)
        out["best"] = {"op": best["op"], "knobs": best["knobs"], "median_us": best["median_us"],
                       "found_at_trial": first}
        if library_us:
            out["ratio_vs_library"] = library_us / best["median_us"]
    return out


def confirm(problem: GemmProblem, kernel: Any, knobs: dict[str, Any], bench: Any,
            rounds: int) -> dict[str, Any]:
    """The best CUTLASS config and the library re-timed interleaved (A B, B A, ...) on one
    fresh input set: the best of many noisy timings is biased low (the winner's curse), so the
    reported ratio is the ratio of these medians, not of the search's numbers. For fp8 the
    fast-accumulation ``torch._scaled_mm`` is timed too (CUTLASS's fast-accum kernels are
    compared with the default, precise one in the issue's target)."""
    import statistics

    import torch

    x = make_operands(problem, 7)
    contenders = {"cutlass": kernel.bind(x["a"], x["b"], x["out"], scale_a=x["scale_a"],
                                         scale_b=x["scale_b"], **knobs),
                  "library": library_call(problem, x)}
    if problem.dtype == "fp8_e4m3":
        a, b, sa, sb = x["a"], x["b"], x["scale_a"], x["scale_b"]
        contenders["library_fast_accum"] = lambda: torch._scaled_mm(
            a, b, scale_a=sa, scale_b=sb, out_dtype=torch.bfloat16, use_fast_accum=True)
    times: dict[str, list[float]] = {k: [] for k in contenders}
    names = list(contenders)
    for r in range(rounds):
        for name in (names if r % 2 == 0 else names[::-1]):
            times[name].append(bench([contenders[name]]).median_us)
    med = {k: statistics.median(v) for k, v in times.items()}
    out: dict[str, Any] = {"rounds": rounds, "times_us": times, "median_us": med,
                           "ratio": med["library"] / med["cutlass"],
                           "spread": {k: (max(v) - min(v)) / statistics.median(v)
                                      for k, v in times.items()}}
    if "library_fast_accum" in med:
        out["ratio_fast_accum"] = med["library_fast_accum"] / med["cutlass"]
    return out


# -- report ---------------------------------------------------------------------------------------
def short_op(name: str) -> str:
    # cutlass3x_sm90_tensorop_gemm_bf16_bf16_f32_void_bf16_128x256x64_2x1x1_0_ttt_align8_... ->
    # 128x256x64 2x1x1 void ... (the schedule suffix)
    parts = name.split("_")
    try:
        i = next(j for j, p in enumerate(parts) if p.count("x") == 2 and p[0].isdigit())
    except StopIteration:
        return name
    c = "voidC " if parts[i - 2] == "void" else ""
    return f"{parts[i]} c{parts[i + 1]} {c}{'_'.join(parts[i + 5:])}"


def write_report(out: Path, report: dict[str, Any]) -> None:
    (out / "gpu_cutlass.json").write_text(json.dumps(report, indent=1, default=str))
    lines = ["# CUTLASS candidates vs cuBLAS", "",
             f"Device: {report.get('device')}; heuristics GPU: {report.get('heuristics_gpu')}; "
             f"toolchain: {report.get('toolchain_short')}", "",
             f"Compile (cold cache, {report.get('jobs')} jobs, {report.get('per_file')} op/file):"
             f" {report.get('n_compile_ops')} ops, wall {report.get('cold_wall_s', 0):.1f} s, "
             f"nvcc sum {report.get('cold_compile_s', 0):.1f} s, errors "
             f"{report.get('compile_errors', 0)}; warm lookup {report.get('warm_wall_s', 0):.2f}"
             " s", "",
             "| shape | dtype | ops (tried) | best CUTLASS config | CUTLASS us | library us |"
             " ratio (search) | ratio (interleaved) | warm start s | statuses |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for r in report.get("shapes", []):
        s = r["shape"]
        shape = f"{s['m']}x{s['n']}x{s['k']}"
        best = r.get("best")
        if r.get("unsupported"):
            lines.append(f"| {shape} | {s.get('dtype', 'bf16')} | 0 | unsupported: "
                         f"{r['unsupported']} | - | {_f(r.get('library_us'))} | - | - | - | - |")
            continue
        cfg = "-" if not best else (f"{short_op(best['op'])} {best['knobs']['raster']} "
                                    f"sw{best['knobs']['swizzle']} sp{best['knobs']['splits']}")
        lines.append(
            f"| {shape} | {s.get('dtype', 'bf16')} | {r.get('n_ops')} "
            f"({r.get('ops_tried', '-')}) | {cfg} | "
            f"{_f(best and best['median_us'])} | {_f(r.get('library_us'))} | "
            f"{_f(r.get('ratio_vs_library'), 3)} | {_confirmed(r.get('confirm'))} | "
            f"{_f(r.get('warm_start_s'), 2)} | "
            f"{r.get('statuses', {})}{' CUDA DEAD' if r.get('cuda_dead') else ''} |")
    searched = [r for r in report.get("shapes", []) if r.get("search")]
    if searched:
        lines += ["", "Optuna search (`search.cutlass_tuner.CutlassTuner`, the service's):", "",
                  "| shape | dtype | trials | compiled (nvcc s) | prebuilt ops | best | us | "
                  "found at | ratio | exhausted | statuses |", "|---|---|---|---|---|---|---|---|"
                  "---|---|---|"]
        for r in searched:
            s_, sh = r["search"], r["shape"]
            b = s_.get("best") or {}
            lines.append(
                f"| {sh['m']}x{sh['n']}x{sh['k']} | {sh.get('dtype', 'bf16')} | "
                f"{s_.get('trials')} | {s_.get('compiled_ops')} ({_f(s_.get('compile_s'))}) | "
                f"{s_.get('prebuilt_ops')} | {short_op(b['op']) if b else '-'} "
                f"{_knobs(b.get('knobs'))} | {_f(b.get('median_us'))} | "
                f"{b.get('found_at_trial', '-')} | {_f(s_.get('ratio_vs_library'), 3)} | "
                f"{s_.get('exhausted')} | {s_.get('statuses')} |")
    lines += ["", "ratio = library time / best CUTLASS time (>1: CUTLASS faster). Library is "
              "torch.matmul (cuBLAS) or torch._scaled_mm for fp8. ratio (interleaved): the best "
              "config and the library re-timed alternately (medians of the rounds; spread = "
              "(max - min) / median of CUTLASS's rounds); fa: vs _scaled_mm(use_fast_accum)", ""]
    (out / "gpu_cutlass.md").write_text("\n".join(lines))


_DEFAULT = {"raster": "heuristic", "swizzle": 1, "splits": 1}


def _knobs(k: dict[str, Any] | None) -> str:
    return "" if not k else f"{k['raster']} sw{k['swizzle']} sp{k['splits']}"


def _confirmed(c: dict[str, Any] | None) -> str:
    if not c:
        return "-"
    text = f"{c['ratio']:.3f} (±{100 * c['spread']['cutlass']:.1f}%, {c['rounds']} rounds)"
    if "ratio_fast_accum" in c:
        text += f"; fa {c['ratio_fast_accum']:.3f}"
    return text


def _f(x: Any, nd: int = 1) -> str:
    if x is None or (isinstance(x, float) and not math.isfinite(x)):
        return "-"
    return f"{x:.{nd}f}"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", required=True, type=Path)
    ap.add_argument("--shapes", type=Path, default=Path("docs/benchmarks/gemm_public.json"))
    ap.add_argument("--max-ops", type=int, default=6, help="ops compiled per shape")
    ap.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--per-file", type=int, default=1,
                    help="ops per .cu file (1 lets the cache share ops between shapes best)")
    ap.add_argument("--cache", type=Path, default=None,
                    help="artifact cache (default: OUT/cache, emptied first: a cold start)")
    ap.add_argument("--keep-cache", action="store_true", help="do not empty the cache first")
    ap.add_argument("--gpu", default=None, help="nvMatmulHeuristics GPU name (default: detect)")
    ap.add_argument("--target-ms", type=float, default=50.0)
    ap.add_argument("--only", default=None, help="comma-separated shape indices")
    ap.add_argument("--compile-only", action="store_true", help="no GPU part")
    ap.add_argument("--extra-cached", type=int, default=0,
                    help="per shape, also try up to N more ranked ops already in the cache")
    ap.add_argument("--sweep-top", type=int, default=2,
                    help="sweep the runtime knobs of this many fastest ops")
    ap.add_argument("--search-trials", type=int, default=0,
                    help="per shape, also run the service's Optuna CUTLASS search for N trials")
    ap.add_argument("--compile-budget", type=float, default=600.0,
                    help="compile-seconds the Optuna search may spend per shape")
    ap.add_argument("--confirm-rounds", type=int, default=7,
                    help="interleaved rounds of the best config vs the library (0: none)")
    ap.add_argument("--deadline", type=float, default=560.0,
                    help="seconds after which a hung process dumps its stack and exits (the "
                         "report so far is on disk)")
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    faulthandler.dump_traceback_later(args.deadline, exit=True)  # a hung kernel

    missing = kc.cutlass_available()
    if missing:
        print(f"FATAL: {missing}", file=sys.stderr)
        return 2
    try:
        tc = kc.toolchain()
    except kc.CompileError as exc:
        print(f"FATAL: {exc}", file=sys.stderr)
        return 2
    device, gpu = "none (compile only)", args.gpu
    if not args.compile_only:
        import torch

        if not torch.cuda.is_available():
            print("FATAL: no CUDA device visible to torch (use --compile-only to only build)",
                  file=sys.stderr)
            return 2
        props = torch.cuda.get_device_properties(0)
        device = f"{props.name} (sm_{props.major}{props.minor}, {props.multi_processor_count} SMs)"
        if (props.major, props.minor) != (9, 0):
            print(f"FATAL: the kernels are built for sm_90a; this device is {device}",
                  file=sys.stderr)
            return 2
        gpu = gpu or space.heuristics_gpu(props.name)
    gpu = gpu or "H100_SXM"
    cache_dir = args.cache or (args.out / "cache")
    if not args.keep_cache and cache_dir.exists():
        import shutil

        shutil.rmtree(cache_dir)
    cache = kc.CutlassCache(cache_dir)
    shapes = json.loads(args.shapes.read_text())["shapes"]
    if args.only:
        idx = {int(i) for i in args.only.split(",")}
        shapes = [s for i, s in enumerate(shapes) if i in idx]
    report: dict[str, Any] = {"device": device, "heuristics_gpu": gpu, "toolchain": tc.to_dict(),
                              "toolchain_short": tc.nvcc.splitlines()[-1] + f", CUTLASS "
                              f"{tc.cutlass}", "jobs": args.jobs, "per_file": args.per_file,
                              "max_ops": args.max_ops, "shapes": []}
    log(f"device {device}; heuristics {gpu}; {len(shapes)} shapes; cache {cache_dir}")

    plans = [plan(problem_of(s), args.max_ops, gpu) for s in shapes]
    todo = {}
    for pl in plans:
        what = (f"unsupported: {pl['reason']}" if pl["reason"]
                else f"chosen {len(pl['chosen'])}")
        log(f"{pl['problem'].describe()}: {pl['n_ops']} ops, {what} ({pl['rank_source']}, "
            f"{pl['plan_s']:.2f} s)")
        for op in pl["chosen"]:
            todo[op.name] = op
    report["n_compile_ops"] = len(todo)
    log(f"compiling {len(todo)} ops with {args.jobs} jobs (cold cache)")
    done = [0]

    def progress(name: str, value: Any) -> None:
        done[0] += 1
        tag = "ERROR" if isinstance(value, kc.CompileError) else "ok"
        log(f"  [{done[0]}/{len(todo)}] {tag} {short_op(name)}")

    cold = kc.build(list(todo.values()), cache, jobs=args.jobs, per_file=args.per_file,
                    tc=tc, on_done=progress)
    report.update(cold_wall_s=cold.wall_s, cold_compile_s=cold.compile_s,
                  compile_errors=len(cold.errors), compiled_files=cold.compiled,
                  compile_error_tails={k: str(v)[-1500:] for k, v in cold.errors.items()})
    warm = kc.build(list(todo.values()), cache, jobs=args.jobs, per_file=args.per_file,
                    tc=tc)
    report.update(warm_wall_s=warm.wall_s, warm_compiled=warm.compiled)
    log(f"cold: wall {cold.wall_s:.1f} s, nvcc {cold.compile_s:.1f} s, {len(cold.errors)} "
        f"errors; warm: {warm.wall_s:.2f} s, {warm.compiled} compiled")
    write_report(args.out, report)
    if args.compile_only:
        return 1 if cold.errors else 0

    for s, pl in zip(shapes, plans, strict=True):
        log(f"running {pl['problem'].describe()} ({pl['problem'].key()})")
        try:
            res = run_shape(s, pl, cache, tc, args, gpu)
        except Exception as exc:
            res = {"shape": s, "error": traceback.format_exc()[-2000:]}
            log(f"  shape failed: {exc}")
        report["shapes"].append(res)
        write_report(args.out, report)
        if "best" in res:
            log(f"  best {short_op(res['best']['op'])} {res['best']['median_us']:.1f} us, "
                f"library {_f(res.get('library_us'))} us, ratio "
                f"{_f(res.get('ratio_vs_library'), 3)}, warm start "
                f"{_f(res.get('warm_start_s'), 2)} s, {res.get('statuses')}")
        if res.get("cuda_dead"):
            log(f"  CUDA context lost ({res['cuda_dead']}); stopping the GPU part")
            break
    log(f"done; {args.out / 'gpu_cutlass.md'}")
    print((args.out / "gpu_cutlass.md").read_text())
    wrong = sum(r.get("statuses", {}).get("wrong_result", 0) for r in report["shapes"])
    return 1 if wrong or any(r.get("cuda_dead") for r in report["shapes"]) else 0


if __name__ == "__main__":
    sys.exit(main())
