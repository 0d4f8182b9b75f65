"""Tuned GEMMs side by side with cuBLAS and torch.compile, per public shape (a GPU run).

For each shape of the public benchmark file: tune it through the embedded service and a local
worker with a stated trial budget (cuBLAS is a candidate), then re-measure cuBLAS and the best
Triton configuration interleaved over several rounds on the same fresh inputs, through the
worker's own verification task (``workers.execute``: each contender checked against the
reference into a NaN-poisoned output, then timed with CUDA events), once with the clean-L2
read flush and once with the write flush of ``triton.testing.do_bench``. PyTorch's
``torch.compile(mode="max-autotune-no-cudagraphs")`` is the peer to beat: no backend of the
worker runs it, so it is checked against the same reference and timed with the worker's
``EventBench`` here. Prints a table, writes JSON and Markdown, and dumps every measurement the
tuning made (for the CPU replay tests).

    python -m scripts.bench gemm --shapes docs/benchmarks/gemm_public.json --trials 64 \
        --out /tmp/bench [--only 0,2,7,8]
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from search.kinds.gemm.spec import GemmProblem
from search.types import Candidate, Measurement, Status, Task
from service.client import KernelSearchError


def interleaved(problem: GemmProblem, triton_config: dict[str, Any], rounds: int,
                flush_mode: str) -> dict[str, Any]:
    """cuBLAS and the Triton config re-measured in alternating rounds by the worker's
    verification task; ``{cublas,triton}_us`` are the medians of the rounds."""
    from workers.execute import execute

    spec = {"library": {"backend": "cublas", "config": {}},
            "custom": {"backend": "triton", "config": triton_config}, "rounds": rounds}
    got = Measurement.from_dict(execute(
        Candidate.of_task(problem, Task.VERIFY.value, spec).to_dict(),
        {"flush_mode": flush_mode, "max_reps": 500, "verify_max_reps": 500}))
    if got.status != Status.OK:
        raise RuntimeError(f"side by side on {problem.describe()}: {got.status}: {got.error}")
    out: dict[str, Any] = {}
    for side, name in (("library", "cublas"), ("custom", "triton")):
        values = got.extra[f"{side}_us"]
        out[f"{name}_us"] = statistics.median(values)
        out[f"{name}_spread_us"] = [min(values), max(values)]
        out[f"{name}_rel_error"] = got.extra[f"{side}_rel_error"]
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


def side_by_side(problem: GemmProblem, triton_config: dict[str, Any] | None, rounds: int,
                 peer: bool) -> dict[str, Any]:
    """cuBLAS, the best Triton config (both flushes) and the peer, each checked, then timed."""
    from workers.execute import execute

    info: dict[str, Any] = {}
    if triton_config is None:  # no correct Triton config: cuBLAS alone, as a worker measures it
        got = Measurement.from_dict(execute(Candidate(problem, "cublas", {}).to_dict()))
        info.update(cublas_us=got.median_us, cublas_rel_error=got.rel_error)
    else:
        info.update(interleaved(problem, triton_config, rounds, "read"))
        info.update({k.replace("_us", "_writeflush_us"): v for k, v in
                     interleaved(problem, triton_config, rounds, "write").items()
                     if k.endswith("_us") and "spread" not in k})
    if peer:
        info.update(max_autotune(problem, rounds))
    return info


def add_arguments(ap: argparse.ArgumentParser) -> None:
    """The ``gemm`` subcommand's options."""
    ap.add_argument("--shapes", type=Path, default=Path("docs/benchmarks/gemm_public.json"))
    ap.add_argument("--trials", type=int, default=64)
    ap.add_argument("--only", default="", help="comma-separated shape indices")
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--db", default=None, help="SQLite file (default: a fresh one, so no "
                    "earlier measurement is reused)")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--no-peer", action="store_true", help="skip torch.compile max-autotune")


