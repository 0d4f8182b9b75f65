#!/usr/bin/env python3
"""GPU check of the Triton GEMM template's Hopper variants: the persistent kernel (with and
without warp specialisation, one and two CTAs per cluster) and tf32 inputs, beside the best
tiled configuration and cuBLAS.

For each shape (4096^3 bf16, 2048x4096x14336 bf16, 4096^3 fp32 through tf32) and each entry:
one call into a NaN-poisoned output on fresh random inputs, ``rel_error`` against the float64
reference, accepted under ``kernel_templates.gemm.reference.tolerance_for`` (tf32: widened); then,
if correct, ``workers.bench.EventBench`` (CUDA events, clean-L2 read flush, median of the timed
calls). A few ragged/column-major correctness cases come first. Prints a table, writes
``DIR/gpu_variants.json`` and ``DIR/gpu_variants.md``; exits 1 if any entry was wrong. Meant to
finish in under two minutes on an H100 (compiles included); past ``--deadline`` seconds the
remaining timings are skipped and the table still written.

    PYTHONPATH=. python3 scripts/gpu_variants_check.py --out /tmp/variants
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from kernel_templates.gemm import triton as gemm
from kernel_templates.gemm.inputs import make_inputs
from kernel_templates.gemm.reference import reference_matmul, rel_error, tolerance_for
from search.types import GemmProblem
from workers.bench import EventBench

T0 = time.perf_counter()


def cfg(bm: int, bn: int, bk: int, w: int, s: int, g: int = 8, **extra: Any) -> dict[str, Any]:
    return dict(BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk, GROUP_M=g, SPLIT_K=1, num_warps=w,
                num_stages=s, **extra)


def short(c: dict[str, Any] | None) -> str:
    if c is None:
        return "-"
    out = (f"{c['BLOCK_M']}x{c['BLOCK_N']}x{c['BLOCK_K']} g{c['GROUP_M']} w{c['num_warps']} "
           f"s{c['num_stages']}")
    if c.get("PERSISTENT"):
        out += " P"
    if c.get("WARP_SPECIALIZE"):
        out += " WS"
    if c.get("num_ctas", 1) > 1:
        out += f" ctas{c['num_ctas']}"
    if "INPUT_PRECISION" in c:
        out += f" {c['INPUT_PRECISION']}"
    return out


P = dict(PERSISTENT=1)
WS = dict(PERSISTENT=1, WARP_SPECIALIZE=1)
TF32 = dict(INPUT_PRECISION="tf32")

NO_FLATTEN = {"FLATTEN": 0}
TMA_STORE = {"TMA_STORE": 1}
WS_TILES = {"WS_LOOP": "tiles"}
Entry = tuple[str, dict[str, Any] | None, dict[str, Any]]

# (label, config or None for cuBLAS, the persistent kernel's keys this entry adds)
BF16_ENTRIES: list[Entry] = [
    ("cuBLAS", None, {}),
    ("tiled (TMA auto)", cfg(128, 256, 64, 8, 3), {}),
    ("tiled + WS", cfg(128, 256, 64, 8, 3, WARP_SPECIALIZE=1), {}),
    ("persistent", cfg(128, 256, 64, 8, 3, **P), {}),
    ("persistent", cfg(128, 128, 64, 8, 4, **P), {}),
    ("persistent", cfg(128, 128, 64, 4, 4, **P), {}),
    ("persistent, no flatten", cfg(128, 256, 64, 8, 3, **P), NO_FLATTEN),
    ("persistent, TMA store", cfg(128, 256, 64, 8, 3, **P), TMA_STORE),
    ("persistent + WS", cfg(128, 256, 64, 8, 3, **WS), {}),
    ("persistent + WS", cfg(128, 128, 64, 8, 4, **WS), {}),
    ("persistent + WS", cfg(128, 128, 64, 4, 4, **WS), {}),
    ("persistent + WS on tile loop", cfg(128, 256, 64, 8, 3, **WS), WS_TILES),
    ("persistent + WS on tile loop", cfg(128, 128, 64, 4, 4, **WS), WS_TILES),
    ("persistent, 2 CTAs", cfg(128, 256, 64, 8, 3, num_ctas=2, **P), {}),
    ("persistent + WS, 2 CTAs", cfg(128, 256, 64, 8, 3, num_ctas=2, **WS), {}),
]
FP32_ENTRIES: list[Entry] = [
    ("cuBLAS ieee", None, {}),
    ("cuBLAS tf32", None, {}),
    ("tiled tf32 (pointer)", cfg(128, 128, 32, 8, 3, **TF32), {}),
    ("tiled tf32 (pointer)", cfg(128, 256, 32, 8, 3, **TF32), {}),
    ("persistent tf32", cfg(128, 128, 32, 8, 3, **P, **TF32), {}),
    ("persistent tf32", cfg(128, 256, 32, 8, 2, **P, **TF32), {}),
    ("persistent tf32", cfg(128, 128, 64, 8, 2, **P, **TF32), {}),
    ("persistent + WS tf32", cfg(128, 128, 32, 8, 3, **WS, **TF32), {}),
    ("persistent tf32x3", cfg(128, 128, 32, 8, 3, **P, INPUT_PRECISION="tf32x3"), {}),
]
FP32_RC_ENTRIES: list[Entry] = [
    ("cuBLAS tf32", None, {}),
    ("tiled tf32 (pointer)", cfg(128, 256, 32, 8, 3, **TF32), {}),
    ("persistent tf32", cfg(128, 128, 32, 8, 3, **P, **TF32), {}),
    ("persistent tf32", cfg(128, 128, 64, 8, 2, **P, **TF32), {}),
    ("persistent tf32", cfg(128, 256, 32, 8, 2, **P, **TF32), {}),
    ("persistent + WS tf32", cfg(128, 128, 32, 8, 3, **WS, **TF32), {}),
]
SHAPES: list[tuple[str, GemmProblem, list[Entry]]] = [
    ("4096^3 bf16", GemmProblem(m=4096, n=4096, k=4096, dtype="bf16"), BF16_ENTRIES),
    ("2048x4096x14336 bf16", GemmProblem(m=2048, n=4096, k=14336, dtype="bf16"), BF16_ENTRIES),
    ("4096^3 fp32", GemmProblem(m=4096, n=4096, k=4096, dtype="fp32"), FP32_ENTRIES),
    # tf32 wgmma reads both operands K-major from shared memory: B column-major is that layout.
    ("4096^3 fp32 A row B col", GemmProblem(m=4096, n=4096, k=4096, dtype="fp32",
                                            layout_b="col"), FP32_RC_ENTRIES),
]
# Ragged and column-major correctness only (no timing).
RAGGED: list[tuple[GemmProblem, dict[str, Any]]] = [
    (GemmProblem(m=1000, n=3000, k=2000, dtype="bf16"), cfg(128, 128, 64, 8, 3, **P)),
    (GemmProblem(m=1000, n=3000, k=2000, dtype="bf16", layout_a="col", layout_b="col"),
     cfg(128, 256, 64, 8, 3, **WS)),
    (GemmProblem(m=1000, n=3000, k=2000, dtype="fp16", layout_b="col"),
     cfg(128, 128, 64, 4, 4, num_ctas=2, **P)),
    (GemmProblem(m=16, n=4096, k=4096, dtype="bf16"), cfg(64, 128, 64, 4, 4, **WS)),
    (GemmProblem(m=1000, n=3000, k=2000, dtype="fp32"), cfg(128, 128, 32, 8, 3, **P, **TF32)),
    (GemmProblem(m=1000, n=3000, k=2000, dtype="fp32", layout_a="col", layout_b="col"),
     cfg(128, 128, 32, 8, 3, **P, **TF32)),
]


def call_for(label: str, c: dict[str, Any] | None, inp: Any) -> Callable[[], Any]:
    if c is None:
        return lambda: torch.matmul(inp.a, inp.b, out=inp.out)
    return lambda: gemm.matmul(inp.a, inp.b, c, out=inp.out)


def set_tf32(label: str) -> None:
    torch.backends.cuda.matmul.allow_tf32 = label == "cuBLAS tf32"


def check(problem: GemmProblem, label: str, c: dict[str, Any] | None, seams: dict[str, Any],
          seed: int) -> tuple[Any, dict[str, Any]]:
    """(inputs, row) after one correctness call; row["status"] is ok/wrong/error."""
    set_tf32(label)
    inp = make_inputs(problem, "cuda", seed)
    row: dict[str, Any] = {"label": label, "config": c, "seams": seams}
    tol = tolerance_for(problem, c if c is not None else (
        {"INPUT_PRECISION": "tf32"} if label == "cuBLAS tf32" else None))
    try:
        t0 = time.perf_counter()
        call_for(label, None if c is None else {**c, **seams}, inp)()
        torch.cuda.synchronize()
        row["first_call_s"] = time.perf_counter() - t0
        err = rel_error(inp.out, reference_matmul(inp.a, inp.b))
        row.update(rel_error=err, tolerance=tol, status="ok" if err <= tol else "wrong")
    except Exception as e:  # noqa: BLE001 - reported, the run goes on
        row.update(status="error", error=f"{type(e).__name__}: {e}"[:1500])
    return inp, row


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--deadline", type=float, default=110.0,
                    help="seconds after which remaining timings are skipped")
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    import triton

    props = torch.cuda.get_device_properties(0)
    meta = {"gpu": props.name, "sms": props.multi_processor_count, "torch": torch.__version__,
            "triton": triton.__version__, "cuda": torch.version.cuda,
            "date": time.strftime("%Y-%m-%d %H:%M:%S")}
    print(meta, flush=True)
    bench = EventBench(warmup_ms=20.0, target_ms=40.0, max_reps=300)
    rows: list[dict[str, Any]] = []

    for i, (problem, c) in enumerate(RAGGED):
        _, row = check(problem, "ragged", c, {}, 7000 + i)
        row["shape"] = (f"{problem.m}x{problem.n}x{problem.k} {problem.dtype} "
                        f"{problem.layout_a[0]}{problem.layout_b[0]}")
        rows.append(row)
        print(f"{row['shape']:28} {short(c):40} {row['status']:6} "
              f"{row.get('rel_error', float('nan')):.2e} {row.get('error', '')[:300]}",
              flush=True)

    for shape, problem, entries in SHAPES:
        for j, (label, c, seams) in enumerate(entries):
            inp, row = check(problem, label, c, seams, 100 + j)
            row["shape"] = shape
            if row["status"] == "ok":
                if time.perf_counter() - T0 > args.deadline:
                    row["timing"] = "skipped: deadline"
                else:
                    try:
                        t = bench([call_for(label, None if c is None else {**c, **seams},
                                            inp)])
                        row.update(median_us=t.median_us, p20_us=t.p20_us, p80_us=t.p80_us,
                                   reps=t.reps, tflops=2 * problem.m * problem.n * problem.k
                                   / (t.median_us * 1e-6) / 1e12)
                    except Exception as e:  # noqa: BLE001
                        row.update(status="error", error=f"timing: {e!r}"[:1500])
            rows.append(row)
            us = row.get("median_us")
            took = f"{us:.1f} us" if us else row.get("timing", "")
            print(f"{shape:22} {label:26} {short(c):40} {row['status']:6} "
                  f"err {row.get('rel_error', float('nan')):.2e} {took} "
                  f"{row.get('error', '')[:300]}", flush=True)
            del inp
    torch.backends.cuda.matmul.allow_tf32 = False

    # Table: per shape, ratio against cuBLAS (the ieee one for fp32, and tf32 beside it).
    lines = [f"{meta['gpu']}, {meta['sms']} SMs, torch {meta['torch']}, triton "
             f"{meta['triton']}, CUDA {meta['cuda']}, {meta['date']}", "",
             "| shape | entry | config | rel_error | median us (p20-p80) | TFLOP/s "
             "| cuBLAS/this |",
             "| --- | --- | --- | --- | --- | --- | --- |"]
    for shape, _, _ in SHAPES:
        mine = [r for r in rows if r["shape"] == shape]
        base = next((r.get("median_us") for r in mine if r["label"].startswith("cuBLAS")
                     and r.get("median_us")), None)
        if "fp32" in shape:
            base = next((r.get("median_us") for r in mine if r["label"] == "cuBLAS tf32"
                         and r.get("median_us")), base)
        for r in mine:
            us = r.get("median_us")
            timing = (f"{us:.1f} ({r['p20_us']:.1f}-{r['p80_us']:.1f})" if us else
                      r.get("timing") or r.get("error", r["status"])[:120])
            ratio = f"{base / us:.2f}x" if us and base else ""
            lines.append(f"| {shape} | {r['label']} | {short(r['config'])} | "
                         f"{r.get('rel_error', float('nan')):.2e} | {timing} | "
                         f"{r.get('tflops', 0):.0f} | {ratio} |")
    for r in rows:
        if r["label"] == "ragged":
            lines.append(f"| {r['shape']} | ragged check | {short(r['config'])} | "
                         f"{r.get('rel_error', float('nan')):.2e} | {r['status']} "
                         f"{r.get('error', '')[:120]} | | |")
    table = "\n".join(lines)
    print(f"\n=== summary ({time.perf_counter() - T0:.0f} s) ===\n{table}")
    (args.out / "gpu_variants.md").write_text(table + "\n")
    (args.out / "gpu_variants.json").write_text(json.dumps({"meta": meta, "rows": rows},
                                                           indent=2))
    wrong = [r for r in rows if r["status"] == "wrong"]
    errors = [r for r in rows if r["status"] == "error"]
    print(f"{len(wrong)} wrong, {len(errors)} errors (unsupported or failed to compile)")
    return 1 if wrong else 0


if __name__ == "__main__":
    sys.exit(main())
