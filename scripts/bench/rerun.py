"""Compare a re-run of the decision-loop benchmark with run 9 (no GPU).

Issue 18 asks that no shape of ``gemm_public.json`` come out with a worse verdict or speed-up
than run 9 (``docs/benchmarks/agent_h100_2026-11-24.md``) beyond noise. This reads the
``agent_bench.json`` that ``python -m scripts.bench agent --modes agent`` wrote and a baseline
summary holding run 9's values per shape (``run9_verdict``, ``run9_vs_cublas``, ``run9_noise``:
an earlier re-run's summary, e.g. ``docs/benchmarks/gemm_public_rerun_h100_2026-11-27.json``),
and writes the per-shape comparison as a compact JSON summary and a Markdown table.

A row's ``line``: ``worse`` when the speed-up over cuBLAS fell by more than run 9's noise;
``verdict changed`` (with ``faster`` or ``within noise``) when the verdict differs but the
speed-up did not fall; ``better`` when it rose by more than the noise; else ``same``.

    python -m scripts.bench rerun --run OUT/agent/agent_bench.json \\
        --baseline docs/benchmarks/gemm_public_rerun_h100_2026-11-27.json --out DIR
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

__all__ = ["add_arguments", "compare", "line", "render", "run", "served_label"]


def add_arguments(ap: argparse.ArgumentParser) -> None:
    """The ``rerun`` subcommand's options."""
    ap.add_argument("--run", type=Path, required=True, help="agent_bench.json of the re-run")
    ap.add_argument("--baseline", type=Path, required=True,
                    help="a summary whose rows carry run 9's values per shape index")
    ap.add_argument("--out", type=Path, default=None, help="where to write rerun.json/.md")


def served_label(decision: dict[str, Any]) -> str:
    """A short name for the served kernel (``cuBLASLt rank 0, unsplit``, ``CUTLASS
    128x128x128 2x1x1 ping-pong``)."""
    backend, config = decision.get("backend"), dict(decision.get("config") or {})
    if backend == "cublas":
        return "cuBLAS"
    if backend == "cublaslt":
        words = [f"rank {config.get('rank')}"]
        words += ["unsplit"] if config.get("split_k") == 1 else []
        words += [f"cluster {config['cluster']}"] if "cluster" in config else []
        words += [f"option {config['custom']}"] if "custom" in config else []
        return "cuBLASLt " + ", ".join(words)
    if backend == "cutlass" and config.get("op"):
        op = str(config["op"])
        extents = [p for p in op.split("_") if p.count("x") == 2 and p[0].isdigit()]
        schedule = ("ping-pong" if "pingpong" in op else
                    "stream-K" if "stream_k" in op else "cooperative")
        return " ".join(["CUTLASS", *extents[:2], schedule])
    return {"triton_skinny": "Triton skinny", "triton": "Triton"}.get(str(backend), str(backend))


def line(ratio: float, noise: float, verdict_now: str | None, verdict_then: str) -> str:
    """How a shape compares with run 9 (see the module docstring)."""
    if ratio < 1 - noise:
        return "worse"
    if verdict_now != verdict_then:
        return "verdict changed; " + ("faster" if ratio > 1 else "within noise")
    if ratio > 1 + noise:
        return "better"
    return "same" if abs(ratio - 1) < 0.005 else "same (within noise)"


def compare(bench: dict[str, Any], baseline: dict[str, Any]) -> list[dict[str, Any]]:
    """One row per shape the re-run's agent mode ran that the baseline has."""
    then = {int(r["index"]): r for r in baseline["rows"]}
    rows = []
    for key, job in sorted(bench["jobs"]["agent"].items(), key=lambda kv: int(kv[0])):
        i = int(key)
        if i not in then:
            continue
        b, d = then[i], job.get("decision") or {}
        vs = float(d.get("speedup_vs_cublas") or 1.0)
        ratio = vs / float(b["run9_vs_cublas"])
        spend = {k: round(float((v or {}).get("gpu_s", 0.0)), 3)
                 for k, v in (d.get("spend") or {}).items() if k != "calibration"}
        rows.append({
            "index": i, "shape": b["shape"], "dtype": b["dtype"],
            "run9_verdict": b["run9_verdict"], "verdict_now": d.get("verdict"),
            "served_backend": d.get("backend"), "served_config": d.get("config"),
            "served": served_label(d), "run9_vs_cublas": b["run9_vs_cublas"],
            "vs_cublas_now": round(vs, 4), "now_over_run9": round(ratio, 4),
            "run9_noise": b["run9_noise"],
            "line": line(ratio, float(b["run9_noise"]), d.get("verdict"), b["run9_verdict"]),
            "custom_trials": ((d.get("spend") or {}).get("custom") or {}).get("trials"),
            "gpu_s": round(sum(spend.values()), 3), "gpu_s_by_stage": spend,
            "wall_s": job.get("wall_s"), "rationale": d.get("rationale")})
    return rows


def render(rows: list[dict[str, Any]]) -> str:
    """The Markdown table of ``compare``'s rows."""
    out = ["| # | shape | dtype | run 9 verdict | verdict now | served now | run 9 vs cuBLAS | "
           "now vs cuBLAS | now / run 9 | run 9 noise | line |",
           "|---|---|---|---|---|---|---:|---:|---:|---:|---|"]
    out += [f"| {r['index']} | {r['shape']} | {r['dtype']} | {r['run9_verdict']} | "
            f"{r['verdict_now']} | {r['served']} | {r['run9_vs_cublas']:.3f} | "
            f"{r['vs_cublas_now']:.3f} | {r['now_over_run9']:.3f} | {r['run9_noise']:.1%} | "
            f"{r['line']} |" for r in rows]
    return "\n".join(out) + "\n"


def run(args: argparse.Namespace) -> int:
    """Print the comparison (and write it under ``--out``); 1 when a shape is worse."""
    rows = compare(json.loads(args.run.read_text()), json.loads(args.baseline.read_text()))
    text = render(rows)
    print(text)
    if args.out is not None:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "rerun.json").write_text(json.dumps({"rows": rows}, indent=1))
        (args.out / "rerun.md").write_text(text)
    return 1 if any(r["line"] == "worse" for r in rows) else 0
