"""Probe: cuBLASLt's other algorithms against cuBLAS's own pick, per shape, on a GPU.

For each shape: ``torch.matmul`` (cuBLAS's pick), every algorithm cuBLASLt's heuristic ranks
(up to 32), then the re-split and swizzled variants of the fastest few. Every kernel is checked
against the float64 reference on poisoned output first; timing is the worker's ``EventBench``
(read flush, two rotated input sets); one median per line, not interleaved. Interleaved
re-measurement of the best is what the service's verification does.

    OUT=DIR python -m scripts.bench.lt_probe [MxNxK ...]
    LT_SPACE=1 [LT_SCREEN_S=30] OUT=DIR python -m scripts.bench.lt_probe [MxNxK ...]

``LT_SPACE=1`` searches cuBLASLt's configuration space around the heuristic's list: the ranked
configurations, then every algorithm and tile it accepts for the shape (tiles that pad either
side by more than a third left out; best-filling first) at its first accepted stages count,
screened with a short timing; then every custom option, stages count, cluster shape, K split
and swizzling of the best; then the best ten timed in full and the winner re-measured
interleaved with ``torch.matmul``.

Writes ``$OUT/lt_probe.json`` and prints one line per shape.
"""

from __future__ import annotations

import json
import math
import os
import statistics
import sys
import time
import traceback
from dataclasses import replace

import torch

from kernel_templates.gemm.cublaslt import MAX_RANK, LtConfig, LtGemm, describe, library_version
from kernel_templates.gemm.cublaslt_tiles import tile_shape
from kernel_templates.gemm.inputs import make_inputs
from kernel_templates.gemm.reference import reference_for
from scripts.bench.checked import checked_timing
from search.kinds.gemm.spec import GemmProblem
from workers.bench import EventBench

SHAPES = ("192x6144x6144 320x4096x12288 128x128x262144 32x512x98304 2x16384x4096 "
          "4x4096x14336 4096x4096x4096 16x4096x4096 64x64x65536 128x14336x4096 "
          "4096x1024x4096 32768x512x512 1000x3000x2000 511x1024x4096").split()
BENCH = EventBench(max_reps=200, target_ms=10.0, warmup_ms=5.0)


def _time(sets, refs, make, bench=BENCH) -> dict:
    return checked_timing(sets, refs, [make(i) for i in range(len(sets))], bench)


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


# -- the whole configuration space (LT_SPACE=1) -----------------------------------------------
QUICK = EventBench(max_reps=20, min_reps=10, target_ms=0.5, warmup_ms=0.5, estimate_reps=3)
CLUSTERS = (0, 2, 3, 4, 5, 6, 8)  # cublasLtClusterShape_t: auto, 1x1, 2x1, 4x1, 1x2, 2x2, 1x4


def _fits(tile_id: int, m: int, n: int, waste: float = 1.34) -> float:
    """How well tile ``tile_id`` fills 132 SMs without padding either side by more than
    ``waste`` (R runs along n, C along m; see ``cublaslt_tiles``): the useful share of the
    padded, wave-rounded work; 0 where it pads too much."""
    shape = tile_shape(tile_id)
    if shape is None:
        return 0.5 if tile_id == 0 else 0.0
    r, c = shape
    padded = [math.ceil(x / t) * t for x, t in ((n, r), (m, c))]
    if any(pd > max(waste * x, 16) for pd, x in zip(padded, (n, m), strict=True)):
        return 0.0
    tiles = math.ceil(n / r) * math.ceil(m / c)
    return (n * m) / (padded[0] * padded[1]) * tiles / (math.ceil(tiles / 132) * 132)


#: Stages ids tried first on the screen (the automatic ones: 64xAUTO, 32xAUTO, 128xAUTO ...)
STAGES_FIRST = (35, 34, 36, 33, 37, 32, 38, 0)