def run(args: argparse.Namespace) -> int:
    """Tune and time every chosen shape; write bench_gemm.{json,md} and measurements.json."""
    import torch
    import triton

    from service.local import run_tuning
    from workers.device import detect_device

    args.out.mkdir(parents=True, exist_ok=True)
    shapes = json.loads(args.shapes.read_text())["shapes"]
    picked = [int(i) for i in args.only.split(",") if i] or list(range(len(shapes)))
    db_path = args.db or str(Path(tempfile.mkdtemp(prefix="ks-bench-")) / "bench.db")
    db_url = f"sqlite:///{db_path}"
    device = detect_device()
    meta = {"gpu": device.gpu_model, "sm_count": device.sm_count, "driver": device.driver,
            "cuda": device.cuda, "torch": torch.__version__, "triton": triton.__version__,
            "python": platform.python_version(), "date": datetime.now(UTC).isoformat(),
            "trials": args.trials, "rounds": args.rounds}
    rows: list[dict[str, Any]] = []
    measurements: list[dict[str, Any]] = []
    for i in picked:
        shape = shapes[i]
        dtype = shape.get("dtype", "bf16")
        problem = {"kind": "gemm", "m": shape["m"], "n": shape["n"], "k": shape["k"],
                   "dtype": dtype}
        row: dict[str, Any] = {"index": i, "shape": f"{shape['m']}x{shape['n']}x{shape['k']}",
                               "dtype": dtype, "class": shape.get("class", "")}
        print(f"== {row['shape']} {dtype} ({row['class']})", flush=True)
        try:
            # full_search: this benchmark measures the search itself (the decision loop's
            # early stops are benchmarked by ``python -m scripts.bench agent``)
            result = run_tuning(problem, {"max_trials": args.trials}, database_url=db_url,
                                policy={"full_search": True})
        except KernelSearchError as exc:
            row.update(served=False, reason=str(exc))
            rows.append(row)
            print(f"   not served: {exc}", flush=True)
            continue
        job = result.job
        lib, custom = job.get("library_best"), job.get("custom_best")
        row.update(served=True, job_status=job["status"], trials=job["progress"]["trials_done"],
                   tuning_s=round(result.wall_s, 1), tuned_cublas_us=lib and lib["median_us"],
                   tuned_triton_us=custom and custom["median_us"],
                   triton_config=custom and custom["config"],
                   winner=job.get("best") and job["best"]["backend"], error=job.get("error"))
        gp = GemmProblem.from_dict(problem)
        try:
            row.update(side_by_side(gp, custom and custom["config"], args.rounds,
                                    peer=not args.no_peer))
        except Exception as exc:  # a failed peer must not lose the tuning result
            row["side_by_side_error"] = repr(exc)
            print(f"   side-by-side failed: {exc!r}", flush=True)
        if row.get("cublas_us") and row.get("triton_us"):
            row["triton_speedup"] = row["cublas_us"] / row["triton_us"]
            # What the service serves is the job's winner; time it as measured side by side.
            chosen = row["triton_us"] if row["winner"] == "triton" else row["cublas_us"]
            row["chosen_us"] = chosen
            row["chosen_speedup"] = row["cublas_us"] / chosen
            row["chosen_tflops"] = gp.tflops(chosen)
            if row.get("max-autotune_us"):
                row["chosen_vs_max_autotune"] = row["max-autotune_us"] / chosen
        rows.append(row)
        print("   " + json.dumps({k: v for k, v in row.items() if k != "triton_config"}),
              flush=True)
        measurements.append(_trials(result, job))
        (args.out / "bench_gemm.json").write_text(json.dumps({"meta": meta, "rows": rows},
                                                             indent=2))
    (args.out / "bench_gemm.json").write_text(json.dumps({"meta": meta, "rows": rows}, indent=2))
    (args.out / "measurements.json").write_text(json.dumps({"meta": meta, "problems":
                                                            measurements}, indent=1))
    table = render(meta, rows)
    (args.out / "bench_gemm.md").write_text(table)
    print(table)
    return 0


def _trials(result: Any, job: dict[str, Any]) -> dict[str, Any]:
    from service.client import KernelSearchClient
    from service.embedded import EmbeddedServer
    from service.settings import ServiceSettings

    with EmbeddedServer(ServiceSettings(database_url=result.database_url)) as server:
        client = KernelSearchClient(server.url)
        items: list[dict[str, Any]] = []
        offset = 0
        while True:
            page = client.trials(job["problem_id"], limit=200, offset=offset)
            batch = page.get("items", [])
            items.extend(batch)
            offset += len(batch)
            if not batch or offset >= page.get("total", 0):
                break
    return {"problem_key": job.get("problem_key"), "gpu": result.gpu_model, "trials": items}


def _f(v: Any, fmt: str = "{:.1f}") -> str:
    return "—" if v is None else fmt.format(v)


def render(meta: dict[str, Any], rows: list[dict[str, Any]]) -> str:
    lines = [f"GEMM benchmark on {meta['gpu']} ({meta['sm_count']} SMs), driver {meta['driver']},"
             f" CUDA {meta['cuda']}, torch {meta['torch']}, triton {meta['triton']},"
             f" {meta['date'][:10]}; budget {meta['trials']} Triton trials per shape;"
             f" side-by-side medians of {meta['rounds']} interleaved rounds.", "",
             "| shape | dtype | class | cuBLAS µs | best Triton µs | Triton/cuBLAS |"
             " winner (tuning) | chosen µs | chosen/cuBLAS | chosen TFLOP/s | max-autotune µs |"
             " chosen vs max-autotune | trials | tuning s |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        if not r.get("served"):
            lines.append(f"| {r['shape']} | {r['dtype']} | {r['class']} | not served: "
                         f"{r.get('reason', '')[:90]} ||||||||||")
            continue
        lines.append(
            f"| {r['shape']} | {r['dtype']} | {r['class']} | {_f(r.get('cublas_us'), '{:.2f}')}"
            f" | {_f(r.get('triton_us'), '{:.2f}')} | {_f(r.get('triton_speedup'), '{:.3f}')}"
            f" | {r.get('winner')} | {_f(r.get('chosen_us'), '{:.2f}')}"
            f" | {_f(r.get('chosen_speedup'), '{:.3f}')} | {_f(r.get('chosen_tflops'))}"
            f" | {_f(r.get('max-autotune_us'), '{:.2f}')}"
            f" | {_f(r.get('chosen_vs_max_autotune'), '{:.3f}')} | {r.get('trials')}"
            f" | {r.get('tuning_s')} |")
    return "\n".join(lines) + "\n"
