"""Precision side by side (issue 19): fp8 e4m3 GEMMs, and bf16 GEMMs computed in fp8 where a
policy allows it, every contender re-measured in one set of interleaved rounds (a GPU run).

Per shape, through the embedded service and one local worker (one database: the GPU is
calibrated once):

1. the fp8 problem (A row-major, B column-major, per-tensor scales) is tuned: the library
   (cuBLAS's ``torch._scaled_mm``, the CUTLASS fp8 ops and their search where the worker
   offers CUTLASS) and the fp8 tier (the Triton fp8 template), with ``full_search`` so the
   template's search spends its budget;
2. the bf16 problem is tuned in exact mode (the default policy) and once per bound of
   ``--max-rel-error`` with ``policy.allow.fp8_e4m3.max_rel_error`` = the bound (the decision
   loop as served), so the served precision and error under each bound (the issue's 3% and a
   looser one) stand side by side in the same run;
3. every contender runs once into a NaN-poisoned output and is compared with the float64
   product of its own inputs (the relative error reported), then all are timed in
   ``--rounds`` rounds, the order rotating, with the worker's timing method (CUDA events, L2
   flushed by a read between calls): bf16 cuBLAS; ``torch._scaled_mm`` with fast
   accumulation off and on; the best CUTLASS fp8 op; the best Triton fp8 template
   configuration; the fp8 job's served kernel; each bf16 job's served kernel with its
   precision and error; and, for reference, bf16 quantised by the fp8 tier's kernels and
   multiplied by ``torch._scaled_mm`` with row-wise scales (what a user could assemble).

Inputs are the worker's (``kernel_templates.gemm.inputs``): bf16 entries N(0, k^-1/2), so
product entries are about N(0, 1); fp8 entries N(0, 2) and N(0, 4) with per-tensor scales.
The targets: Triton fp8 >= 0.95x ``torch._scaled_mm``; bf16 with fp8 allowed (quantisation
included) >= 1.15x bf16 cuBLAS at 4096^3 and >= 1.4x at 8192^3 with the served error within
its bound. Writes ``bench_precision.json`` and ``.md`` under ``--out`` after every shape.

    python -m scripts.bench precision --out /tmp/prec [--shapes 4096x4096x4096,8192x8192x8192]
        [--max-rel-error 0.03,0.05] [--trials 48] [--rounds 5] [--backends cublas,cutlass,triton]
        [--job-s 300]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

#: The issue's speed-up targets of a bf16 problem computed in fp8, by shape.
BF16_TARGETS = {(4096, 4096, 4096): 1.15, (8192, 8192, 8192): 1.4}
#: Triton fp8 against ``torch._scaled_mm`` on fp8 problems.
FP8_TARGET = 0.95


@dataclass
class Contender:
    """One kernel to time: its name, what it computes in, which input set it reads
    (``"bf16"`` or ``"fp8"``) and how to make its call from that set."""

    name: str
    precision: str
    inputs: str
    make: Callable[[Any], Callable[[], Any]]
    note: str = ""


def add_arguments(ap: argparse.ArgumentParser) -> None:
    """The ``precision`` subcommand's options."""
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--shapes", default="4096x4096x4096,8192x8192x8192",
                    help="comma-separated MxNxK")
    ap.add_argument("--max-rel-error", "--bounds", dest="max_rel_error", type=parse_bounds,
                    default=parse_bounds("0.03,0.05"),
                    help="comma-separated bounds: one bf16 job allowing fp8_e4m3 up to each "
                    "relative error, each with its served row")
    ap.add_argument("--trials", type=int, default=48, help="custom-trial budget per job")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--backends", default="cublas,cutlass,triton")
    ap.add_argument("--cutlass-trials", type=int, default=4)
    ap.add_argument("--cutlass-compile-s", type=float, default=240.0)
    ap.add_argument("--job-s", type=float, default=300.0,
                    help="time budget of each job, seconds (it decides with what it measured)")
    ap.add_argument("--db", default=None, help="SQLite file (default: a fresh one in a "
                    "temporary directory, not under --out)")
    ap.add_argument("--interpret", action="store_true", help="CPU smoke run (no GPU numbers)")


def parse_shapes(text: str) -> list[tuple[int, int, int]]:
    """``"4096x4096x4096,16x4096x4096"`` as (m, n, k) triples."""
    out = []
    for item in filter(None, (s.strip() for s in text.split(","))):
        m, n, k = (int(x) for x in item.lower().split("x"))
        out.append((m, n, k))
    return out


