"""Probe: cuBLASLt's other algorithms against cuBLAS's own pick, per shape, on a GPU.

For each shape: ``torch.matmul`` (cuBLAS's pick), every algorithm cuBLASLt's heuristic ranks
(up to 32), then the re-split and swizzled variants of the fastest few. Every kernel is checked
against the float64 reference on poisoned output first; timing is the worker's ``EventBench``
(read flush, two rotated input sets); one median per line, not interleaved. Interleaved
re-measurement of the best is what the service's verification does.

    OUT=DIR python -m scripts.bench.lt_probe [MxNxK ...]

Writes ``$OUT/lt_probe.json`` and prints one line per shape.
"""

from __future__ import annotations

import json
import os
import sys
import time
import traceback

import torch

from kernel_templates.gemm.cublaslt import LtConfig, LtGemm, describe, library_version
from kernel_templates.gemm.inputs import make_inputs
from kernel_templates.gemm.reference import reference_for, rel_error
from search.kinds.gemm.spec import GemmProblem
from workers.bench import EventBench

SHAPES = ("192x6144x6144 320x4096x12288 128x128x262144 32x512x98304 2x16384x4096 "
          "4x4096x14336 4096x4096x4096 16x4096x4096 64x64x65536 128x14336x4096 "
          "4096x1024x4096 32768x512x512 1000x3000x2000 511x1024x4096").split()
BENCH = EventBench(max_reps=200, target_ms=10.0, warmup_ms=5.0)


def _time(sets, refs, make) -> dict:
    calls = [make(i) for i in range(len(sets))]
    sets[0].out.fill_(float("nan"))
    calls[0]()
    torch.cuda.synchronize()
    err = rel_error(sets[0].out, refs[0])
    if not err < 2e-2:
        return {"error": f"wrong result: rel_error {err}"}
    t = BENCH(calls)
    return {"us": round(t.median_us, 3), "p20": round(t.p20_us, 3), "p80": round(t.p80_us, 3),
            "err": err}


def probe(shape: str, top: int = 4) -> dict:
    m, n, k = map(int, shape.split("x"))
    p = GemmProblem(m=m, n=n, k=k)
    sets = [make_inputs(p, "cuda", seed=7 + i) for i in range(2)]
    refs = [reference_for(s) for s in sets]
    row: dict = {"shape": shape}
    row["cublas"] = _time(sets, refs, lambda i: (lambda: torch.matmul(sets[i].a, sets[i].b,
                                                                      out=sets[i].out)))
    gemms = [LtGemm(s.a, s.b, s.out) for s in sets]
    t0 = time.perf_counter()
    ranked = gemms[0].heuristics(32)
    row["heuristic_s"] = round(time.perf_counter() - t0, 4)
    tried: list[dict] = []

    def run(cfg, source: str) -> None:
        entry = {"source": source, "config": cfg.to_dict(), "label": describe(cfg)}
        try:
            entry.update(_time(sets, refs, lambda i: gemms[i].launcher(cfg)))
        except Exception as exc:  # noqa: BLE001
            entry["error"] = repr(exc)[:300]
        tried.append(entry)

    for rank, cfg in enumerate(ranked):
        run(cfg, f"rank {rank}")
    timed = sorted((e for e in tried if "us" in e), key=lambda e: e["us"])
    seen = {json.dumps(e["config"], sort_keys=True) for e in tried}
    for e in timed[:top]:
        for v in gemms[0].variants(LtConfig(**e["config"])):
            key = json.dumps(v.to_dict(), sort_keys=True)
            if key not in seen:
                seen.add(key)
                run(v, f"variant of {e['source']}")
    timed = sorted((e for e in tried if "us" in e), key=lambda e: e["us"])
    row["tried"] = len(tried)
    row["ranked"] = len(ranked)
    row["rank0"] = next((e for e in tried if e["source"] == "rank 0"), None)
    row["best"] = timed[0] if timed else None
    row["top"] = timed[:8]
    row["errors"] = [e for e in tried if "error" in e][:5]
    return row


def main(argv: list[str]) -> None:
    out = os.environ.get("OUT", "/tmp/lt_probe")
    os.makedirs(out, exist_ok=True)
    shapes = argv or SHAPES
    rows = []
    meta = {"gpu": torch.cuda.get_device_name(), "torch": torch.__version__,
            "cublaslt": library_version(), "date": time.strftime("%Y-%m-%d %H:%M UTC",
                                                                 time.gmtime())}
    print(json.dumps(meta), flush=True)
    for shape in shapes:
        try:
            row = probe(shape)
        except Exception as exc:  # noqa: BLE001
            traceback.print_exc()
            row = {"shape": shape, "error": repr(exc)[:400]}
        rows.append(row)
        with open(os.path.join(out, "lt_probe.json"), "w") as f:
            json.dump({"meta": meta, "rows": rows}, f, indent=1)
        cb = row.get("cublas", {}).get("us")
        r0 = (row.get("rank0") or {}).get("us")
        best = row.get("best") or {}
        print(f"{shape:>16} cublas {cb} rank0 {r0} best {best.get('us')} "
              f"({best.get('source')}: {best.get('label')}) ratio "
              f"{(cb / best['us']) if cb and best.get('us') else None} tried {row.get('tried')}",
              flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
