"""Attention problems tuned through the service, every library backend beside the served kernel.

For each shape of the attention benchmark file (``batch, heads, kv_heads, s_q, s_kv, d,
causal``; bf16 unless the file says otherwise): one job through the embedded service and a local
worker at the service's default budget, all of the kind's backends allowed. The table is read
from the job's own evidence, nothing is timed twice: each library backend's first-stage
measurement (every SDPA backend that accepts the problem, and FlexAttention), the best custom
(Triton) kernel, what the decision serves, TFLOP/s (GB/s where the roofline is memory-bound),
the verdict, trials and wall seconds. One database for the run: the GPU is calibrated once.

Where the library is sufficient the job ends before any custom trial (verdict 1), and the
table would say nothing of the templates there: for each such shape a second job with
``force_custom`` and ``--forced-trials`` custom trials measures them (the "forced Triton"
columns; its verdict is not the service's answer, the first job's is).

    python -m scripts.bench attention --shapes ../shared/bench/attention_public.json \
        --out /tmp/attn [--only 0,5] [--trials 64] [--forced-trials 16]
"""

from __future__ import annotations

import argparse
import json
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

FIELDS = ("batch", "heads", "kv_heads", "s_q", "s_kv", "d", "causal")


def add_arguments(ap: argparse.ArgumentParser) -> None:
    ap.add_argument("--shapes", type=Path, required=True, help="attention benchmark JSON")
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--only", default=None, help="comma-separated shape indices")
    ap.add_argument("--trials", type=int, default=None,
                    help="custom-trial budget (default: the service's)")
    ap.add_argument("--dtype", default="bf16")
    ap.add_argument("--timeout", type=float, default=600.0, help="seconds per job")
    ap.add_argument("--forced-trials", type=int, default=16,
                    help="custom trials of the force_custom job run where verdict 1 ended the "
                         "first before any custom trial (0: none)")


def _problem(shape: dict[str, Any], dtype: str) -> dict[str, Any]:
    return {"kind": "attention", "dtype": shape.get("dtype", dtype),
            **{k: shape[k] for k in FIELDS if k in shape}}


def _row(problem: dict[str, Any], job: dict[str, Any], wall_s: float) -> dict[str, Any]:
    d = job.get("decision") or {}
    rf = d.get("roofline") or {}
    bound = d.get("bound")
    flops, nbytes = rf.get("flops"), rf.get("bytes")

    def rate(us: float | None) -> float | None:
        if not us:
            return None
        if bound == "memory" and nbytes:
            return nbytes / (us * 1e-6) / 1e9  # GB/s
        return flops / (us * 1e-6) / 1e12 if flops else None  # TFLOP/s

    library: dict[str, float] = {}
    for t in d.get("library_trials") or []:
        if t.get("status") == "ok" and t.get("median_us"):
            b = t["backend"]
            library[b] = min(library.get(b, float("inf")), float(t["median_us"]))
    custom = job.get("custom_best") or {}
    served = d.get("custom") if d.get("chosen") == "custom" else d.get("library")
    spend = d.get("spend") or {}
    return {"problem": problem, "status": job.get("status"), "verdict": d.get("verdict"),
            "bound": bound, "library_us": library,
            "library_rate": {b: rate(us) for b, us in library.items()},
            "triton_backend": custom.get("backend"), "triton_us": custom.get("median_us"),
            "triton_config": custom.get("config"), "triton_rate": rate(custom.get("median_us")),
            "served_backend": (served or {}).get("backend"),
            "served_us": (served or {}).get("median_us"),
            "served_rate": rate((served or {}).get("median_us")),
            "speedup_vs_baseline": d.get("speedup_vs_cublas"), "baseline": d.get("baseline"),
            "custom_trials": (spend.get("custom") or {}).get("trials"),
            "gpu_s": round(sum((v or {}).get("gpu_s", 0.0) for k, v in spend.items()
                               if k != "calibration"), 2),
            "wall_s": round(wall_s, 1), "error": job.get("error")}


def _table(rows: list[dict[str, Any]]) -> str:
    backends = sorted({b for r in rows for b in r["library_us"]})
    head = (["shape", "bound"] + [f"{b} us" for b in backends]
            + ["best Triton us", "Triton rate", "served", "served rate", "verdict", "trials",
               "GPU-s", "wall s"])
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]

    def f(x: float | None, fmt: str = "{:.1f}") -> str:
        return "—" if x is None else fmt.format(x)

    for r in rows:
        p = r["problem"]
        shape = (f"b{p['batch']} h{p['heads']}/{p.get('kv_heads', p['heads'])} "
                 f"s{p['s_q']}x{p['s_kv']} d{p['d']}{' causal' if p.get('causal') else ''}")
        unit = "GB/s" if r["bound"] == "memory" else "TFLOP/s"
        forced = r.get("forced") or {}
        triton_us = r["triton_us"] if r["triton_us"] is not None else forced.get("triton_us")
        triton_rate = (r["triton_rate"] if r["triton_us"] is not None
                       else forced.get("triton_rate"))
        mark = " (forced)" if r["triton_us"] is None and triton_us is not None else ""
        cells = ([shape, str(r["bound"])] + [f(r["library_us"].get(b)) for b in backends]
                 + [f(triton_us) + mark, f"{f(triton_rate, '{:.0f}')} {unit}",
                    str(r["served_backend"]),
                    f"{f(r['served_rate'], '{:.0f}')} {unit}", str(r["verdict"]),
                    str(r["custom_trials"]), f(r["gpu_s"]), f(r["wall_s"])])
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def run(args: argparse.Namespace) -> int:
    from service.local import LocalCluster
    from service.settings import ServiceSettings

    shapes = json.loads(args.shapes.read_text())["shapes"]
    picked = ([int(i) for i in args.only.split(",")] if args.only else range(len(shapes)))
    args.out.mkdir(parents=True, exist_ok=True)
    settings = ServiceSettings(database_url=f"sqlite:///{args.out / 'attention.db'}")
    rows: list[dict[str, Any]] = []
    with LocalCluster(settings) as cluster:
        for i in picked:
            problem = _problem(shapes[i], args.dtype)
            budget = {"max_trials": args.trials or settings.default_max_trials,
                      "max_seconds": args.timeout}
            started = time.monotonic()
            job = cluster.client.submit_job(problem, budget=budget,
                                            gpu=cluster.device.gpu_model)
            job = cluster.wait(job["id"], poll_s=0.5, timeout_s=args.timeout + 60)
            row = _row(problem, job, time.monotonic() - started)
            if row["triton_us"] is None and args.forced_trials > 0:
                started = time.monotonic()
                forced = cluster.client.submit_job(
                    problem, budget={"max_trials": args.forced_trials,
                                     "max_seconds": args.timeout},
                    gpu=cluster.device.gpu_model, policy={"force_custom": True})
                forced = cluster.wait(forced["id"], poll_s=0.5, timeout_s=args.timeout + 60)
                row["forced"] = _row(problem, forced, time.monotonic() - started)
            rows.append(row)
            print(_table(rows[-1:]), flush=True)
        gpu = cluster.device.gpu_model
    report = {"date": datetime.now(UTC).isoformat(timespec="seconds"), "gpu": gpu,
              "shapes": str(args.shapes), "rows": rows}
    (args.out / "attention.json").write_text(json.dumps(report, indent=1))
    (args.out / "attention.md").write_text(f"GPU: {gpu}\n\n{_table(rows)}\n")
    print(_table(rows))
    return 0 if all(r["status"] == "done" for r in rows) else 1