def parse_bounds(text: str) -> dict[str, float]:
    """``"0.03,0.05"`` as ``{"fp8<=0.03": 0.03, "fp8<=0.05": 0.05}``: each a relative error in
    (0, 1], in the order given, duplicates dropped; ``argparse.ArgumentTypeError`` otherwise."""
    out: dict[str, float] = {}
    for item in filter(None, (s.strip() for s in text.split(","))):
        try:
            bound = float(item)
        except ValueError:
            raise argparse.ArgumentTypeError(f"--max-rel-error: {item!r} is not a number"
                                             ) from None
        if not 0 < bound <= 1:
            raise argparse.ArgumentTypeError(f"--max-rel-error: each bound must be in (0, 1], "
                                             f"got {item}")
        out[f"fp8<={item}"] = bound
    if not out:
        raise argparse.ArgumentTypeError("--max-rel-error: give at least one bound")
    return out


def _job(cluster: Any, problem: dict[str, Any], budget: int, policy: dict[str, Any],
         backends: list[str], job_s: float) -> dict[str, Any]:
    """One job, decided within ``job_s`` seconds (its time budget: the decision loop decides
    with what it measured by then; cancelled if it has not ended a minute later)."""
    job = cluster.client.submit_job(problem, budget={"max_trials": budget, "max_seconds": job_s},
                                    policy=policy, gpu=cluster.device.gpu_model,
                                    backends=backends)
    t0 = time.monotonic()
    job = cluster.wait(job["id"], poll_s=0.5, timeout_s=job_s + 60)
    job["wall_s"] = round(time.monotonic() - t0, 1)
    return job


def _best_of(decision: dict[str, Any], backend: str) -> dict[str, Any] | None:
    """The fastest correct library trial of ``backend`` in a decision's evidence."""
    ok = [t for t in decision.get("library_trials") or []
          if t.get("backend") == backend and t.get("status") == "ok" and t.get("median_us")]
    return min(ok, key=lambda t: t["median_us"]) if ok else None


def _served(job: dict[str, Any]) -> tuple[str, dict[str, Any], str, float | None] | None:
    d = job.get("decision") or {}
    if not d.get("backend"):
        return None
    return d["backend"], dict(d.get("config") or {}), d.get("precision") or "?", \
        d.get("rel_error")


def contenders(fp8_job: dict[str, Any], bf16_jobs: dict[str, dict[str, Any]],
               bf16_problem: Any, fp8_problem: Any) -> list[Contender]:
    """Everything to time side by side, from the jobs' evidence."""
    import torch

    from kernel_templates.registry import make_callable
    from search.types import Candidate

    def kernel(problem: Any, backend: str, config: dict[str, Any]
               ) -> Callable[[Any], Callable[[], Any]]:
        return lambda inp: make_callable(Candidate(problem, backend, config), inp)

    def scaled_mm(fast: bool) -> Callable[[Any], Callable[[], Any]]:
        return lambda inp: lambda: torch._scaled_mm(
            inp.a, inp.b, scale_a=inp.scale_a, scale_b=inp.scale_b, out_dtype=inp.out.dtype,
            use_fast_accum=fast, out=inp.out)

    out = [Contender("bf16 cuBLAS", "bf16", "bf16", kernel(bf16_problem, "cublas", {})),
           Contender("torch._scaled_mm", "fp8_e4m3", "fp8", scaled_mm(False)),
           Contender("torch._scaled_mm fast accum", "fp8_e4m3", "fp8", scaled_mm(True))]
    d8 = fp8_job.get("decision") or {}
    cutlass = _best_of(d8, "cutlass")
    if cutlass is not None:
        out.append(Contender("best CUTLASS fp8 op", "fp8_e4m3", "fp8",
                             kernel(fp8_problem, "cutlass", cutlass["config"]),
                             cutlass["config"].get("op", "")))
    triton_best = fp8_job.get("custom_best")
    if triton_best:
        out.append(Contender("Triton fp8 template", "fp8_e4m3", "fp8",
                             kernel(fp8_problem, "triton", triton_best["config"]),
                             json.dumps(triton_best["config"], sort_keys=True)))
    served = _served(fp8_job)
    if served is not None:
        out.append(Contender(f"served fp8 problem ({served[0]})", served[2], "fp8",
                             kernel(fp8_problem, served[0], served[1])))
    lowered_config: dict[str, Any] | None = None
    for label, job in bf16_jobs.items():
        served = _served(job)
        if served is None:
            continue
        backend, config, precision, _ = served
        lowered_config = config if "PRECISION" in config else lowered_config
        out.append(Contender(f"served bf16 {label} ({backend})", precision, "bf16",
                             kernel(bf16_problem, backend, config)))
    out.append(Contender("bf16 quantised + torch._scaled_mm rowwise", "fp8_e4m3", "bf16",
                         _quantised_scaled_mm(lowered_config)))
    return out


