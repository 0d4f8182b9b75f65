"""Decision loop vs full search, per shape of the public GEMM file (a GPU run on purpose).

For each shape of the public GEMM file, two runs through the embedded service and one local
worker, each in its own fresh SQLite database (so neither reuses the other's measurements):

* **agent**: the default policy: calibrate once, measure the library, search custom tiers only
  where the library is under the roofline threshold, stop tiers early, verify interleaved;
* **full**: the same tiers and budget with every early stop disabled (``full_search``).

Per shape it reports the verdict, the GPU-seconds each run spent (compile + benchmark seconds
of every measurement, the calibration listed apart since it is paid once per GPU model) and
the final speed-up over cuBLAS of each (``Decision.speedup_vs_cublas``: the library pick may
be a CUTLASS op), and checks the issue's targets: where the full search cannot beat cuBLAS by
more than noise, the agent spends <= 25% of its GPU time; where it can, the agent's speed-up
over cuBLAS is within 3% of the full search's. "Noise" is the full run's own: the largest
relative spread of the timings its speed-up over cuBLAS comes from (cuBLAS's first-stage
p20-p80, the chosen kernel's, and cuBLAS's round-to-round range when the verification ran it
as the reference), at least 1%.

The first mode's first job calibrates the GPU; the other mode gets that calibration (its
database is seeded with it), so both modes' rooflines are the same measurement, as they would
be for two jobs on one service (``--calibrate-each``: each mode measures its own).

Each mode runs in its own worker with its own, empty Triton cache directory (under ``--out``),
so neither mode loads kernels the other compiled. The budget defaults to the service's default
(``ServiceSettings.default_max_trials``): "the full budget" is what a job gets when it names
none. Writes JSON (with every trial's compile and benchmark seconds), Markdown and the
calibration (for the CPU replay tests).

    python -m scripts.bench agent --shapes docs/benchmarks/gemm_public.json \
        --out /tmp/agent [--only 0,4] [--trials 32]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from search.kinds.gemm.spec import SERVED_DTYPES
from service.local import LocalCluster
from service.settings import ServiceSettings


def run_job(cluster: LocalCluster, problem: dict[str, Any], trials: int,
            policy: dict[str, Any], timeout_s: float, backends: list[str]) -> dict[str, Any]:
    job = cluster.client.submit_job(problem, budget={"max_trials": trials}, policy=policy,
                                    gpu=cluster.device.gpu_model, backends=backends)
    t0 = time.monotonic()
    job = cluster.wait(job["id"], poll_s=0.2, timeout_s=timeout_s)
    job["wall_s"] = time.monotonic() - t0
    return job


#: The decision's spend stages, in the order the agent runs them (calibration, once per GPU
#: model, left out).
STAGES = ("library", "cutlass", "custom", "verify")


def stage_gpu_s(decision: dict[str, Any] | None) -> dict[str, float]:
    """GPU-seconds per stage of a decision (0 for a stage it did not run)."""
    spend = (decision or {}).get("spend") or {}
    return {k: float((spend.get(k) or {}).get("gpu_s", 0.0)) for k in STAGES}


def gpu_s(decision: dict[str, Any] | None) -> float:
    """A decision's GPU-seconds over its stages (the calibration left out)."""
    return sum(stage_gpu_s(decision).values())


def job_trials(cluster: LocalCluster, job: dict[str, Any]) -> list[dict[str, Any]]:
    """Every measurement of the job (each mode has its own database), oldest first; a
    verification with its per-round medians."""
    items: list[dict[str, Any]] = []
    while True:
        page = cluster.client.trials(job["problem_id"], limit=200, offset=len(items))
        items += page["items"]
        if not page["items"] or len(items) >= page.get("total", len(items)):
            break
    keep = ("id", "candidate_id", "backend", "config", "status", "median_us", "p20_us",
            "p80_us", "compile_s", "bench_s")
    # kernel measurements only: the verification's rounds are on the decision
    # (``decision.verification``) and the calibration's passes on ``GET /v1/calibrations``
    # and what a library call resolved to (a cuBLASLt rank's algorithm), where it said
    return [{**{k: t.get(k) for k in keep},
             **({"resolved": t["extra"]["resolved"]}
                if (t.get("extra") or {}).get("resolved") else {})}
            for t in sorted(items, key=lambda t: t["id"]) if t.get("job_id") == job["id"]]


