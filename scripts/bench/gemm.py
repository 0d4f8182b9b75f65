"""Tuned GEMMs side by side with cuBLAS, CUTLASS and torch.compile, per shape (a GPU run).

For each shape of a shapes file (``docs/benchmarks/gemm_public.json``, ``gemm_hard.json``):
tune it through the embedded service and one local worker (one database and one calibration
for the whole run) with a stated policy and budget, then re-measure, interleaved over several
rounds on the same fresh inputs through the worker's own verification task
(``workers.execute``: each contender checked against the reference into a NaN-poisoned output,
then timed with CUDA events and the clean-L2 read flush): cuBLAS (plain ``torch.matmul``), the
job's best CUTLASS op, and the kernel the service serves (the decision's pick, whatever its
backend: a Triton tier, the repaired library, ...). PyTorch's
``torch.compile(mode="max-autotune-no-cudagraphs")`` is the peer: no backend of the worker runs
it, so it is checked against the same reference and timed with the worker's ``EventBench``
here. Per shape: the verdict, the served kernel's speed-up over cuBLAS and share of the
roofline (the decision's attainable time, from the calibrated peaks, over the served time), the
trials, the tuning seconds, and the issue's target for the shape's class (issue 18:
``gemm_report.target``). Prints a table, writes JSON and Markdown after every shape (a run cut
short keeps what it measured), and dumps every measurement the tuning made.

    python -m scripts.bench gemm --shapes docs/benchmarks/gemm_hard.json --policy agent \
        --out /tmp/bench [--only 0,3,5] [--deadline 420]
    python -m scripts.bench gemm --shapes docs/benchmarks/gemm_public.json --trials 64 \
        --out /tmp/bench   # full search (the default policy of this command), as before
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from scripts.bench import gemm_report
from search.kinds.gemm.spec import GemmProblem
from search.types import Candidate, Measurement, Status, Task
from service.client import KernelSearchError


def interleaved(problem: GemmProblem, named: dict[str, tuple[str, dict[str, Any]]],
                rounds: int, flush_mode: str = "read") -> dict[str, dict[str, Any]]:
    """The ``named`` contenders (``name -> (backend, config)``, one to three) re-measured in
    rotating order by the worker's verification task: ``name -> {us, spread_us, rel_error}``
    (the median and range of the rounds)."""
    from workers.execute import execute

    opts = {"flush_mode": flush_mode, "max_reps": 500, "verify_max_reps": 500}
    names = list(named)
    if len(names) == 1:
        backend, config = named[names[0]]
        got = Measurement.from_dict(execute(Candidate(problem, backend, config).to_dict(), opts))
        if got.status != Status.OK:
            raise RuntimeError(f"{names[0]} on {problem.describe()}: {got.status}: {got.error}")
        return {names[0]: {"us": got.median_us, "spread_us": [got.p20_us, got.p80_us],
                           "rel_error": got.rel_error}}
    sides = dict(zip(names, ("library", "reference", "custom"), strict=False))
    spec: dict[str, Any] = {"rounds": rounds}
    for name, side in sides.items():
        backend, config = named[name]
        spec[side] = {"backend": backend, "config": config}
    got = Measurement.from_dict(execute(
        Candidate.of_task(problem, Task.VERIFY.value, spec).to_dict(), opts))
    if got.status != Status.OK:
        raise RuntimeError(f"side by side on {problem.describe()}: {got.status}: {got.error}")
    out: dict[str, dict[str, Any]] = {}
    for name, side in sides.items():
        values = got.extra[f"{side}_us"]
        out[name] = {"us": statistics.median(values), "spread_us": [min(values), max(values)],
                     "rel_error": got.extra[f"{side}_rel_error"]}
    return out


def max_autotune(problem: GemmProblem, rounds: int) -> dict[str, Any]:
    """The peer: ``torch.compile`` max-autotune of ``torch.matmul``, checked against the
    reference on fresh inputs, then timed like a worker times a kernel."""
    import torch

    from kernel_templates.gemm.inputs import make_inputs
    from kernel_templates.gemm.reference import reference_for, rel_error, tolerance_for
    from workers.bench import EventBench

    sets = [make_inputs(problem, "cuda", seed=1000 + i) for i in range(3)]
    torch._dynamo.reset()
    fn = torch.compile(torch.matmul, mode="max-autotune-no-cudagraphs", dynamic=False)
    t0 = time.perf_counter()
    got = fn(sets[0].a, sets[0].b)
    torch.cuda.synchronize()
    info: dict[str, Any] = {"max-autotune_compile_s": time.perf_counter() - t0}
    err = rel_error(got, reference_for(sets[0]))
    info["max-autotune_rel_error"] = err
    if not err <= tolerance_for(problem, None):
        raise RuntimeError(f"max-autotune is wrong on {problem.describe()}: {err:.2e}")
    calls = [(lambda s=s: fn(s.a, s.b)) for s in sets]
    values = [EventBench(max_reps=500)(calls).median_us for _ in range(rounds)]
    info["max-autotune_us"] = statistics.median(values)
    info["max-autotune_spread_us"] = [min(values), max(values)]
    return info


def add_arguments(ap: argparse.ArgumentParser) -> None:
    """The ``gemm`` subcommand's options."""
    from search import kinds
    from service.settings import ServiceSettings

    ap.add_argument("--shapes", type=Path, default=Path("docs/benchmarks/gemm_public.json"))
    ap.add_argument("--trials", type=int, default=None, help="custom-trial budget per shape "
                    "(default: 64 with --policy full, the service's default budget with agent)")
    ap.add_argument("--policy", choices=("full", "agent"), default="full",
                    help="full: every early stop off (measures the search itself); agent: the "
                         f"service's default policy (its default budget is "
                         f"{ServiceSettings().default_max_trials} trials)")
    ap.add_argument("--backends", default=",".join(kinds.get("gemm").backends),
                    help="job backends (default: every GEMM backend)")
    ap.add_argument("--only", default="", help="comma-separated shape indices")
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--db", default=None, help="SQLite file (default: a fresh one under --out, "
                    "so no earlier measurement is reused)")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--no-peer", action="store_true", help="skip torch.compile max-autotune")
    ap.add_argument("--timeout", type=float, default=420.0, help="per job, seconds")
    ap.add_argument("--deadline", type=float, default=None,
                    help="seconds from the start after which no new shape starts")
    ap.add_argument("--cutlass-compile-s", type=float, default=None,
                    help="the jobs' policy.cutlass_compile_s (default: the service's); 0 keeps "
                         "the CUTLASS search to the ops a prebuilt cache holds")


