"""A lowered GEMM's fp8 quantisation timed alone: two passes against panels (a GPU run).

For each shape ``MxNxK``: bf16 (or fp16) A ``[M, K]`` and B ``[K, N]`` (``--layout-b``) with
random normal entries, both quantised per row of A and per column of B (B through its
transpose, as ``lowered_matmul`` does) by each configuration of ``--configs``:

- ``two_pass:RxKxW``: ``fp8_quant.quantise`` per operand (zeroing, amax and cast launches each,
  ``Q_MODE="two_pass"``) with ``Q_BLOCK_R=R``, ``Q_BLOCK_K=K``, ``Q_WARPS=W``;
- ``panel:RxKxWxS``: ``quantise_pair_panel``, both operands in one launch
  (``Q_MODE="panel"``), with ``S`` pipeline stages of the walks over K;
- ``panel_x2:RxKxWxS``: the panel kernel launched once per operand (``quantise_rows_panel``).

Every configuration's fp8 copies and scales are checked bit for bit against the first
two-pass configuration's before anything is timed (a mismatch is reported, not timed). Times
are ``triton.testing.do_bench``'s (CUDA events, the L2 flushed before every call): the median
and the 20th-80th percentiles in microseconds, and the share of the traffic bound: both
operands read once and their fp8 copies and scales written once, at ``--bandwidth-gbs``.
Prints a Markdown table and writes the rows as JSON to ``--out``.

    python -m scripts.bench quant --out /tmp/quant.json [--shapes 4096x4096x4096] \
        [--configs two_pass:32x128x4,panel:16x256x4x2] [--bandwidth-gbs 3350]
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

DEFAULT_SHAPES = "4096x4096x4096,8192x8192x8192"
#: The first is the reference every other configuration's bits are checked against (the
#: lowered space's default quantisation).
DEFAULT_CONFIGS = ",".join([
    "two_pass:32x128x4", "two_pass:4x512x4", "two_pass:16x256x4", "two_pass:8x512x4",
    "panel:16x256x4x1", "panel:16x256x4x2", "panel:16x256x4x3", "panel:8x256x4x2",
    "panel:8x512x4x2", "panel:16x128x4x2", "panel:16x512x8x2", "panel:32x128x4x2",
    "panel:32x256x8x2", "panel:4x512x4x2", "panel_x2:16x256x4x2",
])
MODES = ("two_pass", "panel", "panel_x2")


def parse_shapes(text: str) -> list[tuple[int, int, int]]:
    """``"MxNxK,..."`` as ``[(m, n, k), ...]``."""
    out = []
    for item in text.split(","):
        dims = item.strip().lower().split("x")
        if len(dims) != 3 or not all(d.isdigit() and int(d) > 0 for d in dims):
            raise argparse.ArgumentTypeError(f"{item!r} is not MxNxK")
        out.append((int(dims[0]), int(dims[1]), int(dims[2])))
    return out


def parse_configs(text: str) -> list[dict[str, Any]]:
    """``"mode:RxKxW[xS],..."`` as ``[{"mode", "block_r", "block_k", "num_warps", "stages"}]``
    (``S``, panels only, defaults to ``fp8_quant.PANEL_STAGES``'s value, 2)."""
    out = []
    for item in text.split(","):
        mode, _, tiles = item.strip().partition(":")
        dims = tiles.lower().split("x")
        if mode not in MODES:
            raise argparse.ArgumentTypeError(f"{item!r}: the mode must be one of "
                                             f"{list(MODES)}")
        want = (3,) if mode == "two_pass" else (3, 4)
        if len(dims) not in want or not all(d.isdigit() and int(d) > 0 for d in dims):
            raise argparse.ArgumentTypeError(
                f"{item!r}: {mode} takes " + ("RxKxW" if mode == "two_pass"
                                                         else "RxKxW or RxKxWxS"))
        r, k, w = (int(d) for d in dims[:3])
        for name, v in (("R", r), ("K", k), ("W", w)):
            if v & (v - 1):
                raise argparse.ArgumentTypeError(f"{item!r}: {name}={v} is not a "
                                                 "power of two")
        out.append({"mode": mode, "block_r": r, "block_k": k, "num_warps": w,
                    "stages": int(dims[3]) if len(dims) == 4 else (2 if mode != "two_pass"
                                                                  else None)})
    if out[0]["mode"] != "two_pass":
        raise argparse.ArgumentTypeError("the first configuration is the reference "
                                         "and must be a two_pass one")
    return out


def add_arguments(ap: argparse.ArgumentParser) -> None:
    """The ``quant`` subcommand's options."""
    ap.add_argument("--out", type=Path, required=True, help="the JSON report's path")
    ap.add_argument("--shapes", type=parse_shapes, default=parse_shapes(DEFAULT_SHAPES),
                    help=f"MxNxK,... (default {DEFAULT_SHAPES})")
    ap.add_argument("--configs", type=parse_configs, default=parse_configs(DEFAULT_CONFIGS),
                    help="mode:RxKxW[xS],... (two_pass, panel, panel_x2; the first, a "
                         "two_pass one, is the reference)")
    ap.add_argument("--dtype", choices=("bf16", "fp16"), default="bf16")
    ap.add_argument("--layout-b", choices=("row", "col"), default="row",
                    help="B [K, N] row-major (B^T strided, as a row-major bf16 problem) or "
                         "column-major")
    ap.add_argument("--bandwidth-gbs", type=float, default=3000.0,
                    help="DRAM bandwidth of the traffic bound, GB/s (default 3000)")
    ap.add_argument("--warmup-ms", type=float, default=25.0)
    ap.add_argument("--rep-ms", type=float, default=200.0)


def traffic_bytes(m: int, n: int, k: int, elt: int) -> int:
    """Bytes a quantisation of both operands must move: each read once, its fp8 copy and its
    fp32 scales written once."""
    return (m + n) * (k * elt + k + 4)


def _quantiser(cfg: dict[str, Any], a: Any, bt: Any, bufs: dict[str, Any]) -> Any:
    from kernel_templates.gemm import fp8_quant as fq

    tiles = {"block_r": cfg["block_r"], "block_k": cfg["block_k"],
             "num_warps": cfg["num_warps"]}
    qa, sa, qb, sb = bufs["qa"], bufs["sa"], bufs["qb"], bufs["sb"]
    if cfg["mode"] == "two_pass":
        def call() -> None:
            fq.quantise(a, "row", q=qa, scale=sa, amax=bufs["amax_a"], **tiles)
            fq.quantise(bt, "row", q=qb, scale=sb, amax=bufs["amax_b"], **tiles)
    elif cfg["mode"] == "panel":
        def call() -> None:
            fq.quantise_pair_panel(a, bt, qa=qa, sa=sa, qb=qb, sb=sb, stages=cfg["stages"],
                                   **tiles)
    else:
        def call() -> None:
            fq.quantise_rows_panel(a, q=qa, scale=sa, stages=cfg["stages"], **tiles)
            fq.quantise_rows_panel(bt, q=qb, scale=sb, stages=cfg["stages"], **tiles)
    return call


def label(cfg: dict[str, Any]) -> str:
    """``mode:RxKxW[xS]``, as ``--configs`` takes it."""
    tail = f"x{cfg['stages']}" if cfg["stages"] is not None else ""
    return f"{cfg['mode']}:{cfg['block_r']}x{cfg['block_k']}x{cfg['num_warps']}{tail}"


def measure_shape(m: int, n: int, k: int, configs: list[dict[str, Any]],
                  args: argparse.Namespace, device: str = "cuda", timer: Any = None
                  ) -> list[dict[str, Any]]:
    """One row per configuration: its bits against the reference's, then its time
    (``timer``: ``triton.testing.do_bench``'s signature; the CPU tests pass their own)."""
    import torch
    import triton

    from kernel_templates.gemm import fp8_quant as fq

    dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}[args.dtype]
    timer = timer or triton.testing.do_bench
    g = torch.Generator(device=device).manual_seed(m + n + k)
    a = torch.randn(m, k, generator=g, device=device).to(dtype)
    b = (torch.randn(k, n, generator=g, device=device).to(dtype) if args.layout_b == "row"
         else torch.randn(n, k, generator=g, device=device).to(dtype).T)
    bt = b.T
    ld = fq.row_stride(k)

    def buffers() -> dict[str, Any]:
        f8, f32 = torch.float8_e4m3fn, torch.float32
        return {"qa": torch.empty(m, ld, dtype=f8, device=device)[:, :k],
                "qb": torch.empty(n, ld, dtype=f8, device=device)[:, :k],
                "sa": torch.empty(m, dtype=f32, device=device),
                "sb": torch.empty(n, dtype=f32, device=device),
                "amax_a": torch.empty(m, dtype=f32, device=device),
                "amax_b": torch.empty(n, dtype=f32, device=device)}

    bound_us = traffic_bytes(m, n, k, a.element_size()) / (args.bandwidth_gbs * 1e9) * 1e6
    ref = buffers()
    _quantiser(configs[0], a, bt, ref)()
    _sync(device)
    rows: list[dict[str, Any]] = []
    for cfg in configs:
        row: dict[str, Any] = {"shape": f"{m}x{n}x{k}", "config": label(cfg), **cfg,
                               "bound_us": bound_us}
        if cfg["mode"] != "two_pass":
            panels = -(-m // cfg["block_r"]) + -(-n // cfg["block_r"])
            row["programs"] = fq.panel_programs(a.device, panels, cfg["block_r"] * k
                                                * (a.element_size() + 1))
        rows.append(row)
        try:
            bufs = buffers()
            call = _quantiser(cfg, a, bt, bufs)
            call()
            _sync(device)
            bits = {"q": torch.uint8, "s": torch.int32}
            row["equal"] = all(torch.equal(bufs[key].view(bits[key[0]]),
                                           ref[key].view(bits[key[0]]))
                               for key in ("qa", "qb", "sa", "sb"))
            if not row["equal"]:
                row["error"] = "fp8 copies or scales differ from the reference's"
                continue
            med, p20, p80 = timer(call, warmup=args.warmup_ms, rep=args.rep_ms,
                                  quantiles=[0.5, 0.2, 0.8])
            row.update(us=med * 1e3, p20_us=p20 * 1e3, p80_us=p80 * 1e3,
                       share_of_bound=bound_us / (med * 1e3))
        except Exception as exc:  # noqa: BLE001 - one configuration's failure is its row's
            row["error"] = f"{type(exc).__name__}: {exc}"[:1000]
        print(render_rows([row], header=not rows[:-1]), flush=True)
    return rows


def _sync(device: str) -> None:
    import torch

    if device == "cuda":
        torch.cuda.synchronize()


def render_rows(rows: list[dict[str, Any]], header: bool = True) -> str:
    """Markdown rows: shape, configuration, panel programs, median and spread (us), the
    traffic bound (us) and its share of the median."""
    lines = (["| shape | config | programs | us | p20-p80 us | bound us | share of bound |",
              "|---|---|---:|---:|---:|---:|---:|"] if header else [])
    for r in rows:
        if r.get("us") is None:
            lines.append(f"| {r['shape']} | {r['config']} | {r.get('programs', '')} | "
                         f"{r.get('error', 'not timed')} | | {r['bound_us']:.1f} | |")
            continue
        lines.append(f"| {r['shape']} | {r['config']} | {r.get('programs', '')} | "
                     f"{r['us']:.1f} | {r['p20_us']:.1f}-{r['p80_us']:.1f} | "
                     f"{r['bound_us']:.1f} | {100 * r['share_of_bound']:.0f}% |")
    return "\n".join(lines)


def run_per_shape(command: str, args: argparse.Namespace, meta: dict[str, Any],
                  measure: Callable[[int, int, int], list[dict[str, Any]]],
                  render: Callable[[list[dict[str, Any]]], str]) -> list[dict[str, Any]] | None:
    """The body of a per-shape GPU benchmark (``quant``, ``lowered``): None without a CUDA
    GPU (said on stderr); otherwise the rows of ``measure`` for every shape of
    ``args.shapes``, written to ``args.out`` with the environment and ``meta`` after each
    shape (a cut run keeps its shapes), and printed as ``render``'s table."""
    import torch

    if not torch.cuda.is_available():
        print(f"{command}: this benchmark times CUDA kernels and needs a CUDA GPU; none is "
              "visible to torch here", file=sys.stderr)
        return None
    import triton

    report: dict[str, Any] = {"meta": {
        "date": datetime.now(UTC).isoformat(timespec="seconds"), "torch": torch.__version__,
        "cuda": torch.version.cuda, "triton": triton.__version__,
        "python": platform.python_version(), "gpu": torch.cuda.get_device_name(),
        "timer": "triton.testing.do_bench (L2 flushed per call), median and p20/p80",
        **meta}, "rows": []}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    for m, n, k in args.shapes:
        report["rows"] += measure(m, n, k)
        args.out.write_text(json.dumps(report, indent=1))
    print("\n" + render(report["rows"]), flush=True)
    return report["rows"]


def run(args: argparse.Namespace) -> int:
    """Check, then time, every configuration on every shape; write ``--out``."""
    rows = run_per_shape(
        "quant", args, {"dtype": args.dtype, "layout_b": args.layout_b,
                        "bandwidth_gbs": args.bandwidth_gbs, "inputs": "N(0, 1)",
                        "reference": label(args.configs[0])},
        lambda m, n, k: measure_shape(m, n, k, args.configs, args), render_rows)
    if rows is None:
        return 2
    return 0 if all(r.get("equal") for r in rows) else 1