def _rel_spread(t: dict[str, Any] | None) -> float | None:
    if not t or not t.get("median_us") or t.get("p20_us") is None or t.get("p80_us") is None:
        return None
    return (t["p80_us"] - t["p20_us"]) / t["median_us"]


def noise(decision: dict[str, Any]) -> float:
    """The relative noise of a decision's speed-up over cuBLAS: the largest spread of
    cuBLAS's first-stage timing (p20-p80), of the chosen kernel's and, when the verification
    ran cuBLAS as its reference, of cuBLAS's rounds, at least 1%."""
    cublas = [t for t in decision.get("library_trials") or []
              if t.get("backend") == "cublas" and t.get("status") == "ok"]
    chosen = decision.get("custom") if decision.get("chosen") == "custom" else \
        decision.get("library")
    spreads = [_rel_spread(t) for t in cublas]
    for pick in (chosen, decision.get("reference")):
        if pick and pick.get("median_us") and pick.get("spread_us") is not None:
            spreads.append(pick["spread_us"] / pick["median_us"])
    return max([0.01, *(x for x in spreads if x is not None)])


def seed_calibration(database_url: str, cal: dict[str, Any]) -> None:
    """Store ``cal`` (as ``GET /v1/calibrations`` lists it) in a migrated database."""
    from datetime import UTC

    from db import calibrations
    from db.engine import Database

    db = Database(database_url)
    try:
        with db.session() as s:
            calibrations.add_calibration(
                s, cal["gpu"], float(cal["bandwidth_gbs"]), dict(cal["peak_tflops"]),
                dict(cal["env"]), datetime.now(UTC),
                peak_low_tflops=dict(cal.get("peak_low_tflops") or {}))
    finally:
        db.engine.dispose()


def target(row: dict[str, Any]) -> dict[str, Any]:
    """The issue's target for this shape and whether the agent met it."""
    full, agent = row.get("full_vs_cublas"), row.get("agent_vs_cublas")
    if full is not None and full > 1 + row["noise"]:
        return {"target": "speed-up vs cuBLAS within 3% of full",
                "met": agent is not None and agent >= 0.97 * full}
    ratio = row.get("gpu_ratio")
    return {"target": "GPU time <= 25% of full", "met": ratio is not None and ratio <= 0.25}


def add_arguments(ap: argparse.ArgumentParser) -> None:
    """The ``agent`` subcommand's options."""
    ap.add_argument("--shapes", default="docs/benchmarks/gemm_public.json")
    ap.add_argument("--trials", type=int, default=ServiceSettings().default_max_trials,
                    help="custom-trial budget per job (default: the service's default budget)")
    ap.add_argument("--out", required=True)
    ap.add_argument("--only", default="", help="comma-separated shape indices")
    ap.add_argument("--timeout", type=float, default=300.0, help="per job, seconds")
    ap.add_argument("--interpret", action="store_true", help="CPU smoke run (no GPU numbers)")
    ap.add_argument("--modes", default="agent,full", help="which runs: agent, full or both")
    ap.add_argument("--backends", default="cublas,triton",
                    help="job backends (cuBLAS is the library the targets compare with)")
    ap.add_argument("--calibrate-each", action="store_true",
                    help="each mode measures its own calibration (default: the first mode's "
                         "is given to the other)")
    ap.add_argument("--cutlass-compile-s", type=float, default=300.0,
                    help="compile-seconds of the CUTLASS search of every job with CUTLASS (cached "
                         "ops are free; 0: the prebuilt cache's ops only)")
    ap.add_argument("--merge", default="", help="comma-separated agent_bench.json files of "
                    "earlier runs on the same GPU model (e.g. the other mode, or other shapes) "
                    "to report side by side; with --modes '' nothing runs and the report is "
                    "made from them")