def run(args: argparse.Namespace) -> int:
    """Tune and time every chosen shape; write bench_gemm.{json,md} and measurements.json."""
    import torch
    import triton

    from service.local import LocalCluster
    from service.settings import ServiceSettings

    started = time.monotonic()
    args.out.mkdir(parents=True, exist_ok=True)
    shapes = json.loads(args.shapes.read_text())["shapes"]
    picked = [int(i) for i in args.only.split(",") if i] or list(range(len(shapes)))
    db_path = args.db or str(args.out / "bench.db")
    trials = args.trials or (64 if args.policy == "full" else
                             ServiceSettings().default_max_trials)
    backends = [b for b in args.backends.split(",") if b]
    rows: list[dict[str, Any]] = []
    measurements: list[dict[str, Any]] = []
    meta: dict[str, Any] = {}
    with LocalCluster(ServiceSettings(database_url=f"sqlite:///{db_path}")) as cluster:
        device = cluster.device
        meta = {"gpu": device.gpu_model, "sm_count": device.sm_count, "driver": device.driver,
                "cuda": device.cuda, "torch": torch.__version__, "triton": triton.__version__,
                "python": platform.python_version(), "date": datetime.now(UTC).isoformat(),
                "trials": trials, "rounds": args.rounds, "policy": args.policy,
                "backends": backends, "shapes": str(args.shapes),
                "cutlass_compile_s": args.cutlass_compile_s}
        for i in picked:
            shape = shapes[i]
            row: dict[str, Any] = {"index": i, "shape": f"{shape['m']}x{shape['n']}x{shape['k']}",
                                   "dtype": shape.get("dtype", "bf16"),
                                   "class": shape.get("class", "")}
            if args.deadline is not None and time.monotonic() - started > args.deadline:
                row.update(reason=f"not started: past the {args.deadline:.0f} s deadline")
                rows.append(row)
                continue
            print(f"== {row['shape']} {row['dtype']} ({row['class']})", flush=True)
            job = _tune(cluster, shape, row, trials, args, backends)
            if job is not None:
                trials_of = _trials(cluster, job)
                measurements.append({"problem_key": job.get("problem_key"),
                                     "gpu": device.gpu_model, "trials": trials_of})
                resolved = gemm_report.served_resolved(row, trials_of)
                if resolved:
                    row["served_resolved"] = resolved
                if not meta.get("calibration"):
                    cals = cluster.client.calibrations()["items"]
                    meta["calibration"] = cals[0] if cals else None
            rows.append(row)
            print("   " + json.dumps({k: v for k, v in row.items()
                                      if k not in ("served_config", "rationale")}), flush=True)
            _write(args.out, meta, rows, measurements)
    _write(args.out, meta, rows, measurements)
    print(gemm_report.render(meta, rows))
    return 0