def _quantised_scaled_mm(config: dict[str, Any] | None) -> Callable[[Any], Callable[[], Any]]:
    """bf16 inputs quantised by the fp8 tier's kernels (per row of A, per column of B; the
    served lowered configuration's tiles, else the defaults), multiplied by
    ``torch._scaled_mm`` with row-wise scales: the library's way to the same computation."""
    import torch

    from kernel_templates.gemm.fp8_quant import quantise
    from search.kinds.gemm.fp8_space import LOWERED_DEFAULTS

    cfg = {**LOWERED_DEFAULTS, **(config or {})}
    q = {"block_r": cfg["Q_BLOCK_R"], "block_k": cfg["Q_BLOCK_K"], "num_warps": cfg["Q_WARPS"]}

    def make(inp: Any) -> Callable[[], Any]:
        def call() -> Any:
            qa, sa = quantise(inp.a, "row", **q)
            qb, sb = quantise(inp.b.T, "row", **q)
            return torch._scaled_mm(qa, qb.T, scale_a=sa[:, None], scale_b=sb[None, :],
                                    out_dtype=inp.out.dtype, out=inp.out)
        return call

    return make


def side_by_side(cands: list[Contender], inputs: dict[str, Any], refs: dict[str, Any],
                 rounds: int, bench: Any, cuda: bool) -> list[dict[str, Any]]:
    """Check each contender on its inputs, then time all in ``rounds`` rotating rounds."""
    import torch

    from kernel_templates.accuracy import rel_error

    rows: list[dict[str, Any]] = []
    calls: dict[str, Callable[[], Any]] = {}
    for c in cands:
        row: dict[str, Any] = {"name": c.name, "precision": c.precision, "note": c.note}
        inp = inputs[c.inputs]
        try:
            call = c.make(inp)
            inp.out.fill_(float("nan"))
            call()
            if cuda:
                torch.cuda.synchronize()
            row["rel_error"] = rel_error(inp.out, refs[c.inputs])
            calls[c.name] = call
        except Exception as exc:  # noqa: BLE001 - a contender that cannot run is reported
            row["error"] = f"{type(exc).__name__}: {str(exc)[:300]}"
        rows.append(row)
    names = list(calls)
    times: dict[str, list[float]] = {n: [] for n in names}
    for r in range(rounds if names else 0):
        shift = r % len(names)
        for name in names[shift:] + names[:shift]:  # no contender always after another
            times[name].append(bench([calls[name]]).median_us)
    for row in rows:
        ts = times.get(row["name"])
        if ts:
            row.update(us=statistics.median(ts), range_us=[min(ts), max(ts)])
    return rows


def targets(shape: tuple[int, int, int], rows: list[dict[str, Any]],
            bounds: dict[str, float]) -> list[dict[str, Any]]:
    """The issue's targets for one shape: each with the measured ratio and whether it is met."""
    by = {r["name"]: r for r in rows if r.get("us")}
    out: list[dict[str, Any]] = []
    mm, tri = by.get("torch._scaled_mm"), by.get("Triton fp8 template")
    if mm and tri:
        ratio = mm["us"] / tri["us"]
        out.append({"target": f"Triton fp8 >= {FP8_TARGET}x torch._scaled_mm",
                    "ratio": ratio, "met": ratio >= FP8_TARGET})
    cublas = by.get("bf16 cuBLAS")
    want = BF16_TARGETS.get(shape)
    for label, bound in bounds.items():
        served = next((r for n, r in by.items() if n.startswith(f"served bf16 {label} ")), None)
        if not (cublas and served):
            continue
        ratio = cublas["us"] / served["us"]
        within = served.get("rel_error") is not None and served["rel_error"] <= bound
        met = within and (want is None or ratio >= want)
        out.append({"target": f"bf16 {label}: >= {want}x bf16 cuBLAS, error <= {bound}"
                    if want else f"bf16 {label}: error <= {bound}", "ratio": ratio,
                    "precision": served["precision"], "rel_error": served.get("rel_error"),
                    "met": met})
    exact = next((r for n, r in by.items() if n.startswith("served bf16 exact ")), None)
    if exact is not None:
        out.append({"target": "exact mode serves the input precision",
                    "precision": exact["precision"], "met": exact["precision"] == "bf16"})
    return out


