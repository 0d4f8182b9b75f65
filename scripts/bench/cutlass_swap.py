"""Probe: CUTLASS on the transposed problem, with tiles sized to a small m, against cuBLAS.

cuBLAS computes the row-major ``C = A @ B`` as the column-major ``C^T = B^T A^T``: its tile's
second extent runs along the problem's ``m``, so a 192-row problem gets one 64x192 tile per
64 columns (96 CTAs on 132 SMs for 192x6144x6144). The CUTLASS library ops this service builds
keep the problem's orientation and the generator's tiles (M 64-256 along ``m``), which waste
work on such an ``m`` or leave SMs idle. This probe builds SM90 ops for the transposed problem
(``m' = n``, ``n' = m``; A' = B^T and B' = A^T both column-major, D' = C^T column-major, which
is C row-major) with tile widths that divide ``m`` (192, 160), on the stream-K, persistent and
ping-pong schedules, and times them against ``torch.matmul``.

    python -m scripts.bench.cutlass_swap build --cache DIR [--jobs 2]    (nvcc, no GPU)
    python -m scripts.bench.cutlass_swap probe --cache DIR [MxNxK ...]   (GPU; OUT=DIR)

Every kernel is checked against the float64 reference on a NaN-poisoned output before it is
timed (the worker's ``EventBench``: L2 read flush, two rotated input sets); the best is then
re-measured interleaved with ``torch.matmul`` over five rounds. Writes ``$OUT/cutlass_swap.json``.
"""

from __future__ import annotations

import argparse
import copy
import ctypes
import json
import os
import statistics
import sys
import time
import traceback
from pathlib import Path
from typing import Any

SHAPES = ("192x6144x6144", "320x4096x12288", "128x14336x4096", "16x4096x4096")

# (base op: the generator's native column-major-output op whose schedule is reused,
#  tile (M' along n, N' along m, K), cluster)
_COOP_SK = ("128x256x64_2x1x1_0_nnn_align8_stream_k_warpspecialized_cooperative_epi_tma")
_COOP = ("128x256x64_2x1x1_0_nnn_align8_warpspecialized_cooperative_epi_tma")
_PING = ("128x256x64_2x1x1_0_nnn_align8_warpspecialized_pingpong_epi_tma")
VARIANTS = (
    (_COOP_SK, (128, 192, 64), (1, 1, 1)),
    (_COOP_SK, (128, 192, 64), (2, 1, 1)),
    (_COOP_SK, (256, 192, 64), (1, 1, 1)),
    (_COOP, (128, 192, 64), (2, 1, 1)),
    (_PING, (64, 192, 64), (1, 1, 1)),
    (_PING, (64, 192, 64), (2, 1, 1)),
    (_COOP_SK, (128, 160, 64), (1, 1, 1)),
    (_COOP_SK, (128, 160, 64), (2, 1, 1)),
    (_COOP_SK, (256, 160, 64), (1, 1, 1)),
    (_COOP, (128, 160, 64), (2, 1, 1)),
    (_PING, (64, 160, 64), (2, 1, 1)),
    (_COOP_SK, (128, 128, 64), (2, 1, 1)),
)
PREFIX = "cutlass3x_sm90_tensorop_gemm_bf16_bf16_f32_bf16_bf16_"


def swapped_ops() -> list[Any]:
    """The ``CutlassOp`` of every variant: the base op copied with its tile and cluster
    replaced (the collective builders derive everything else from those)."""
    from kernel_templates.gemm.cutlass.enumerate import _describe, raw_operations

    by_name = {o.procedural_name(): o for o in raw_operations()}
    out = []
    for base, tile, cluster in VARIANTS:
        op = copy.copy(by_name[PREFIX + base])
        td = copy.copy(op.tile_description)
        td.threadblock_shape = list(tile)
        td.tile_shape = list(tile)
        td.cluster_shape = list(cluster)
        op.tile_description = td
        op.__dict__.pop("_procedural_name", None)
        out.append(_describe(op))
    return out


def build(cache_dir: str, jobs: int) -> int:
    from kernel_templates.gemm.cutlass.compile import CutlassCache
    from kernel_templates.gemm.cutlass.compile import build as compile_ops

    ops = swapped_ops()

    def done(name: str, value: Any) -> None:
        print(("built " if not isinstance(value, Exception) else "FAILED ") + name, flush=True)

    result = compile_ops(ops, CutlassCache(cache_dir), jobs=jobs, per_file=1, on_done=done)
    for name, err in result.errors.items():
        print(f"{name}: {err}\n{getattr(err, 'stderr_tail', '')[-1500:]}", flush=True)
    print(f"{len(result.artifacts)} built, {len(result.errors)} failed, "
          f"{result.compile_s:.0f} compile-s", flush=True)
    return 0 if not result.errors else 1


