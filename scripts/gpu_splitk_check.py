#!/usr/bin/env python3
"""GPU check of the one-launch ("serial") split-K against the two-launch one and cuBLAS.

1. Correctness, bf16: each case runs 20 times on fresh random inputs into a NaN-poisoned output,
   twice per input set (the two results must be bitwise equal); a race between the programs of
   a tile shows up as a NaN, a large or moving error, or a difference between the two calls.
   The split-K counters must be back at zero at the end.
2. Timings (``workers.bench.EventBench``, default clean-L2 read flush, 4 rotating input sets):
   cuBLAS (``torch.matmul``), two-launch split-K, serial split-K (automatic fan-in) and, for
   SPLIT_K >= 32, serial with one level (fan-in = SPLIT_K). The compact table comes last.

    PYTHONPATH=. python3 scripts/gpu_splitk_check.py
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from typing import Any

import torch

from kernel_templates.gemm import triton as gemm
from kernel_templates.gemm.inputs import make_inputs
from kernel_templates.gemm.reference import reference_matmul, rel_error
from search.types import GemmProblem
from workers.bench import EventBench

REPS = 20
DEADLINE_S = 200.0  # stop timing (and still print the table) past this
T0 = time.perf_counter()

SHAPES = {"16x4096x4096": (16, 4096, 4096), "64x64x65536": (64, 64, 65536),
          "1000x3000x2000": (1000, 3000, 2000)}


def cfg(bm: int, bn: int, bk: int, sk: int, w: int, s: int) -> dict[str, int]:
    return dict(BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk, GROUP_M=1, SPLIT_K=sk, num_warps=w,
                num_stages=s)


def short(c: dict[str, int]) -> str:
    return (f"{c['BLOCK_M']}x{c['BLOCK_N']}x{c['BLOCK_K']} sk{c['SPLIT_K']} "
            f"w{c['num_warps']} s{c['num_stages']}")


# (shape, config, mode, fan-in, tma)
CHECKS: list[tuple[str, dict[str, int], str, int | None, bool | None]] = [
    ("16x4096x4096", cfg(16, 64, 128, 2, 4, 4), "serial", None, None),
    ("16x4096x4096", cfg(16, 64, 128, 8, 4, 4), "serial", None, None),
    ("16x4096x4096", cfg(16, 32, 128, 4, 4, 5), "serial", None, False),
    ("64x64x65536", cfg(64, 32, 128, 8, 4, 5), "serial", None, None),
    ("64x64x65536", cfg(64, 32, 128, 64, 4, 5), "serial", None, None),
    ("64x64x65536", cfg(64, 32, 128, 64, 4, 5), "serial", 64, None),
    ("64x64x65536", cfg(64, 64, 128, 128, 4, 4), "serial", None, None),
    ("64x64x65536", cfg(64, 64, 128, 128, 4, 4), "serial", 128, None),
    ("64x64x65536", cfg(64, 64, 128, 64, 4, 4), "serial", None, False),
    ("1000x3000x2000", cfg(64, 64, 64, 4, 4, 4), "serial", None, None),
    ("1000x3000x2000", cfg(64, 64, 64, 4, 4, 4), "serial", None, False),
    ("1000x3000x2000", cfg(128, 128, 64, 2, 8, 3), "serial", None, None),
    ("64x64x65536", cfg(64, 32, 128, 64, 4, 5), "two_launch", None, None),
]

TIMED: dict[str, list[dict[str, int]]] = {
    "16x4096x4096": [
        cfg(16, 32, 256, 1, 4, 4), cfg(16, 64, 128, 1, 4, 4),
        cfg(16, 32, 128, 2, 4, 4), cfg(16, 64, 128, 2, 4, 4), cfg(16, 32, 256, 2, 4, 4),
        cfg(16, 64, 256, 2, 4, 3),
        cfg(16, 32, 128, 4, 4, 5), cfg(16, 64, 128, 4, 4, 4), cfg(16, 32, 256, 4, 4, 4),
        cfg(16, 64, 256, 4, 4, 3),
        cfg(16, 32, 128, 8, 4, 5), cfg(16, 64, 128, 8, 4, 4),
    ],
    "64x64x65536": [
        cfg(64, 32, 128, 32, 4, 5), cfg(64, 32, 128, 64, 4, 5), cfg(64, 32, 128, 128, 4, 5),
        cfg(64, 64, 128, 32, 4, 4), cfg(64, 64, 128, 64, 4, 4), cfg(64, 64, 128, 128, 4, 4),
        cfg(64, 64, 256, 32, 4, 3), cfg(64, 64, 256, 64, 4, 3), cfg(64, 32, 256, 64, 4, 3),
    ],
}


def keyed(c: dict[str, Any], mode: str, fanin: int | None, tma: bool | None = None
          ) -> dict[str, Any]:
    """``c`` with the split-K reduction and the loads as config keys (None: the default)."""
    out = {**c, "SPLITK_MODE": mode}
    if fanin:
        out["FANIN"] = fanin
    if tma is not None:
        out["LOADS"] = "tma" if tma else "pointer"
    return out


def correctness() -> list[str]:
    lines = []
    for shape, c0, mode, fanin, tma in CHECKS:
        c = keyed(c0, mode, fanin, tma)
        m, n, k = SHAPES[shape]
        p = GemmProblem(m=m, n=n, k=k, dtype="bf16")
        errs, bad = [float("nan")], 0
        try:
            errs = []
            for rep in range(REPS):
                inp = make_inputs(p, "cuda", 1000 + rep)
                ref = reference_matmul(inp.a, inp.b)
                gemm.matmul(inp.a, inp.b, c, out=inp.out)
                again = torch.full_like(inp.out, float("nan"))
                gemm.matmul(inp.a, inp.b, c, out=again)
                err = rel_error(inp.out, ref)
                errs.append(err)
                if not err < 5e-3 or not torch.equal(inp.out, again):
                    bad += 1
        except Exception as e:  # noqa: BLE001 - reported, the run goes on
            print(f"{shape} {short(c)} {mode}: {e!r}"[:2000], flush=True)
            errs, bad = errs or [float("nan")], REPS
        tag = f"{mode}" + (f" fanin={fanin}" if fanin else "") + (" ptr" if tma is False else "")
        lines.append(f"{shape:15} {short(c):24} {tag:22} err {min(errs):.2e}..{max(errs):.2e} "
                     f"bad {bad}/{REPS}")
        print(lines[-1], flush=True)
    counters = gemm._COUNTERS.get(torch.device("cuda", torch.cuda.current_device()))
    nz = int(counters.count_nonzero()) if counters is not None else 0
    lines.append(f"counters left nonzero: {nz}")
    print(lines[-1], flush=True)
    return lines


def ptx_summary() -> str:
    """The atomics and barriers in one compiled serial kernel (the memory-order check)."""
    try:
        for fn in (gemm._gemm_tma_kernel, gemm._gemm_kernel):
            for caches in fn.device_caches.values():
                for kern in caches[0].values():
                    ptx = kern.asm.get("ptx", "")
                    atoms = sorted({ln.strip().split()[0] for ln in ptx.splitlines()
                                    if "atom." in ln})
                    if atoms:
                        ldcg = sum("ld.global.cg" in ln for ln in ptx.splitlines())
                        bars = sum("bar.sync" in ln or "barrier.sync" in ln
                                   for ln in ptx.splitlines())
                        return f"{fn.__name__}: {atoms}, {bars} barriers, {ldcg} ld.global.cg"
    except Exception as e:  # noqa: BLE001 - diagnostics only
        return f"ptx summary failed: {e!r}"
    return "no serial kernel with atomics found"


def bench(fns: list[Callable[[], Any]]) -> float:
    for f in fns:
        f()  # compile outside the timing
    torch.cuda.synchronize()
    return EventBench()(fns).median_us


def timings() -> list[str]:
    rows = ["| shape | config | cuBLAS | two-launch | serial | serial 1-level | best/cuBLAS |",
            "| --- | --- | --- | --- | --- | --- | --- |"]
    for shape, configs in TIMED.items():
        m, n, k = SHAPES[shape]
        p = GemmProblem(m=m, n=n, k=k, dtype="bf16")
        sets = [make_inputs(p, "cuda", s) for s in range(4)]
        cublas = bench([lambda i=i: torch.matmul(i.a, i.b, out=i.out) for i in sets])
        rows.append(f"| {shape} | cuBLAS | {cublas:.1f} | | | | 1.00x |")
        print(rows[-1], flush=True)
        for c in configs:
            if time.perf_counter() - T0 > DEADLINE_S:
                rows.append(f"| {shape} | {short(c)} | deadline: skipped | | | | |")
                continue
            res: dict[str, float] = {}
            variants = [("two_launch", None), ("serial", None)]
            if c["SPLIT_K"] >= 32:
                variants.append(("serial", c["SPLIT_K"]))
            if c["SPLIT_K"] == 1:
                variants = [("serial", None)]
            for mode, fanin in variants:
                ck = keyed(c, mode, fanin)
                fns = [lambda i=i, ck=ck: gemm.matmul(i.a, i.b, ck, out=i.out) for i in sets]
                try:
                    res[f"{mode}{fanin or ''}"] = bench(fns)
                except Exception as e:  # noqa: BLE001 - reported, the run goes on
                    print(f"{short(c)} {mode} {fanin}: {e!r}"[:2000], flush=True)
            best = min(res.values(), default=float("inf"))

            def fmt(key: str, res: dict[str, float] = res) -> str:
                return f"{res[key]:.1f}" if key in res else "-"

            flat = f"serial{c['SPLIT_K']}"
            two = fmt("two_launch") if c["SPLIT_K"] > 1 else "(sk1)"
            rows.append(f"| {shape} | {short(c)} | | {two} | {fmt('serial')} | {fmt(flat)} "
                        f"| {cublas / best:.2f}x |")
            print(rows[-1], flush=True)
    return rows


def main() -> int:
    import triton

    props = torch.cuda.get_device_properties(0)
    head = (f"{props.name}, {props.multi_processor_count} SMs, torch {torch.__version__}, "
            f"triton {triton.__version__}, CUDA {torch.version.cuda}")
    print(head, flush=True)
    check = correctness()
    ptx = ptx_summary()
    print(ptx, flush=True)
    rows = timings()
    print(f"\n=== summary ({time.perf_counter() - T0:.0f} s) ===\n{head}\n{ptx}")
    print("\n".join(check))
    print("\n".join(rows))
    ok = all(" bad 0/" in ln for ln in check if " bad " in ln) and check[-1].endswith(": 0")
    print("CORRECT" if ok else "FAILURES")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
