"""Random operands for a GEMM problem, laid out as the problem says (with scales for fp8)."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from kernel_templates.errors import Unsupported
from search.kinds.gemm.spec import GemmProblem

__all__ = ["FP8_SPREAD", "TORCH_DTYPES", "GemmInputs", "make_inputs", "torch_dtype"]

TORCH_DTYPES: dict[str, torch.dtype] = {
    "bf16": torch.bfloat16,
    "fp16": torch.float16,
    "fp32": torch.float32,
    "fp8_e4m3": torch.float8_e4m3fn,
}
#: Standard deviations of the stored fp8 A and B entries. Entries of a few units use e4m3's
#: mantissa (N(0, 1) would put most of them among the subnormals' coarse steps), stay far under
#: its 448 maximum, and differ between A and B so that a kernel that applies one operand's scale
#: to both, or swaps them, gives a wrong product.
FP8_SPREAD = (2.0, 4.0)


def torch_dtype(name: str) -> torch.dtype:
    """The torch dtype of a problem dtype name."""
    try:
        return TORCH_DTYPES[name]
    except KeyError:
        raise Unsupported(f"dtype {name!r} is not served") from None


@dataclass
class GemmInputs:
    """One input set: the operands and the output buffer a kernel writes.

    ``scale_a``/``scale_b`` are per-tensor fp32 scalars on the operands' device for scaled
    (fp8) problems, ``None`` otherwise: the product to compute is
    ``(scale_a * a) @ (scale_b * b)``, as ``torch._scaled_mm`` defines it.
    """

    a: torch.Tensor
    b: torch.Tensor
    out: torch.Tensor
    scale_a: torch.Tensor | None = None
    scale_b: torch.Tensor | None = None


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
    """Fresh operands from ``seed``, and an output buffer filled with NaN so an element a kernel
    forgets to write fails the check.

    Entries are normal, scaled so every product entry is about N(0, 1) whatever K is (no fp16
    overflow, no zeros): by K^-1/4 for bf16/fp16/fp32. fp8 operands are stored with the
    ``FP8_SPREAD`` standard deviations and carry per-tensor scales (not 1) that bring each
    dequantised operand to the same K^-1/4 spread, as a quantised model's tensors would.
    """
    device = torch.device(device)
    dtype = torch_dtype(problem.dtype)
    out_dtype = torch_dtype(problem.out_dtype or problem.dtype)
    gen = torch.Generator(device=device)
    gen.manual_seed(seed)
    spread = problem.k ** -0.25
    sd_a, sd_b = FP8_SPREAD if problem.scaled else (spread, spread)
    a = _operand(problem.batch, problem.m, problem.k, problem.layout_a, sd_a, dtype, device, gen)
    b = _operand(problem.batch, problem.k, problem.n, problem.layout_b, sd_b, dtype, device, gen)
    shape = (problem.batch, problem.m, problem.n) if problem.batch > 1 else (problem.m, problem.n)
    out = torch.full(shape, float("nan"), dtype=out_dtype, device=device)
    if not problem.scaled:
        return GemmInputs(a=a, b=b, out=out)
    scale_a = torch.tensor(spread / sd_a, dtype=torch.float32, device=device)
    scale_b = torch.tensor(spread / sd_b, dtype=torch.float32, device=device)
    return GemmInputs(a=a, b=b, out=out, scale_a=scale_a, scale_b=scale_b)