def _launcher(kernel: Any, a: Any, b: Any, out: Any, splits: int = 1):
    """``out = a @ b`` as ``out^T = b^T a^T`` on a column-major-output op (no copies):
    A' is b's storage, B' is a's, D' is out's."""
    import torch

    m, k = a.shape
    n = b.shape[1]
    size = ctypes.c_size_t(0)
    rc = kernel._ws(n, m, k, 1, 1, 0, splits, ctypes.byref(size))
    if rc:
        raise RuntimeError(f"workspace query failed ({rc})")
    ws = torch.empty(max(size.value, 1), dtype=torch.uint8, device=a.device)
    args = (b.data_ptr(), a.data_ptr(), None, out.data_ptr(), n, m, k, 1, 1.0, 0.0, None, 1, 0,
            splits, ws.data_ptr() if size.value else None, size.value)

    def call():
        _ = ws
        rc = kernel._run(*args, torch.cuda.current_stream().cuda_stream)
        if rc:
            raise RuntimeError(f"{kernel.name} launch failed ({rc})")
        return out

    return call


def probe(cache_dir: str, shapes: list[str]) -> int:
    import torch

    from kernel_templates.gemm.cutlass.compile import CutlassCache, toolchain
    from kernel_templates.gemm.cutlass.runtime import CutlassKernel
    from kernel_templates.gemm.inputs import make_inputs
    from kernel_templates.gemm.reference import reference_for
    from scripts.bench.checked import checked_timing
    from search.kinds.gemm.spec import GemmProblem
    from workers.bench import EventBench

    bench = EventBench(max_reps=200, target_ms=10.0, warmup_ms=5.0)
    out_dir = Path(os.environ.get("OUT", "/tmp/cutlass_swap"))
    out_dir.mkdir(parents=True, exist_ok=True)
    cache, tc = CutlassCache(cache_dir), toolchain()
    kernels = {}
    for op in swapped_ops():
        art = cache.find(op.name, tc)
        if art is None:
            print(f"not in the cache: {op.name}", flush=True)
            continue
        kernels[op.name] = CutlassKernel(art.library, art.op_meta[op.name])
    meta = {"gpu": torch.cuda.get_device_name(), "torch": torch.__version__,
            "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "ops": len(kernels)}
    rows: list[dict[str, Any]] = []
    for shape in shapes:
        m, n, k = map(int, shape.split("x"))
        sets = [make_inputs(GemmProblem(m=m, n=n, k=k), "cuda", seed=7 + i) for i in range(2)]
        refs = [reference_for(s) for s in sets]

        def timed(make, sets=sets, refs=refs) -> dict[str, Any]:
            calls = [make(s) for s in sets]
            return {**checked_timing(sets, refs, calls, bench), "calls": calls}

        lib = lambda s: (lambda: torch.matmul(s.a, s.b, out=s.out))  # noqa: E731
        row: dict[str, Any] = {"shape": shape, "cublas": timed(lib), "ops": []}
        for name, kernel in kernels.items():
            for splits in (1, 2, 3) if "stream_k" in name else (1,):
                entry: dict[str, Any] = {"op": name, "splits": splits}
                try:
                    entry.update(timed(lambda s, kn=kernel, sp=splits:
                                       _launcher(kn, s.a, s.b, s.out, sp)))
                except Exception as exc:  # noqa: BLE001
                    entry["error"] = repr(exc)[:300]
                row["ops"].append(entry)
        ok = [e for e in row["ops"] if "us" in e]
        if ok and "us" in row["cublas"]:
            best = min(ok, key=lambda e: e["us"])
            pairs = [(bench(row["cublas"]["calls"]).median_us, bench(best["calls"]).median_us)
                     for _ in range(5)]
            cb, bb = (statistics.median(p[i] for p in pairs) for i in (0, 1))
            row["interleaved"] = {"cublas_us": round(cb, 3), "best_us": round(bb, 3),
                                  "speedup": round(cb / bb, 4), "op": best["op"],
                                  "splits": best["splits"]}
        for e in [row["cublas"], *row["ops"]]:
            e.pop("calls", None)
        rows.append(row)
        print(shape, "cublas", row["cublas"].get("us"), json.dumps(row.get("interleaved")),
              flush=True)
        for e in sorted(ok, key=lambda e: e["us"])[:5]:
            print("   ", e["us"], e["op"].replace(PREFIX, ""), "splits", e["splits"], flush=True)
        (out_dir / "cutlass_swap.json").write_text(json.dumps({"meta": meta, "rows": rows},
                                                              indent=1))
    return 0


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(prog="python -m scripts.bench.cutlass_swap")
    ap.add_argument("what", choices=("build", "probe"))
    ap.add_argument("shapes", nargs="*", default=list(SHAPES))
    ap.add_argument("--cache", required=True)
    ap.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    args = ap.parse_intermixed_args(argv)
    try:
        if args.what == "build":
            return build(args.cache, args.jobs)
        return probe(args.cache, args.shapes)
    except Exception:  # noqa: BLE001
        traceback.print_exc()
        return 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