def run(args: argparse.Namespace) -> int:
    """Run the chosen modes over the chosen shapes; write agent_bench.{json,md} under --out."""
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    shapes = json.loads(Path(args.shapes).read_text())["shapes"]
    only = {int(i) for i in args.only.split(",") if i.strip()}
    picked = [(i, s) for i, s in enumerate(shapes) if not only or i in only]
    rows: list[dict[str, Any]] = []
    jobs: dict[str, dict[int, dict[str, Any]]] = {"agent": {}, "full": {}}
    calibration: dict[str, Any] | None = None
    measured: dict[str, Any] | None = None  # the calibration this run's first job measured
    started = datetime.now(UTC)
    earlier_meta: dict[str, Any] = {}
    for path in filter(None, args.merge.split(",")):
        earlier = json.loads(Path(path).read_text())
        for mode, by_index in earlier.get("jobs", {}).items():
            jobs[mode].update({int(k): v for k, v in by_index.items()})
        earlier_meta = earlier_meta or earlier.get("meta", {})
        calibration = calibration or earlier.get("meta", {}).get("calibration")
    modes = [m for m in args.modes.split(",") if m]
    for mode in modes:
        settings = ServiceSettings(database_url=f"sqlite:///{out / f'{mode}.db'}")
        # the worker's processes (spawned below) inherit this: an empty cache per mode
        os.environ["TRITON_CACHE_DIR"] = str((out / f"triton-cache-{mode}").resolve())
        with LocalCluster(settings, interpret=args.interpret or None) as cluster:
            # only a calibration measured by this run (not one read with --merge)
            shared = measured is not None and not args.calibrate_each
            if shared:
                seed_calibration(settings.database_url, measured)  # type: ignore[arg-type]
            mode_cal = shared  # this mode's calibration (its first job measures it) is taken
            for i, shape in picked:
                dtype = shape.get("dtype", "bf16")
                # fp8 is served "TN" only (search.types.check_served)
                problem = {"kind": "gemm", "m": shape["m"], "n": shape["n"], "k": shape["k"],
                           "dtype": dtype, "layout_b": "col" if dtype == "fp8_e4m3" else "row"}
                if problem["dtype"] not in SERVED_DTYPES:
                    continue
                # fp32 inputs: the public file allows tf32 by policy
                policy = {"allow_tf32": problem["dtype"] == "fp32",
                          "full_search": mode == "full"}
                backends = args.backends.split(",")
                if dtype == "fp8_e4m3":
                    # the library's fp8 kernels (cuBLAS's _scaled_mm and CUTLASS) against the
                    # Triton fp8 template (the fp8 tier)
                    backends += [] if "cutlass" in backends else ["cutlass"]
                if "cutlass" in backends:
                    policy["cutlass_compile_s"] = args.cutlass_compile_s
                job = run_job(cluster, problem, args.trials, policy, args.timeout, backends)
                job["trials"] = job_trials(cluster, job)
                jobs[mode][i] = job
                if not mode_cal and (calibration is None or mode == "agent"):
                    cals = cluster.client.calibrations()["items"]
                    calibration, mode_cal = (cals[0], True) if cals else (calibration, False)
                    measured = measured or (cals[0] if cals else None)
                # what is done so far, should the run be cut short (--merge reads it)
                (out / "jobs_partial.json").write_text(json.dumps(
                    {"meta": {"partial": True, "calibration": calibration}, "jobs": jobs},
                    default=str))
                d = job.get("decision") or {}
                print(f"[{mode}] {i} {problem['m']}x{problem['n']}x{problem['k']} "
                      f"{problem['dtype']}: {job['status']} {d.get('verdict')} "
                      f"speedup {d.get('speedup')} gpu_s {gpu_s(d):.2f} wall {job['wall_s']:.1f}",
                      flush=True)
    for i, shape in picked:
        dtype = shape.get("dtype", "bf16")
        row: dict[str, Any] = {"index": i, "shape": f"{shape['m']}x{shape['n']}x{shape['k']}",
                               "dtype": dtype, "class": shape.get("class", "")}
        if dtype not in SERVED_DTYPES:
            row["note"] = f"not served: no backend serves {dtype} inputs yet"
            rows.append(row)
            continue
        a, f = jobs["agent"].get(i, {}), jobs["full"].get(i, {})
        da, df = a.get("decision") or {}, f.get("decision") or {}
        row.update({
            "agent_verdict": da.get("verdict"), "full_verdict": df.get("verdict"),
            "agent_speedup": da.get("speedup"), "full_speedup": df.get("speedup"),
            "agent_gpu_s": gpu_s(da), "full_gpu_s": gpu_s(df),
            "agent_trials": (da.get("spend") or {}).get("custom", {}).get("trials"),
            "full_trials": (df.get("spend") or {}).get("custom", {}).get("trials"),
            "agent_wall_s": a.get("wall_s"), "full_wall_s": f.get("wall_s"),
            "efficiency_library": da.get("efficiency_library"), "bound": da.get("bound"),
            "agent_rationale": da.get("rationale"), "full_rationale": df.get("rationale"),
            "agent_status": a.get("status"), "full_status": f.get("status"),
            "agent_vs_cublas": da.get("speedup_vs_cublas"),
            "full_vs_cublas": df.get("speedup_vs_cublas"),
            "agent_spend": stage_gpu_s(da), "full_spend": stage_gpu_s(df),
        })
        ratio = row["agent_gpu_s"] / row["full_gpu_s"] if row["full_gpu_s"] else None
        row["gpu_ratio"] = ratio
        row["noise"] = noise(df)
        row.update(target(row))
        rows.append(row)
    import torch
    import triton

    gpu = torch.cuda.get_device_name() if torch.cuda.is_available() else "cpu-interpreter"
    if not modes and earlier_meta:  # a report of earlier runs: theirs is the machine
        meta = {**earlier_meta, "merged": args.merge}
    else:
        meta = {"date": started.isoformat(timespec="seconds"), "gpu": gpu,
                "torch": torch.__version__, "cuda": torch.version.cuda,
                "triton": triton.__version__, "python": platform.python_version(),
                "trials": args.trials, "calibration": calibration}
    (out / "agent_bench.json").write_text(json.dumps(
        {"meta": meta, "rows": rows, "jobs": jobs}, indent=1, default=str))
    if calibration is not None:
        (out / "h100_calibration.json").write_text(json.dumps(calibration, indent=1))
    (out / "agent_bench.md").write_text(render(meta, rows))
    print(render(meta, rows))
    return 0