def served_by_bound(rows: list[dict[str, Any]], bounds: dict[str, float]
                    ) -> list[dict[str, Any]]:
    """The bf16 problem's served kernel under exact mode and under each bound, side by side:
    its backend, precision, time, speed-up over bf16 cuBLAS, error and whether the error is
    within the bound."""
    by = {r["name"]: r for r in rows}
    cublas = by.get("bf16 cuBLAS", {}).get("us")
    out: list[dict[str, Any]] = []
    for label, bound in {"exact": None, **bounds}.items():
        prefix = f"served bf16 {label} ("
        row = next((r for n, r in by.items() if n.startswith(prefix)), None)
        if row is None:
            continue
        err, us = row.get("rel_error"), row.get("us")
        out.append({"policy": label, "bound": bound, "backend": row["name"][len(prefix):-1],
                    "precision": row["precision"], "us": us,
                    "vs_cublas": cublas / us if cublas and us else None, "rel_error": err,
                    "within": None if bound is None or err is None else err <= bound})
    return out


def run(args: argparse.Namespace) -> int:
    """Tune, then time side by side, every chosen shape."""
    if args.interpret:  # Triton's interpreter in this process too, before triton loads
        os.environ.setdefault("TRITON_INTERPRET", "1")
    import torch
    import triton

    from kernel_templates.gemm.inputs import make_inputs
    from kernel_templates.gemm.reference import reference_for
    from search.kinds.gemm.spec import GemmProblem
    from service.local import LocalCluster
    from service.settings import ServiceSettings
    from workers.bench import EventBench, WallClockBench

    args.out.mkdir(parents=True, exist_ok=True)
    bounds: dict[str, float] = args.max_rel_error
    cuda = torch.cuda.is_available() and not args.interpret
    bench = (EventBench(warmup_ms=25.0, target_ms=50.0, max_reps=500) if cuda
             else WallClockBench(reps=2))
    db = args.db or str(Path(tempfile.mkdtemp(prefix="ks-precision-")) / "precision.db")
    settings = ServiceSettings(database_url=f"sqlite:///{db}")
    report: dict[str, Any] = {"meta": {
        "date": datetime.now(UTC).isoformat(timespec="seconds"), "torch": torch.__version__,
        "cuda": torch.version.cuda, "triton": triton.__version__,
        "python": platform.python_version(), "trials": args.trials, "rounds": args.rounds,
        "bounds": bounds, "inputs": "bf16 N(0, k^-1/2); fp8 N(0, 2), N(0, 4) with per-tensor "
                                    "scales (kernel_templates/gemm/inputs.py)"}, "shapes": []}
    backends = args.backends.split(",")
    with LocalCluster(settings, interpret=True if args.interpret else None) as cluster:
        report["meta"]["gpu"] = cluster.device.gpu_model
        for m, n, k in parse_shapes(args.shapes):
            shape: dict[str, Any] = {"shape": f"{m}x{n}x{k}", "jobs": {}}
            report["shapes"].append(shape)  # saved after every job: a cut run keeps them
            fp8_p = {"kind": "gemm", "m": m, "n": n, "k": k, "dtype": "fp8_e4m3",
                     "layout_b": "col"}
            bf16_p = {"kind": "gemm", "m": m, "n": n, "k": k, "dtype": "bf16"}
            library = {"cutlass_trials": args.cutlass_trials,
                       "cutlass_compile_s": args.cutlass_compile_s}
            runs = {"fp8": (fp8_p, {**library, "full_search": True}),
                    "exact": (bf16_p, library),
                    **{label: (bf16_p, {**library, "allow": {"fp8_e4m3": {
                        "max_rel_error": bound}}}) for label, bound in bounds.items()}}
            jobs: dict[str, dict[str, Any]] = {}
            for label, (problem, policy) in runs.items():
                jobs[label] = _job(cluster, problem, args.trials, policy, backends, args.job_s)
                shape["jobs"][label] = _summary(jobs[label])
                _save(args.out, report)
            fp8_job = jobs.pop("fp8")
            bf16_jobs = jobs
            problems = {"bf16": GemmProblem.from_dict(bf16_p),
                        "fp8": GemmProblem.from_dict(fp8_p)}
            try:
                inputs = {key: make_inputs(p, "cuda" if cuda else "cpu", seed=4242)
                          for key, p in problems.items()}
                refs = {key: reference_for(inp) for key, inp in inputs.items()}
                cands = contenders(fp8_job, bf16_jobs, problems["bf16"], problems["fp8"])
                rows = side_by_side(cands, inputs, refs, args.rounds, bench, cuda)
                del inputs, refs
            except Exception as exc:  # noqa: BLE001 - reported, the tuning results kept
                shape["error"] = f"side by side failed: {type(exc).__name__}: {exc}"[:2000]
                rows = []
            for row in rows:
                if row.get("us"):
                    row["tflops"] = 2 * m * n * k / (row["us"] * 1e-6) / 1e12
            shape.update(rows=rows, targets=targets((m, n, k), rows, bounds))
            _save(args.out, report)
            print(render({**report, "shapes": [shape]}), flush=True)
    return 0


