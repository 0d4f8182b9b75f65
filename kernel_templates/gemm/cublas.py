"""The "library" side: vendor kernels reached through PyTorch (cuBLAS for GEMM).

bf16/fp16/fp32 go through ``torch.matmul``; fp8 e4m3 through ``torch._scaled_mm`` (cuBLASLt's
fp8 GEMM on CUDA), the per-tensor scaled product the CUTLASS fp8 kernels are compared with.
"""

from __future__ import annotations

import torch

from kernel_templates.errors import Unsupported

__all__ = ["DTYPES", "FP8_DTYPES", "cublas_matmul", "cublas_scaled_mm"]

#: Input dtypes served through ``torch.matmul``.
DTYPES = (torch.bfloat16, torch.float16, torch.float32)
#: Input dtypes served through ``torch._scaled_mm``.
FP8_DTYPES = (torch.float8_e4m3fn,)


def cublas_matmul(a: torch.Tensor, b: torch.Tensor,
                  out: torch.Tensor | None = None) -> torch.Tensor:
    """``a @ b`` through ``torch.matmul`` (cuBLAS/cuBLASLt on CUDA), into ``out`` when given.

    Column-major operands are passed as they are: cuBLAS takes the transpose flags itself, with
    no copy. ``out`` must have the inputs' dtype (``torch.matmul`` does not convert). fp32 runs in
    whatever precision ``torch.backends.cuda.matmul.allow_tf32`` says; the worker leaves it off.
    """
    if a.dtype not in DTYPES:
        raise Unsupported(f"cublas through torch.matmul does not serve dtype {a.dtype}")
    if out is None:
        return torch.matmul(a, b)
    if out.dtype != a.dtype:
        raise Unsupported(f"cublas through torch.matmul writes {a.dtype}, not {out.dtype}")
    return torch.matmul(a, b, out=out)


def cublas_scaled_mm(a: torch.Tensor, b: torch.Tensor, scale_a: torch.Tensor,
                     scale_b: torch.Tensor, out: torch.Tensor) -> torch.Tensor:
    """``out = (scale_a * a) @ (scale_b * b)`` through ``torch._scaled_mm`` into ``out``.

    ``a`` row-major and ``b`` column-major 2-D fp8 matrices, per-tensor fp32 scales on their
    device; ``out`` sets the output dtype. ``use_fast_accum`` stays off (the default): it is
    the accurate cuBLASLt path, the one a caller of ``torch._scaled_mm`` gets. The ``out=``
    form writes the caller's buffer, so a benchmark times the GEMM with no extra copy.
    """
    if a.dtype not in FP8_DTYPES or b.dtype != a.dtype:
        raise Unsupported(f"torch._scaled_mm serves {FP8_DTYPES} inputs, got {a.dtype} x "
                          f"{b.dtype}")
    return torch._scaled_mm(a, b, scale_a=scale_a, scale_b=scale_b, out_dtype=out.dtype,
                            out=out)
