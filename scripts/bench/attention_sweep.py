"""The attention templates' options side by side, outside the service: cuDNN SDPA, FlexAttention
and a grid of Triton flash (and split-KV decode) configurations on the same inputs, each checked
against the float32 reference before it is timed (a wrong or failing one is listed, not timed).

It answers what each Hopper option of the flash template is worth on the device, per base
tile (``TMA``, ``PERSISTENT``; ``WS`` is refused on sm_90: ``constraints.WS_REFUSED``), and
where the decode template stands against the copy bandwidth; the service's search then
searches what this shows. Timing: the workers'
``EventBench`` (CUDA events, L2 flushed by reading, median).

    python -m scripts.bench attention-sweep --shapes ../shared/bench/attention_public.json \
        --only 0,1,3,5 --out /tmp/sweep [--budget-s 420]
"""

from __future__ import annotations

import argparse
import itertools
import json
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

FIELDS = ("batch", "heads", "kv_heads", "s_q", "s_kv", "d", "causal")
#: Base flash tiles: (BLOCK_M, BLOCK_N, num_warps, num_stages).
BASES = ((128, 64, 8, 3), (128, 64, 8, 2), (128, 64, 8, 4), (128, 128, 8, 2), (128, 128, 8, 3),
         (128, 64, 4, 3), (64, 64, 4, 3), (128, 32, 4, 3), (64, 128, 4, 2))
#: The Hopper options, each on a base tile.
OPTIONS = ({}, {"TMA": 1}, {"PERSISTENT": 1}, {"TMA": 1, "PERSISTENT": 1})
DECODE = [{"NUM_SPLITS": s, "BLOCK_N": bn, "num_warps": w, "num_stages": st}
          for s, bn, w, st in itertools.product((1, 2, 4, 8), (64, 128, 256), (4, 8), (2, 3, 4))]


def add_arguments(ap: argparse.ArgumentParser) -> None:
    ap.add_argument("--shapes", type=Path, required=True, help="attention benchmark JSON")
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--only", default=None, help="comma-separated shape indices")
    ap.add_argument("--dtype", default="bf16")
    ap.add_argument("--budget-s", type=float, default=420.0,
                    help="stop starting new configurations after this many seconds")


def _label(shape: dict[str, Any]) -> str:
    return (f"b{shape['batch']} h{shape['heads']}/{shape.get('kv_heads', shape['heads'])} "
            f"s{shape['s_q']}x{shape['s_kv']} d{shape['d']}"
            f"{' causal' if shape.get('causal') else ''}")


def _measure(problem: Any, backend: str, config: dict[str, Any], inputs: Any, ref: Any,
             bench: Any, device: str) -> dict[str, Any]:
    from kernel_templates import registry
    from kernel_templates.attention.reference import rel_error, tolerance
    from search.types import Candidate

    row: dict[str, Any] = {"backend": backend, "config": config}
    t0 = time.monotonic()
    try:
        cand = Candidate(problem=problem, backend=backend, config=config)
        registry.check_supported(backend, problem)
        call = registry.make_callable(cand, inputs)
        inputs.out.fill_(float("nan"))
        call()
        import torch

        torch.cuda.synchronize()
        err = float(rel_error(inputs.out, ref))
        row["rel_error"] = err
        if not err <= tolerance(problem, config):
            row["status"] = "wrong_result"
            return row
        timing = bench([call])
        row.update(status="ok", median_us=timing.median_us, p20_us=timing.p20_us,
                   p80_us=timing.p80_us)
    except Exception as exc:  # a config that fails is a result too
        row.update(status="failed", error=f"{type(exc).__name__}: {str(exc)[:300]}")
    row["seconds"] = round(time.monotonic() - t0, 2)
    return row


def run(args: argparse.Namespace) -> int:
    import torch

    from kernel_templates.attention.inputs import make_inputs
    from kernel_templates.attention.reference import reference
    from search.kinds.attention.spec import AttentionProblem
    from workers.bench import EventBench

    shapes = json.loads(args.shapes.read_text())["shapes"]
    picked = [int(i) for i in args.only.split(",")] if args.only else range(len(shapes))
    args.out.mkdir(parents=True, exist_ok=True)
    bench = EventBench(target_ms=60.0, warmup_ms=20.0)
    started = time.monotonic()
    report: dict[str, Any] = {
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "gpu": torch.cuda.get_device_name(), "torch": torch.__version__,
        "triton": __import__("triton").__version__, "shapes": []}
    for i in picked:
        shape = shapes[i]
        problem = AttentionProblem(dtype=shape.get("dtype", args.dtype),
                                   **{k: shape[k] for k in FIELDS if k in shape})
        inputs = make_inputs(problem, "cuda", seed=1)
        ref = reference(problem, inputs)
        rows = [_measure(problem, b, {}, inputs, ref, bench, "cuda")
                for b in ("sdpa_cudnn", "flex")]
        if problem.s_q <= 16:
            configs = [("triton_decode", c) for c in DECODE]
        else:
            configs = [("triton", {"BLOCK_M": bm, "BLOCK_N": bn, "num_warps": w,
                                   "num_stages": s, **o})
                       for (bm, bn, w, s), o in itertools.product(BASES, OPTIONS)]
        for backend, config in configs:
            if time.monotonic() - started > args.budget_s:
                rows.append({"backend": backend, "config": config, "status": "skipped",
                             "error": "sweep budget spent"})
                continue
            rows.append(_measure(problem, backend, config, inputs, ref, bench, "cuda"))
        entry = {"shape": _label(shape), "flops": problem.flops, "bytes": problem.min_bytes,
                 "rows": rows}
        report["shapes"].append(entry)
        _print(entry)
        (args.out / "attention_sweep.json").write_text(json.dumps(report, indent=1))
        del inputs, ref
        torch.cuda.empty_cache()
    return 0


def _print(entry: dict[str, Any]) -> None:
    ok = [r for r in entry["rows"] if r.get("status") == "ok"]
    cudnn = next((r["median_us"] for r in ok if r["backend"] == "sdpa_cudnn"), None)
    print(f"## {entry['shape']}", flush=True)
    for r in sorted(ok, key=lambda r: r["median_us"]):
        rel = f"{cudnn / r['median_us']:.3f}x cuDNN" if cudnn else ""
        print(f"  {r['backend']:14s} {json.dumps(r['config'])[:90]:90s} "
              f"{r['median_us']:9.1f} us {rel}", flush=True)
    for r in entry["rows"]:
        if r.get("status") not in ("ok", "skipped"):
            print(f"  {r['backend']} {r['config']} {r['status']} {r.get('error', '')[:160]}",
                  flush=True)
