"""The "library" side: vendor kernels reached through PyTorch (cuBLAS for GEMM)."""

from __future__ import annotations

import torch

from kernel_templates.errors import Unsupported

__all__ = ["DTYPES", "cublas_matmul"]

#: Input dtypes served through ``torch.matmul``.
DTYPES = (torch.bfloat16, torch.float16, torch.float32)


def cublas_matmul(a: torch.Tensor, b: torch.Tensor,
                  out: torch.Tensor | None = None) -> torch.Tensor:
    """``a @ b`` through ``torch.matmul`` (cuBLAS/cuBLASLt on CUDA), into ``out`` when given.

    Column-major operands are passed as they are: cuBLAS takes the transpose flags itself, with
    no copy. ``out`` must have the inputs' dtype (``torch.matmul`` does not convert). fp32 runs in
    whatever precision ``torch.backends.cuda.matmul.allow_tf32`` says; the worker leaves it off.
    """
    if a.dtype not in DTYPES:
        raise Unsupported(f"cublas does not serve dtype {a.dtype} in this version")
    if out is None:
        return torch.matmul(a, b)
    if out.dtype != a.dtype:
        raise Unsupported(f"cublas through torch.matmul writes {a.dtype}, not {out.dtype}")
    return torch.matmul(a, b, out=out)
