"""Probe (issue 18): the stream-K template's stacked m-tiles (``STACK``) and lockstep order on
mid-m shapes (192x6144x6144 and others with m of 128-256), on chosen grids.

    OUT=DIR python -m scripts.bench.midm_probe [pass1|carry|deep]

``pass1``: 192x6144x6144, 64x64 and 64x128 stacked tiles, 4/8 warps, 4-6 stages, on one
program per tile (data parallel), on all SMs and on all but four, in rows and lockstep
order. ``deep``: 32-deep K steps 6-12 stages deep, data parallel and lockstep on all SMs but
four, on 192x6144x6144 and 192x4096x12288. ``carry``: the 64x64 stacked tiles on
128x8192x8192, 256x4096x8192, 192x4096x12288 and 192x8192x4096.

Every variant is checked against float64 on two fresh input sets into NaN-poisoned outputs and
10 repeats for bitwise equality, then timed once (EventBench: L2 read flush, two rotated input
sets); the fastest six are re-timed in 7 interleaved rounds beside cuBLAS and four other
configurations of the stream-K template (columns order; ``BLOCK_M`` 256 rows order). Rows go
to DIR/midm.json. The report: ``docs/benchmarks/gemm_midm_h100_2026-11-27.md``."""

from __future__ import annotations

import itertools
import json
import os
import sys

import torch
import triton

from kernel_templates.gemm import streamk
from kernel_templates.gemm.inputs import make_inputs
from kernel_templates.gemm.reference import reference_for
from scripts.bench.checked import checked_makers, fastest, interleaved, probe_mode, run_probe
from search.kinds.gemm.spec import GemmProblem
from workers.bench import EventBench

OUT = os.environ.get("OUT", "/tmp/midm")
ROWS: list[dict] = []


def _name(cfg: dict, g: int) -> str:
    return (f"stacked {cfg['STACK']}x{cfg['BLOCK_M']}x{cfg['BLOCK_N']}x{cfg['BLOCK_K']} "
            f"w{cfg['num_warps']} s{cfg['num_stages']} G{g} {cfg['ORDER']}")


def _variants(m: int, n: int, sms: int, which: str) -> list[tuple[dict, int]]:
    """(stream-K config, programs) pairs."""
    stack = triton.cdiv(m, 64)
    out = []
    if which == "deep":  # 32-deep K steps, more of them in flight; the 64-deep seed beside
        for bk, s in ((64, 6), (32, 6), (32, 8), (32, 10), (32, 12)):
            cfg = dict(BLOCK_M=64, BLOCK_N=64, BLOCK_K=bk, GROUP_M=1, num_warps=4,
                       num_stages=s, STACK=stack, LOADS="tma", ORDER="rows")
            out += [(cfg, triton.cdiv(n, 64)), ({**cfg, "ORDER": "lockstep"}, sms - 4)]
        return out
    tiles = (64, 128) if which == "pass1" else (64,)
    for bn, w, s in itertools.product(tiles, (4, 8), (4, 5, 6)):
        if (s * (stack * 64 + bn) * 64 * 2 > 220 * 1024 or (bn == 64 and w == 8)
                or (which == "carry" and s == 4)):
            continue
        cfg = dict(BLOCK_M=64, BLOCK_N=bn, BLOCK_K=64, GROUP_M=1, num_warps=w, num_stages=s,
                   STACK=stack, LOADS="tma", ORDER="rows")
        out.append((cfg, triton.cdiv(n, bn)))  # one program per tile
        for g in (sms, sms - 4):
            out += [({**cfg, "ORDER": "lockstep"}, g)]
            if which == "pass1":
                out.append((cfg, g))
    return out


def _streamk(cfg: dict, g: int | None):
    return lambda st: (lambda: streamk.matmul_streamk(st.a, st.b, cfg, out=st.out,
                                                      programs=g))


def probe_shape(m: int, n: int, k: int, bench: EventBench, which: str, top: int = 6) -> None:
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    p = GemmProblem(m, n, k)
    sh = f"{m}x{n}x{k}"
    sets = [make_inputs(p, "cuda", seed=1200 + i) for i in range(2)]
    refs = [reference_for(st) for st in sets]
    variants = {_name(cfg, g): _streamk(cfg, g) for cfg, g in _variants(m, n, sms, which)}
    calls = checked_makers(variants, sets, refs, 10, sh, ROWS)
    finalists = fastest(calls, bench, sh, ROWS, top)
    makers = {"cublas": lambda st: (lambda: torch.matmul(st.a, st.b, out=st.out))}
    for cfg, g in (
            (dict(BLOCK_M=64, BLOCK_N=128, BLOCK_K=64, GROUP_M=1, num_warps=4, num_stages=4,
                  ORDER="columns"), None),
            (dict(BLOCK_M=256, BLOCK_N=64, BLOCK_K=64, GROUP_M=1, num_warps=4, num_stages=4),
             sms - 4),
            (dict(BLOCK_M=256, BLOCK_N=128, BLOCK_K=64, GROUP_M=1, num_warps=8, num_stages=4),
             sms - 4),
            (dict(BLOCK_M=256, BLOCK_N=64, BLOCK_K=64, GROUP_M=1, num_warps=4, num_stages=4),
             sms)):
        makers[f"streamk G{g or sms} " + json.dumps(cfg)] = _streamk(cfg, g)
    makers.update({name: variants[name] for name in finalists})
    interleaved(checked_makers(makers, sets, refs, 10, sh, ROWS), bench, sh, ROWS)


def main() -> None:
    which = probe_mode(sys.argv, "midm_probe", ("pass1", "carry", "deep"))
    shapes = {"pass1": [(192, 6144, 6144)],
              "deep": [(192, 6144, 6144), (192, 4096, 12288)],
              "carry": [(128, 8192, 8192), (256, 4096, 8192), (192, 4096, 12288),
                        (192, 8192, 4096)]}[which]
    bench = EventBench(max_reps=300, target_ms=20.0, warmup_ms=10.0)
    for m, n, k in shapes:
        probe_shape(m, n, k, bench, which, top=10 if which == "deep" else 6)


if __name__ == "__main__":
    run_probe(main, OUT, "midm.json", ROWS)
