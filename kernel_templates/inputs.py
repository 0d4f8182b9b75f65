"""Random operands for a GEMM problem, laid out as the problem says."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from kernel_templates.errors import Unsupported
from search.types import GemmProblem

__all__ = ["TORCH_DTYPES", "GemmInputs", "make_inputs", "torch_dtype"]

TORCH_DTYPES: dict[str, torch.dtype] = {
    "bf16": torch.bfloat16,
    "fp16": torch.float16,
    "fp32": torch.float32,
}


def torch_dtype(name: str) -> torch.dtype:
    """The torch dtype of a problem dtype name; fp8 is not served in this version."""
    try:
        return TORCH_DTYPES[name]
    except KeyError:
        raise Unsupported(f"dtype {name!r} is not served in this version") from None


@dataclass
class GemmInputs:
    """One input set: the operands and the output buffer a kernel writes."""

    a: torch.Tensor
    b: torch.Tensor
    out: torch.Tensor


def _operand(batch: int, rows: int, cols: int, layout: str, scale: float, dtype: torch.dtype,
             device: torch.device, gen: torch.Generator) -> torch.Tensor:
    # Column-major storage of [rows, cols] is the transpose of a row-major [cols, rows].
    shape = (batch, rows, cols) if layout == "row" else (batch, cols, rows)
    t = torch.randn(shape, generator=gen, device=device, dtype=torch.float32) * scale
    t = t.to(dtype)
    if layout == "col":
        t = t.transpose(1, 2)
    return t if batch > 1 else t[0]


def make_inputs(problem: GemmProblem, device: torch.device | str, seed: int) -> GemmInputs:
    """Fresh operands from ``seed``: normal entries scaled by K^-1/4 so every product entry is
    about N(0, 1) whatever K is (no fp16 overflow, no zeros), and an output buffer filled with
    NaN so an element a kernel forgets to write fails the check."""
    device = torch.device(device)
    dtype = torch_dtype(problem.dtype)
    out_dtype = torch_dtype(problem.out_dtype or problem.dtype)
    gen = torch.Generator(device=device)
    gen.manual_seed(seed)
    scale = problem.k ** -0.25
    a = _operand(problem.batch, problem.m, problem.k, problem.layout_a, scale, dtype, device, gen)
    b = _operand(problem.batch, problem.k, problem.n, problem.layout_b, scale, dtype, device, gen)
    shape = (problem.batch, problem.m, problem.n) if problem.batch > 1 else (problem.m, problem.n)
    out = torch.full(shape, float("nan"), dtype=out_dtype, device=device)
    return GemmInputs(a=a, b=b, out=out)