def explore(shape: str, keep: int = 12, final: int = 10, rounds: int = 5,
            screen_s: float = 60.0) -> dict:
    """The heuristic's ranked configurations, then every (algorithm, tile) cuBLASLt accepts for
    the shape at its first accepted stages count, screened (best-filling tiles first, for at
    most ``screen_s``); every custom option and stages count of the best ``keep``; then cluster
    shapes, K splits and swizzling of the best; the best
    ``final`` timed in full; the winner re-measured interleaved with ``torch.matmul``."""
    m, n, k = map(int, shape.split("x"))
    p = GemmProblem(m=m, n=n, k=k)
    sets = [make_inputs(p, "cuda", seed=7 + i) for i in range(2)]
    refs = [reference_for(s) for s in sets]
    gemms = [LtGemm(s.a, s.b, s.out) for s in sets]
    g = gemms[0]
    row: dict = {"shape": shape, "mode": "space"}
    seen: dict[LtConfig, dict] = {}

    def run(cfgs, stage: str, bench, until: float = math.inf) -> None:
        for cfg in cfgs:
            if cfg in seen:
                continue
            if time.perf_counter() > until:
                row.setdefault("cut", []).append(stage)
                return
            entry = {"stage": stage, "config": cfg.to_dict(), "label": describe(cfg)}
            try:
                entry.update(_time(sets, refs, lambda i, c=cfg: gemms[i].launcher(c), bench))
            except Exception as exc:  # noqa: BLE001
                entry["error"] = repr(exc)[:200]
            seen[cfg] = entry

    def best(n_best: int) -> list[LtConfig]:
        timed = sorted((e for e in seen.values() if "us" in e), key=lambda e: e["us"])
        return [LtConfig(**e["config"]) for e in timed[:n_best]]

    t0 = time.perf_counter()
    base, stages_of = [], {}
    for algo_id in g.algo_ids():
        try:
            tiles, stages = g.tiles_and_stages(algo_id)
        except Exception:  # noqa: BLE001 - an id these types cannot initialise
            continue
        order = sorted(stages or [0], key=lambda s: (STAGES_FIRST.index(s)
                                                     if s in STAGES_FIRST else 99, s))
        stages_of[algo_id] = order
        for tile in tiles or [0]:
            score = _fits(tile, m, n)
            if score <= 0:
                continue
            for st in order:
                cfg = LtConfig(algo_id, tile=tile, stages=st)
                if g.accepts(cfg):
                    base.append((score, cfg))
                    break
    base = [c for _, c in sorted(base, key=lambda sc: -sc[0])]
    row["check_s"] = round(time.perf_counter() - t0, 2)
    row["accepted"] = len(base)
    ranked = g.heuristics(MAX_RANK)
    run(ranked[:1], "rank 0", QUICK)
    run(ranked[1:], "ranked", QUICK)
    run(base, "screen", QUICK, until=t0 + screen_s)
    run([replace(c, custom=o) for c in best(keep) for o in range(g.custom_options(c.algo_id))
         if g.accepts(replace(c, custom=o))], "custom options", QUICK)
    run([replace(c, stages=st) for c in best(keep) for st in stages_of.get(c.algo_id, ())
         if g.accepts(replace(c, stages=st))], "stages", QUICK)
    run([replace(c, cluster=cl) for c in best(keep) for cl in CLUSTERS
         if g.accepts(replace(c, cluster=cl))], "clusters", QUICK)
    run([v for c in best(keep // 2) for v in g.variants(c)], "splits", QUICK)
    row["screened"] = len(seen)
    row["screen_s"] = round(time.perf_counter() - t0, 1)
    finals = best(final)
    full = {}
    for cfg in [ranked[0], *finals]:
        full[cfg] = _time(sets, refs, lambda i, c=cfg: gemms[i].launcher(c))
    winner = min((c for c in finals if "us" in full[c]), key=lambda c: full[c]["us"])
    row["final"] = [{"config": c.to_dict(), "label": describe(c), **full[c]} for c in full]
    lib = [lambda i=i: torch.matmul(sets[i].a, sets[i].b, out=sets[i].out) for i in range(2)]
    win = [gemms[i].launcher(winner) for i in range(2)]
    pairs = []
    for _ in range(rounds):
        pairs.append((BENCH(lib).median_us, BENCH(win).median_us))
    cb = statistics.median(a for a, _ in pairs)
    wb = statistics.median(b for _, b in pairs)
    row["interleaved"] = {"cublas_us": round(cb, 3), "best_us": round(wb, 3),
                          "speedup": round(cb / wb, 4), "best": describe(winner),
                          "config": winner.to_dict(), "rounds": rounds}
    row["errors"] = [e for e in seen.values() if "error" in e][:5]
    row["top"] = sorted((e for e in seen.values() if "us" in e), key=lambda e: e["us"])[:12]
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
            row = (explore(shape, screen_s=float(os.environ.get("LT_SCREEN_S", "30")))
                   if os.environ.get("LT_SPACE") else probe(shape))
        except Exception as exc:  # noqa: BLE001
            traceback.print_exc()
            row = {"shape": shape, "error": repr(exc)[:400]}
        rows.append(row)
        with open(os.path.join(out, "lt_probe.json"), "w") as f:
            json.dump({"meta": meta, "rows": rows}, f, indent=1)
        if "interleaved" in row:
            print(shape, json.dumps(row["interleaved"]), "screened", row["screened"],
                  "in", row["screen_s"], "s", flush=True)
            continue
        cb = row.get("cublas", {}).get("us")
        r0 = (row.get("rank0") or {}).get("us")
        best = row.get("best") or {}
        print(f"{shape:>16} cublas {cb} rank0 {r0} best {best.get('us')} "
              f"({best.get('source')}: {best.get('label')}) ratio "
              f"{(cb / best['us']) if cb and best.get('us') else None} tried {row.get('tried')}",
              flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
