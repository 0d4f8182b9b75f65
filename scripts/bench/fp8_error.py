"""The error fp8 e4m3 computation cannot avoid: both operands quantised as the fp8 tier does,
multiplied exactly, against the float64 product of the unquantised inputs (a CPU run).

The quantisation is ``tests/kernel_templates/test_fp8_template.py``'s torch definition, which
the tier's Triton kernels match bit for bit; the product of the dequantised copies is taken in
float64, so what is left is the quantisation alone (a kernel adds its accumulation and its
output rounding on top). Inputs are the worker's for the problem (``make_inputs``: entries
N(0, k^-1/2)) and, for comparison, uniform ones in [-1, 1]. Writes ``fp8_error.{json,md}``
under ``--out``.

    python -m scripts.bench fp8-error --out /tmp/fp8err [--shapes 1024x1024x1024,4096x4096x4096]
"""

from __future__ import annotations

import argparse
import json
import platform
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

DISTRIBUTIONS = ("worker inputs (normal)", "uniform")


def add_arguments(ap: argparse.ArgumentParser) -> None:
    """The ``fp8-error`` subcommand's options."""
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--shapes", default="1024x1024x1024,4096x4096x4096")
    ap.add_argument("--seeds", type=int, default=2)


def quantised(x: Any, scales: str) -> Any:
    """``x`` quantised to e4m3 as the fp8 tier does and dequantised, in float64."""
    import torch

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

    if dist == DISTRIBUTIONS[1]:
        g = torch.Generator().manual_seed(seed)
        a = (torch.rand(m, k, generator=g) * 2 - 1).to(torch.bfloat16)
        b = (torch.rand(k, n, generator=g) * 2 - 1).to(torch.bfloat16)
        return a, b
    inp = make_inputs(GemmProblem(m=m, n=n, k=k), "cpu", seed)
    return inp.a, inp.b


def measure(m: int, n: int, k: int, seeds: int) -> list[dict[str, Any]]:
    from kernel_templates.accuracy import rel_error

    rows = []
    for dist in DISTRIBUTIONS:
        for scales in ("row", "tensor"):
            errs, errs_out = [], []
            for seed in range(seeds):
                a, b = _operands(m, n, k, dist, seed)
                exact = a.double() @ b.double()
                got = quantised(a, scales) @ quantised(b.T, scales).T
                errs.append(rel_error(got, exact))
                errs_out.append(rel_error(got.bfloat16(), exact))
            rows.append({"shape": f"{m}x{n}x{k}", "inputs": dist, "scales": scales,
                         "rel_error": max(errs), "rel_error_bf16_out": max(errs_out),
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
             "| shape | inputs | scales | rel. error | with a bf16 output |",
             "|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['shape']} | {r['inputs']} | {r['scales']} | {r['rel_error']:.4f} | "
                     f"{r['rel_error_bf16_out']:.4f} |")
    return "\n".join(lines) + "\n"
