"""The error fp8 e4m3 computation cannot avoid: both operands quantised as the fp8 tier does,
multiplied exactly, against the float64 product of the unquantised inputs (a CPU run).

The quantisation is ``tests/kernel_templates/test_fp8_template.py``'s torch definition, which
the tier's Triton kernels match bit for bit; the product of the dequantised copies is taken in
float64, so what is left is the quantisation alone (a kernel adds its accumulation and its
output rounding on top). Scales are the tier's (per row of A and column of B, or per tensor)
and, for comparison, one per row (column) and 128-element block of K (``block128``, as
DeepSeek-V3-style block-scaled fp8 does). Inputs are the worker's for the problem
(``make_inputs``: entries N(0, k^-1/2)), uniform ones in [-1, 1], and normal ones whose
128-element blocks of K have magnitudes spread over three decades (``10^U(-3, 0)``: the case
finer scales are for). Besides the product's error, each operand's own
(``‖q(x) − x‖_F / ‖x‖_F``). Writes ``fp8_error.{json,md}`` under ``--out``.

    python -m scripts.bench fp8-error --out /tmp/fp8err [--shapes 1024x1024x1024,4096x4096x4096]
"""

from __future__ import annotations

import argparse
import json
import platform
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

DISTRIBUTIONS = ("worker inputs (normal)", "uniform", "normal, blocks 10^U(-3,0)")
SCALES = ("row", "tensor", "block128")
#: Elements of K sharing one scale under ``block128``.
BLOCK = 128


def add_arguments(ap: argparse.ArgumentParser) -> None:
    """The ``fp8-error`` subcommand's options."""
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--shapes", default="1024x1024x1024,4096x4096x4096")
    ap.add_argument("--seeds", type=int, default=2)


def quantised(x: Any, scales: str) -> Any:
    """``x`` quantised to e4m3 as the fp8 tier does and dequantised, in float64; ``block128``:
    one scale per row and 128 columns (the last block of a row may be shorter)."""
    import torch

    if scales == "block128":
        return torch.cat([quantised(x[:, j:j + BLOCK], "row")
                          for j in range(0, x.shape[1], BLOCK)], dim=1)
    x = x.float()
    amax = x.abs().amax(dim=1) if scales == "row" else x.abs().amax().reshape(1)
    nonzero, ones = amax > 0, torch.ones_like(amax)
    scale = torch.where(nonzero, amax / torch.full_like(amax, 448.0), ones)
    inv = torch.where(nonzero, torch.full_like(amax, 448.0) / torch.where(nonzero, amax, ones),
                      ones)
    per = (lambda v: v[:, None]) if scales == "row" else (lambda v: v)
    q = (x * per(inv)).clamp(-448, 448).to(torch.float8_e4m3fn)
    return q.double() * per(scale).double()


def _operands(m: int, n: int, k: int, dist: str, seed: int) -> tuple[Any, Any]:
    import torch

    from kernel_templates.gemm.inputs import make_inputs
    from search.kinds.gemm.spec import GemmProblem

    g = torch.Generator().manual_seed(seed)
    if dist == DISTRIBUTIONS[1]:
        a = (torch.rand(m, k, generator=g) * 2 - 1).to(torch.bfloat16)
        b = (torch.rand(k, n, generator=g) * 2 - 1).to(torch.bfloat16)
        return a, b
    if dist == DISTRIBUTIONS[2]:
        blocks = -(-k // BLOCK)

        def spread(rows: int) -> Any:  # one magnitude per row and block of K
            mag = 10 ** (-3 * torch.rand(rows, blocks, generator=g))
            return mag.repeat_interleave(BLOCK, dim=1)[:, :k]

        a = torch.randn(m, k, generator=g) * spread(m)
        b = (torch.randn(n, k, generator=g) * spread(n)).T
        return a.to(torch.bfloat16), b.to(torch.bfloat16)
    inp = make_inputs(GemmProblem(m=m, n=n, k=k), "cpu", seed)
    return inp.a, inp.b


def measure(m: int, n: int, k: int, seeds: int) -> list[dict[str, Any]]:
    from kernel_templates.accuracy import rel_error

    rows = []
    for dist in DISTRIBUTIONS:
        for scales in SCALES:
            errs, errs_out, errs_a, errs_b = [], [], [], []
            for seed in range(seeds):
                a, b = _operands(m, n, k, dist, seed)
                exact = a.double() @ b.double()
                qa, qb = quantised(a, scales), quantised(b.T, scales).T
                got = qa @ qb
                errs.append(rel_error(got, exact))
                errs_out.append(rel_error(got.bfloat16(), exact))
                errs_a.append(rel_error(qa, a.double()))
                errs_b.append(rel_error(qb, b.double()))
            rows.append({"shape": f"{m}x{n}x{k}", "inputs": dist, "scales": scales,
                         "rel_error": max(errs), "rel_error_bf16_out": max(errs_out),
                         "rel_error_a": max(errs_a), "rel_error_b": max(errs_b),
                         "seeds": seeds})
    return rows


def run(args: argparse.Namespace) -> int:
    import torch

    args.out.mkdir(parents=True, exist_ok=True)
    rows = []
    for item in args.shapes.split(","):
        m, n, k = (int(v) for v in item.lower().split("x"))
        rows += measure(m, n, k, args.seeds)
    meta = {"date": datetime.now(UTC).isoformat(timespec="seconds"), "torch": torch.__version__,
            "python": platform.python_version(), "machine": platform.machine(),
            "command": f"python -m scripts.bench fp8-error --out OUT --shapes {args.shapes} "
                       f"--seeds {args.seeds}"}
    (args.out / "fp8_error.json").write_text(json.dumps({"meta": meta, "rows": rows},
                                                        separators=(",", ":")))
    text = render(meta, rows)
    (args.out / "fp8_error.md").write_text(text)
    print(text)
    return 0


def render(meta: dict[str, Any], rows: list[dict[str, Any]]) -> str:
    lines = [f"fp8 e4m3 quantisation error (torch {meta['torch']}, {meta['date']}): the largest "
             "over the seeds of ‖out − ref‖_F / ‖ref‖_F, ref the float64 product of the "
             "unquantised inputs.", "",
             "| shape | inputs | scales | A rel. error | B rel. error | rel. error | "
             "with a bf16 output |", "|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['shape']} | {r['inputs']} | {r['scales']} | "
                     f"{r['rel_error_a']:.4f} | {r['rel_error_b']:.4f} | {r['rel_error']:.4f} | "
                     f"{r['rel_error_bf16_out']:.4f} |")
    return "\n".join(lines) + "\n"