def _save(out: Path, report: dict[str, Any]) -> None:
    (out / "bench_precision.json").write_text(json.dumps(report, indent=1))
    (out / "bench_precision.md").write_text(render(report))


def _summary(job: dict[str, Any]) -> dict[str, Any]:
    d = job.get("decision") or {}
    return {"status": job.get("status"), "verdict": d.get("verdict"),
            "backend": d.get("backend"), "config": d.get("config"),
            "precision": d.get("precision"), "rel_error": d.get("rel_error"),
            "speedup": d.get("speedup"), "speedup_vs_cublas": d.get("speedup_vs_cublas"),
            "tiers": d.get("tiers"), "rationale": d.get("rationale"),
            "wall_s": job.get("wall_s"), "error": job.get("error")}


def _f(v: Any, fmt: str) -> str:
    return "—" if v is None else fmt.format(v)


def render(report: dict[str, Any]) -> str:
    meta = report["meta"]
    lines = [f"Precision side by side on {meta.get('gpu')}, torch {meta['torch']}, CUDA "
             f"{meta['cuda']}, triton {meta['triton']}, {meta['date']}; {meta['trials']} "
             f"custom trials per job, medians of {meta['rounds']} interleaved rounds; inputs: "
             f"{meta['inputs']}.", ""]
    for s in report["shapes"]:
        rows = s.get("rows") or []
        if s.get("error"):
            lines += [f"### {s['shape']}", "", s["error"], ""]
        cublas = next((r.get("us") for r in rows if r["name"] == "bf16 cuBLAS"), None)
        lines += ([] if s.get("error") else [f"### {s['shape']}", ""]) + [
                  "| contender | precision | µs | range µs | TFLOP/s | vs bf16 cuBLAS | "
                  "rel. error | note |", "|---|---|---|---|---|---|---|---|"]
        for r in rows:
            rng = r.get("range_us")
            vs = cublas / r["us"] if cublas and r.get("us") else None
            note = r.get("error") or r.get("note") or ""
            lines.append(
                f"| {r['name']} | {r['precision']} | {_f(r.get('us'), '{:.1f}')} | "
                f"{f'{rng[0]:.1f}–{rng[1]:.1f}' if rng else '—'} | "
                f"{_f(r.get('tflops'), '{:.0f}')} | {_f(vs, '{:.3f}')} | "
                f"{_f(r.get('rel_error'), '{:.2e}')} | {note[:120]} |")
        lines += ["", "| bf16 policy | served | precision | µs | vs bf16 cuBLAS | rel. error | "
                  "within bound |", "|---|---|---|---|---|---|---|"]
        for b in served_by_bound(rows, meta.get("bounds") or {}):
            within = "—" if b["within"] is None else "yes" if b["within"] else "NO"
            lines.append(f"| {b['policy']} | {b['backend']} | {b['precision']} | "
                         f"{_f(b['us'], '{:.1f}')} | {_f(b['vs_cublas'], '{:.3f}')} | "
                         f"{_f(b['rel_error'], '{:.2e}')} | {within} |")
        lines += ["", "| target | ratio | served precision | served error | met |",
                  "|---|---|---|---|---|"]
        for t in s.get("targets") or []:
            lines.append(f"| {t['target']} | {_f(t.get('ratio'), '{:.3f}')} | "
                         f"{t.get('precision') or '—'} | {_f(t.get('rel_error'), '{:.3g}')} | "
                         f"{'yes' if t['met'] else 'NO'} |")
        lines.append("")
    return "\n".join(lines)