def _tune(cluster: Any, shape: dict[str, Any], row: dict[str, Any], trials: int,
          args: argparse.Namespace, backends: list[str]) -> dict[str, Any] | None:
    """One shape's job, then its side by side and the peer, into ``row``; the job."""
    dtype = row["dtype"]
    problem = {"kind": "gemm", "m": shape["m"], "n": shape["n"], "k": shape["k"],
               "dtype": dtype, "layout_b": "col" if dtype == "fp8_e4m3" else "row"}
    policy = {"full_search": args.policy == "full", "allow_tf32": dtype == "fp32"}
    if args.cutlass_compile_s is not None:
        policy["cutlass_compile_s"] = args.cutlass_compile_s
    t0 = time.monotonic()
    try:
        job = cluster.client.submit_job(problem, budget={"max_trials": trials}, policy=policy,
                                        gpu=cluster.device.gpu_model, backends=backends)
        job = cluster.wait(job["id"], poll_s=0.2, timeout_s=args.timeout)
    except (KernelSearchError, RuntimeError) as exc:
        row.update(reason=str(exc))
        print(f"   not served: {exc}", flush=True)
        return None
    d = job.get("decision") or {}
    spend = d.get("spend") or {}
    row.update(job_status=job["status"], verdict=d.get("verdict"), tuning_s=time.monotonic() - t0,
               trials_custom=(spend.get("custom") or {}).get("trials"),
               trials_library=sum((spend.get(k) or {}).get("trials", 0)
                                  for k in ("library", "cutlass")),
               gpu_s=sum(float((v or {}).get("gpu_s", 0.0)) for k, v in spend.items()
                         if k != "calibration"),
               bound=d.get("bound"), attainable_us=d.get("attainable_us"),
               efficiency_library=d.get("efficiency_library"),
               speedup_vs_cublas=d.get("speedup_vs_cublas"), rationale=d.get("rationale"),
               error=job.get("error"))
    gp = GemmProblem.from_dict(problem)
    try:
        named = gemm_report.contenders(d)
        timed = interleaved(gp, named, args.rounds)
        row.update({f"{name}_us": t["us"] for name, t in timed.items()})
        row["side_by_side"] = timed
        row.update(gemm_report.served_row(d, timed))
        if not args.no_peer:
            row.update(max_autotune(gp, args.rounds))
            if row.get("served_us") and row.get("max-autotune_us"):
                row["served_vs_max_autotune"] = row["max-autotune_us"] / row["served_us"]
    except Exception as exc:  # noqa: BLE001 - a failed re-measurement must not lose the job
        row["side_by_side_error"] = repr(exc)
        row.update(gemm_report.served_row(d, {}))
        print(f"   side by side failed: {exc!r}", flush=True)
    row.update(gemm_report.target(row["class"], row))
    return job


def _trials(cluster: Any, job: dict[str, Any]) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = []
    while True:
        page = cluster.client.trials(job["problem_id"], limit=200, offset=len(items))
        batch = page.get("items", [])
        items.extend(batch)
        if not batch or len(items) >= page.get("total", 0):
            return items


def _write(out: Path, meta: dict[str, Any], rows: list[dict[str, Any]],
           measurements: list[dict[str, Any]]) -> None:
    (out / "bench_gemm.json").write_text(json.dumps({"meta": meta, "rows": rows}, indent=1,
                                                    default=str))
    (out / "measurements.json").write_text(json.dumps({"meta": meta, "problems": measurements},
                                                      default=str))
    (out / "bench_gemm.md").write_text(gemm_report.render(meta, rows))
