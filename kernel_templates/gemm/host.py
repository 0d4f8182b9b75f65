"""Host-side helpers of the Triton GEMM kernels (``triton.py``, ``skinny.py``): the device's
capabilities, TMA descriptors, cached workspaces and the launchers' operand checks."""

from __future__ import annotations

from functools import cache

import torch

from kernel_templates.errors import Unsupported

__all__ = ["DTYPES", "cached_buffer", "cc_major", "check_operands", "next_epoch", "sm_count",
           "tma_describe"]

#: Input dtypes the Triton templates serve (fp8 is left for a later version).
DTYPES = (torch.bfloat16, torch.float16, torch.float32)


@cache
def cc_major(device: torch.device) -> int:
    """The compute capability's major number of a CUDA ``device``; 0 for any other device."""
    return torch.cuda.get_device_capability(device)[0] if device.type == "cuda" else 0


@cache
def sm_count(device: torch.device) -> int:
    """SMs of a CUDA ``device``; 4 for the interpreter (few programs keep it quick)."""
    if device.type == "cuda":
        return torch.cuda.get_device_properties(device).multi_processor_count
    return 4


def tma_describe(t: torch.Tensor, rows: int, cols: int, block: tuple[int, int]):
    """(TMA descriptor, stored transposed) of a 2-D ``rows x cols`` operand, or ``None`` when
    it is not 16-byte aligned with a unit stride along rows or columns."""
    from triton.tools.tensor_descriptor import TensorDescriptor

    elt = t.element_size()
    if t.data_ptr() % 16:
        return None
    if t.stride(1) == 1 and (t.stride(0) * elt) % 16 == 0:
        return TensorDescriptor(t, [rows, cols], [t.stride(0), 1], list(block)), False
    if t.stride(0) == 1 and (t.stride(1) * elt) % 16 == 0:
        return TensorDescriptor(t, [cols, rows], [t.stride(1), 1], [block[1], block[0]]), True
    return None


def cached_buffer(cache_: dict[torch.device, torch.Tensor], device: torch.device, numel: int,
                  dtype: torch.dtype, zeroed: bool, least: int) -> torch.Tensor:
    """A buffer of at least ``numel`` elements on ``device`` from ``cache_``, grown (to at least
    ``least``) on demand and reused across calls; ``zeroed`` ones are zeroed when allocated only
    (a kernel using them must leave them at zero)."""
    buf = cache_.get(device)
    if buf is None or buf.numel() < numel:
        buf = (torch.zeros if zeroed else torch.empty)(max(numel, least), dtype=dtype,
                                                       device=device)
        cache_[device] = buf
    return buf[:numel]


def next_epoch(epochs: dict[torch.device, int], buffers: dict[torch.device, torch.Tensor],
               device: torch.device) -> int:
    """The next launch number on ``device`` of a kernel whose zeroed buffer in ``buffers``
    (``cached_buffer``) holds words tagged with the launch that wrote them: 1, 2, ... After
    2**31 - 2 launches the buffer is zeroed and the count starts again, so a word never carries
    the current number before this launch writes it."""
    epoch = epochs.get(device, 0) + 1
    if epoch >= 2**31 - 1:
        buffers[device].zero_()
        epoch = 1
    epochs[device] = epoch
    return epoch


def check_operands(a: torch.Tensor, b: torch.Tensor, out: torch.Tensor | None,
                   out_dtype: torch.dtype | None, name: str
                   ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """``(a3, b3, c3, out)``: the operands as 3-D ``[batch, M, K]``, ``[batch, K, N]`` views, the
    output (``out``, or a new tensor of ``out_dtype``, default the input dtype) and its 3-D
    view, after the launcher's checks: one dtype among ``DTYPES``, one device, shapes that
    compose, a contiguous output, 32-bit offsets. ``name`` names the kernel in errors."""
    if a.dtype not in DTYPES:
        raise Unsupported(f"{name} does not serve dtype {a.dtype}")
    if a.dtype != b.dtype:
        raise TypeError(f"a and b differ in dtype: {a.dtype} vs {b.dtype}")
    if a.device != b.device:
        raise ValueError(f"a and b are on different devices: {a.device} vs {b.device}")
    if a.dim() != b.dim() or a.dim() not in (2, 3):
        raise ValueError(f"a and b must both be 2-D or both 3-D, got {a.dim()} and {b.dim()}")
    a3 = a if a.dim() == 3 else a.unsqueeze(0)
    b3 = b if b.dim() == 3 else b.unsqueeze(0)
    batch, m, k = a3.shape
    if b3.shape[0] != batch or b3.shape[1] != k:
        raise ValueError(f"shapes do not compose: {tuple(a.shape)} @ {tuple(b.shape)}")
    n = b3.shape[2]
    out_shape = (batch, m, n) if a.dim() == 3 else (m, n)
    if out is None:
        out = torch.empty(out_shape, dtype=out_dtype or a.dtype, device=a.device)
    else:
        if tuple(out.shape) != out_shape or out.device != a.device or not out.is_contiguous():
            raise ValueError(f"out must be a contiguous {out_shape} tensor on {a.device}")
        if out.dtype not in DTYPES:
            raise Unsupported(f"{name} does not write dtype {out.dtype}")
    if m * k >= 2**31 or k * n >= 2**31 or batch * m * n >= 2**31:
        raise Unsupported("one matrix has 2**31 elements or more (32-bit tile offsets)")
    return a3, b3, out if out.dim() == 3 else out.unsqueeze(0), out
