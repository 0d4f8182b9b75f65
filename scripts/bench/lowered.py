"""A bf16 GEMM computed in fp8, taken apart: quantisation, product and the whole call (a GPU run).

For each shape ``MxNxK`` (bf16 A ``[M, K]`` and B ``[K, N]`` row-major, the worker's inputs:
``make_inputs``), side by side in one run:

- ``bf16 cuBLAS``: ``torch.mm`` into the output, the baseline;
- ``quantise row``: both operands quantised per row of A and column of B in two passes
  (``fp8_quant.quantise``, the tiles of ``--row-q``);
- ``quantise whole rows``: A per row in one launch holding whole rows
  (``quantise_whole_rows``), B per column in two passes over each tile of ``--whole-q``;
- ``quantise block``: A per row and 128 of K (``quantise_groups``, ``--block-q`` rows and
  warps), B per 128 x 128 block (``quantise_blocks``): one launch per operand, each read once;
- ``product row`` / ``product block``: the fp8 product alone on those copies
  (``fp8.fp8_gemm``) under each tile of ``--row-tiles`` / ``--block-tiles``;
- ``lowered row`` / ``lowered whole rows`` / ``lowered block``: ``fp8.lowered_matmul``,
  everything a user would run (quantisation, product, the bf16 output), under each tile.

Every whole call's output (NaN-poisoned first) is checked against the float64 product of the
bf16 inputs before it is timed (a relative error between 1% and 6%: e4m3's rounding, nothing
dropped); every product alone against the float64 product of the dequantised copies it read.
Times are ``triton.testing.do_bench``'s (the L2 flushed before each call): medians and the
20th-80th percentiles in microseconds, and each whole call's speed-up over bf16 cuBLAS.
Prints Markdown and writes JSON to ``--out``.

    python -m scripts.bench lowered --out /tmp/lowered.json [--shapes 4096x4096x4096]
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from scripts.bench.quant import parse_shapes, run_per_shape

DEFAULT_SHAPES = "4096x4096x4096,8192x8192x8192"
#: Tiles ``BMxBNxBKxWARPSxSTAGES[p]`` (``p``: persistent, with a TMA store); row-scaled tiles
#: take a trailing ``f`` for the tensor cores' fast accumulation.
ROW_TILES = "128x256x128x8x3pf,128x256x128x8x3"
BLOCK_TILES = "256x128x128x8x3,256x128x128x8x3p,128x128x128x8x4,128x128x128x8x4p,128x128x128x4x4"


def parse_tiles(text: str) -> list[dict[str, Any]]:
    """``"BMxBNxBKxWxS[p][f],..."`` as fp8 template configurations (GROUP_M 8)."""
    out = []
    for item in text.split(","):
        body = item.strip().lower()
        flags = ""
        while body and body[-1] in "pf":
            flags, body = flags + body[-1], body[:-1]
        dims = body.split("x")
        if len(dims) != 5 or not all(d.isdigit() and int(d) > 0 for d in dims):
            raise argparse.ArgumentTypeError(f"{item!r} is not BMxBNxBKxWARPSxSTAGES[p][f]")
        bm, bn, bk, w, s = (int(d) for d in dims)
        out.append(dict(BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk, GROUP_M=8, num_warps=w,
                        num_stages=s, PERSISTENT=int("p" in flags),
                        TMA_STORE=int("p" in flags), FAST_ACC=int("f" in flags)))
    return out


def add_arguments(ap: argparse.ArgumentParser) -> None:
    """The ``lowered`` subcommand's options."""
    ap.add_argument("--out", type=Path, required=True, help="the JSON report's path")
    ap.add_argument("--shapes", type=parse_shapes, default=parse_shapes(DEFAULT_SHAPES))
    ap.add_argument("--row-tiles", type=parse_tiles, default=parse_tiles(ROW_TILES))
    ap.add_argument("--block-tiles", type=parse_tiles, default=parse_tiles(BLOCK_TILES))
    ap.add_argument("--row-q", default="32x128x4", help="two-pass Q_BLOCK_RxQ_BLOCK_KxQ_WARPS")
    ap.add_argument("--whole-q", default="32x128x4,128x64x4,64x128x8,128x32x4",
                    help="whole rows of A, B in two passes over these Q_BLOCK_RxQ_BLOCK_KxQ_WARPS "
                         "tiles (the first is the lowered calls')")
    ap.add_argument("--block-q", default="32x4", help="block scales' Q_BLOCK_RxQ_WARPS")
    ap.add_argument("--warmup-ms", type=float, default=25.0)
    ap.add_argument("--rep-ms", type=float, default=200.0)


