"""GEMM benchmark (a GPU run on purpose, not a test).

For each shape of the public benchmark file: tune it through the embedded service and a local
worker with a stated trial budget (cuBLAS is a candidate), then time side by side in this one
process, interleaved over several rounds, cuBLAS, the best Triton configuration and PyTorch's
``torch.compile(mode="max-autotune-no-cudagraphs")`` as the peer to beat. Every kernel's output
is checked against the reference before it is timed. Prints a table, writes JSON and Markdown,
and dumps every measurement the tuning made (for the CPU replay tests).

    python3 scripts/bench_gemm.py --shapes ../shared/bench/gemm_public.json --trials 64 \
        --out /tmp/bench [--only 0,2,7,8]
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402
import triton  # noqa: E402

from kernel_templates.gemm.inputs import make_inputs  # noqa: E402
from kernel_templates.gemm.reference import reference_matmul, rel_error, tolerance  # noqa: E402
from kernel_templates.registry import make_callable  # noqa: E402
from search.types import Candidate, GemmProblem  # noqa: E402
from service.client import KernelSearchError  # noqa: E402
from workers.bench import EventBench  # noqa: E402
from workers.device import detect_device  # noqa: E402
from workers.local import run_tuning  # noqa: E402


def side_by_side(problem: GemmProblem, configs: dict[str, Candidate | None], rounds: int,
                 peer: bool) -> dict[str, Any]:
    """Interleaved rounds (A B C A B C …) of each contender on the same fresh inputs."""
    sets = [make_inputs(problem, "cuda", seed=1000 + i) for i in range(3)]
    ref = reference_matmul(sets[0].a, sets[0].b)
    fns: dict[str, list[Any]] = {}
    info: dict[str, Any] = {}
    for name, cand in configs.items():
        if cand is None:
            continue
        fns[name] = [make_callable(cand, s) for s in sets]
    if peer:
        torch._dynamo.reset()
        fn = torch.compile(torch.matmul, mode="max-autotune-no-cudagraphs", dynamic=False)
        t0 = time.perf_counter()
        fn(sets[0].a, sets[0].b)
        torch.cuda.synchronize()
        info["max-autotune_compile_s"] = time.perf_counter() - t0
        fns["max-autotune"] = [(lambda s=s: fn(s.a, s.b)) for s in sets]
    for name, calls in fns.items():
        sets[0].out.fill_(float("nan"))
        got = calls[0]()
        got = sets[0].out if got is None else got
        torch.cuda.synchronize()
        err = rel_error(got, ref)
        info[f"{name}_rel_error"] = err
        if not err <= tolerance(problem):
            raise RuntimeError(f"{name} is wrong on {problem.describe()}: rel error {err:.2e}")
    # The default (read) flush leaves L2 clean; the write flush of triton.testing.do_bench
    # leaves it dirty. Both are reported for cuBLAS and Triton, to show what the method costs.
    bench, bench_w = EventBench(), EventBench(flush_mode="write")
    medians: dict[str, list[float]] = {name: [] for name in fns}
    medians.update({f"{name}_writeflush": [] for name in ("cublas", "triton") if name in fns})
    for _ in range(rounds):
        for name, calls in fns.items():
            medians[name].append(bench(calls).median_us)
            if f"{name}_writeflush" in medians:
                medians[f"{name}_writeflush"].append(bench_w(calls).median_us)
    for name, values in medians.items():
        info[f"{name}_us"] = statistics.median(values)
        info[f"{name}_spread_us"] = [min(values), max(values)]
    return info


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--shapes", type=Path, default=Path("../shared/bench/gemm_public.json"))
    ap.add_argument("--trials", type=int, default=64)
    ap.add_argument("--only", default="", help="comma-separated shape indices")
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--db", default=None, help="SQLite file (default: a fresh one, so no "
                    "earlier measurement is reused)")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--no-peer", action="store_true")
    args = ap.parse_args()
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
            # early stops are benchmarked by scripts/bench_agent.py)
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
        contenders = {
            "cublas": Candidate(gp, "cublas", {}),
            "triton": Candidate(gp, "triton", custom["config"]) if custom else None,
        }
        try:
            row.update(side_by_side(gp, contenders, args.rounds, peer=not args.no_peer))
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


if __name__ == "__main__":
    main()