def _f(v: Any, fmt: str = "{:.2f}") -> str:
    return "—" if v is None else fmt.format(v)


def render(meta: dict[str, Any], rows: list[dict[str, Any]]) -> str:
    cal = meta.get("calibration") or {}
    lines = [f"Decision loop vs full search — {meta['gpu']}, torch {meta['torch']}, CUDA "
             f"{meta['cuda']}, triton {meta['triton']}, {meta['date']}, budget "
             f"{meta['trials']} custom trials per shape", "",
             f"Calibration (once per GPU model): copy {_f(cal.get('bandwidth_gbs'), '{:.0f}')} "
             f"GB/s (read + write), peaks {json.dumps(cal.get('peak_tflops'))} TFLOP/s", "",
             "| shape | dtype | bound | lib eff | agent verdict | agent trials | agent GPU-s | "
             "full verdict | full trials | full GPU-s | GPU ratio | agent speed-up | "
             "full speed-up | agent vs cuBLAS | full vs cuBLAS | noise | target | met |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        if "note" in r:
            lines.append(f"| {r['shape']} | {r['dtype']} | {r['note']} |" + " |" * 15)
            continue
        lines.append(
            f"| {r['shape']} | {r['dtype']} | {r.get('bound') or '—'} | "
            f"{_f(r.get('efficiency_library'))} | {r['agent_verdict']} | {r['agent_trials']} | "
            f"{_f(r['agent_gpu_s'], '{:.1f}')} | {r['full_verdict']} | {r['full_trials']} | "
            f"{_f(r['full_gpu_s'], '{:.1f}')} | {_f(r['gpu_ratio'])} | "
            f"{_f(r['agent_speedup'], '{:.3f}')} | {_f(r['full_speedup'], '{:.3f}')} | "
            f"{_f(r.get('agent_vs_cublas'), '{:.3f}')} | "
            f"{_f(r.get('full_vs_cublas'), '{:.3f}')} | {_f(r.get('noise'), '{:.1%}')} | "
            f"{r['target']} | "
            f"{'yes' if r['met'] else 'NO'} |")
    spent = [r for r in rows if "agent_spend" in r]
    if spent:
        lines += ["", "GPU-seconds by stage (agent / full): " + ", ".join(STAGES), "",
                  "| shape | dtype | " + " | ".join(STAGES) + " |",
                  "|---|---|" + "---|" * len(STAGES)]
        for r in spent:
            cells = [f"{r['agent_spend'][k]:.2f} / {r['full_spend'][k]:.2f}" for k in STAGES]
            lines.append(f"| {r['shape']} | {r['dtype']} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"