def _label(cfg: dict[str, Any]) -> str:
    return (f"{cfg['BLOCK_M']}x{cfg['BLOCK_N']}x{cfg['BLOCK_K']}x{cfg['num_warps']}x"
            f"{cfg['num_stages']}{'p' if cfg['PERSISTENT'] else ''}"
            f"{'f' if cfg['FAST_ACC'] else ''}")


def _dequantised(q: Any, s: Any, blocks: tuple[int, int] | None) -> Any:
    """fp8 ``q`` ``[R, K]`` times its scales in float64: per row (``blocks`` None: ``s`` has
    R values, or one), or per ``blocks = (rows, cols)`` block, ``s`` the ``[R / rows,
    K / cols]`` grid (``quantise_groups``' ``[groups, R]`` transposed)."""
    r, k = q.shape
    x = q.double()
    if blocks is None:
        return x * (s.double()[:, None] if s.numel() == r else s.double())
    br, bc = blocks
    return x * s.double().repeat_interleave(br, 0)[:r].repeat_interleave(bc, 1)[:, :k]


def measure_shape(m: int, n: int, k: int, args: argparse.Namespace) -> list[dict[str, Any]]:
    """The rows of one shape (each with its check), in the order of the module's list."""
    import torch
    import triton

    from kernel_templates.gemm import fp8
    from kernel_templates.gemm import fp8_quant as fq
    from kernel_templates.gemm.fp8_config import check_config
    from kernel_templates.gemm.inputs import make_inputs
    from kernel_templates.gemm.reference import reference_for, rel_error
    from search.kinds.gemm.spec import GemmProblem

    p = GemmProblem(m=m, n=n, k=k, dtype="bf16")
    inp = make_inputs(p, "cuda", m + n + k)
    a, b, out = inp.a, inp.b, inp.out
    ref = reference_for(inp)
    shape = f"{m}x{n}x{k}"
    rows: list[dict[str, Any]] = []

    def timed(what: str, config: str, call: Any, check: Any) -> dict[str, Any]:
        row: dict[str, Any] = {"shape": shape, "what": what, "config": config}
        rows.append(row)
        try:
            out.fill_(float("nan"))
            call()
            torch.cuda.synchronize()
            row["rel_error"] = err = check() if check else None
            if err is not None and not 0.0 <= err < 0.06:
                row["error"] = f"wrong result: relative error {err:.3g}"
                return row
            med, p20, p80 = triton.testing.do_bench(call, warmup=args.warmup_ms,
                                                    rep=args.rep_ms, quantiles=[0.5, 0.2, 0.8])
            row.update(us=med * 1e3, p20_us=p20 * 1e3, p80_us=p80 * 1e3)
        except Exception as exc:  # noqa: BLE001 - one contender's failure is its row's
            row["error"] = f"{type(exc).__name__}: {exc}"[:800]
        print(render([row], header=len(rows) == 1), flush=True)
        return row

    def whole() -> float:
        return rel_error(out, ref)

    timed("bf16 cuBLAS", "torch.mm", lambda: torch.mm(a, b, out=out), whole)
    bt = b.T
    ld = fq.row_stride(k)
    f8, f32 = torch.float8_e4m3fn, torch.float32
    qa = torch.empty(m, ld, dtype=f8, device="cuda")[:, :k]
    qb = torch.empty(n, ld, dtype=f8, device="cuda")[:, :k]
    sa, sb = torch.empty(m, dtype=f32, device="cuda"), torch.empty(n, dtype=f32, device="cuda")
    am, bm_ = torch.empty(m, dtype=f32, device="cuda"), torch.empty(n, dtype=f32, device="cuda")
    groups = -(-k // fq.GROUP)
    # block scales as the quantisers return them: A's [groups, M], B's [N/128, groups] (rows
    # 16-byte aligned), B's 1x128 groups [groups, N]
    cells = {name: torch.empty(size, dtype=f32, device="cuda") for name, size in (
        ("ga", fq.group_scales(m, k)), ("gb", fq.block_scales(n, k)),
        ("gb2", fq.group_scales(n, k)))}
    ga = cells["ga"].view(groups, m)
    gb = cells["gb"].view(-1, fq.block_scale_stride(k))[:, :groups]
    gb2 = cells["gb2"].view(groups, n)
    rq = [int(v) for v in args.row_q.split("x")]
    bq = [int(v) for v in args.block_q.split("x")]

    def quant_row() -> None:
        for x, q, s, amax in ((a, qa, sa, am), (bt, qb, sb, bm_)):
            fq.quantise(x, "row", block_r=rq[0], block_k=rq[1], num_warps=rq[2], q=q, scale=s,
                        amax=amax)

    def quant_whole(tiles: list[int]) -> Any:
        def call() -> None:
            fq.quantise_whole_rows(a, q=qa, scale=sa)
            fq.quantise(bt, "row", block_r=tiles[0], block_k=tiles[1], num_warps=tiles[2],
                        q=qb, scale=sb, amax=bm_)
        return call

    def quant_block() -> None:
        fq.quantise_groups(a, block_r=bq[0], num_warps=bq[1], q=qa, scale=cells["ga"])
        fq.quantise_blocks(bt, num_warps=fp8.B_BLOCK_WARPS, q=qb, scale=cells["gb"])

    def copies(block: bool) -> Any:
        if block:
            da = _dequantised(qa, ga.T, (1, fq.GROUP))
            db = _dequantised(qb, gb, (fq.BLOCK_ROWS, fq.GROUP))
        else:
            da, db = _dequantised(qa, sa, None), _dequantised(qb, sb, None)
        return da @ db.T

    timed("quantise row", args.row_q, quant_row,
          lambda: rel_error(copies(False), ref))
    for wq in args.whole_q.split(","):
        timed("quantise whole rows", wq, quant_whole([int(v) for v in wq.split("x")]),
              lambda: rel_error(copies(False), ref))
    timed("quantise block", args.block_q, quant_block,
          lambda: rel_error(copies(True), ref))

    # cuBLAS's blockwise-scaled fp8 product (torch._scaled_mm): 1x128 by 128x128 scales, as
    # the lowered PRODUCT="cublas" runs it, and, for comparison, 1x128 by 1x128
    def scaled_mm_block() -> None:
        fp8.cublas_block_product(qa, qb, ga, gb, out)

    def quant_groups_both() -> None:
        fq.quantise_groups(a, block_r=bq[0], num_warps=bq[1], q=qa, scale=cells["ga"])
        fq.quantise_groups(bt, block_r=bq[0], num_warps=bq[1], q=qb, scale=cells["gb2"])

    def scaled_mm_groups() -> None:  # B's 1x128 scales [K/128, N], N-major
        torch._scaled_mm(qa, qb.T, scale_a=ga.T, scale_b=gb2, out_dtype=out.dtype, out=out)

    for name, quant, mm, b_grid, rows_b in (
            ("1x128 x 128x128", quant_block, scaled_mm_block, gb, fq.BLOCK_ROWS),
            ("1x128 x 1x128", quant_groups_both, scaled_mm_groups, gb2.T, 1)):
        quant()
        torch.cuda.synchronize()
        exact_mm = (_dequantised(qa, ga.T, (1, fq.GROUP))
                    @ _dequantised(qb, b_grid, (rows_b, fq.GROUP)).T)
        timed("product scaled_mm", name, mm, lambda exact_mm=exact_mm: rel_error(out, exact_mm))
        timed("quantise for scaled_mm", name, quant, None)

        def lowered_scaled_mm(quant: Any = quant, mm: Any = mm) -> None:
            quant()
            mm()

        timed("lowered scaled_mm", name, lowered_scaled_mm, whole)
    for block, tiles in ((False, args.row_tiles), (True, args.block_tiles)):
        (quant_block if block else quant_row)()
        torch.cuda.synchronize()
        exact = copies(block)
        kind = "block" if block else "row"
        for cfg in tiles:
            scales = (ga, gb) if block else (sa, sb)
            checked = check_config(cfg, lowered=False)
            timed(f"product {kind}", _label(cfg),
                  lambda cfg=checked, scales=scales, block=block: fp8.fp8_gemm(
                      qa, qb, *scales, cfg, out, block_scales=block),
                  lambda exact=exact: rel_error(out, exact))
    wq = [int(v) for v in args.whole_q.split(",")[0].split("x")]
    for kind, tiles in (("row", args.row_tiles), ("whole rows", args.row_tiles),
                        ("block", args.block_tiles),
                        ("block, cuBLAS product", parse_tiles("128x128x128x8x4"))):
        q = ({"SCALES": "block", "Q_BLOCK_R": bq[0], "Q_WARPS": bq[1]} if kind == "block" else
             {"PRODUCT": "cublas", "Q_BLOCK_R": bq[0], "Q_WARPS": bq[1]}
             if kind.startswith("block") else
             {"SCALES": "row", "Q_BLOCK_R": rq[0], "Q_BLOCK_K": rq[1], "Q_WARPS": rq[2]}
             if kind == "row" else
             {"SCALES": "row", "Q_MODE": "whole_rows", "Q_BLOCK_R": wq[0], "Q_BLOCK_K": wq[1],
              "Q_WARPS": wq[2]})
        for cfg in tiles:
            config = {**cfg, **q, "PRECISION": "fp8_e4m3"}
            timed(f"lowered {kind}", _label(cfg),
                  lambda config=config: fp8.lowered_matmul(a, b, config, out), whole)
    base = rows[0].get("us")
    for row in rows:
        if base and row.get("us") and row["what"].startswith(("lowered", "bf16")):
            row["vs_cublas"] = base / row["us"]
    return rows


def render(rows: list[dict[str, Any]], header: bool = True) -> str:
    """Markdown rows: shape, contender, configuration, median and spread (us), speed-up over
    bf16 cuBLAS (whole calls), relative error."""
    lines = (["| shape | contender | config | us | p20-p80 us | vs bf16 cuBLAS | rel. error |",
              "|---|---|---|---:|---:|---:|---:|"] if header else [])
    for r in rows:
        err = f"{r['rel_error']:.3g}" if r.get("rel_error") is not None else ""
        if r.get("us") is None:
            lines.append(f"| {r['shape']} | {r['what']} | {r['config']} | "
                         f"{r.get('error', 'not timed')} | | | {err} |")
            continue
        vs = f"{r['vs_cublas']:.3f}" if r.get("vs_cublas") else ""
        lines.append(f"| {r['shape']} | {r['what']} | {r['config']} | {r['us']:.1f} | "
                     f"{r['p20_us']:.1f}-{r['p80_us']:.1f} | {vs} | {err} |")
    return "\n".join(lines)


def run(args: argparse.Namespace) -> int:
    """Check, then time, every contender on every shape; write ``--out``."""
    rows = run_per_shape("lowered", args,
                         {"inputs": "make_inputs (bf16, entries N(0, k^-1/2))"},
                         lambda m, n, k: measure_shape(m, n, k, args), render)
    if rows is None:
        return 2
    return 0 if all(r.get("us") is not None for r in rows) else 1
