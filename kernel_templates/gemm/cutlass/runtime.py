"""Run a compiled CUTLASS operation on torch tensors through its C ABI (``render.py``).

The shared library depends only on ``libcudart``; ``torch`` is imported first so the CUDA
runtime it ships is the one the library binds to. Calls run on torch's current stream; the
workspace is a torch allocation (so it comes from torch's caching allocator, not a
``cudaMalloc`` per call). A non-zero status from the launcher raises ``CutlassError`` naming the
``cutlass::Status``.
"""

from __future__ import annotations

import ctypes
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from kernel_templates.errors import LaunchError
from kernel_templates.gemm.cutlass.render import EXTRA_STATUS, RASTER, STATUS_NAMES

__all__ = ["CutlassError", "CutlassKernel", "TORCH_DTYPES", "status_name"]

TORCH_DTYPES: dict[str, torch.dtype] = {"bf16": torch.bfloat16, "fp16": torch.float16,
                                        "fp32": torch.float32,
                                        "fp8_e4m3": torch.float8_e4m3fn}

_LIBS: dict[str, ctypes.CDLL] = {}
_LIBS_LOCK = threading.Lock()


class CutlassError(LaunchError):
    """A launcher returned a non-zero status."""

    def __init__(self, op: str, code: int, what: str) -> None:
        super().__init__(f"{op}: {what} failed with {status_name(code)} ({code})")
        self.op = op
        self.code = code


def status_name(code: int) -> str:
    if 0 <= code < len(STATUS_NAMES):
        return STATUS_NAMES[code]
    return EXTRA_STATUS.get(code, f"unknown status {code}")


def _load(path: Path) -> ctypes.CDLL:
    key = str(Path(path).resolve())
    with _LIBS_LOCK:
        lib = _LIBS.get(key)
        if lib is None:
            lib = _LIBS[key] = ctypes.CDLL(key, mode=ctypes.RTLD_LOCAL)
        return lib


_c_int, _c_size, _vp = ctypes.c_int, ctypes.c_size_t, ctypes.c_void_p


class CutlassKernel:
    """One operation of a loaded library: ``kernel(a, b, out)`` computes ``out = a @ b``.

    ``meta`` is the operation's description (``CutlassOp.to_dict()``, as stored in the artifact
    manifest): dtypes and layouts to check the tensors against.
    """

    def __init__(self, library: str | Path, meta: dict[str, Any]) -> None:
        self.name: str = meta["name"]
        self.meta = meta
        self.library = Path(library)
        lib = _load(self.library)
        try:
            self._ws = getattr(lib, f"{self.name}_workspace")
            self._run = getattr(lib, f"{self.name}_run")
        except AttributeError as exc:
            raise RuntimeError(f"{self.library} does not export {self.name}'s launcher") from exc
        self._ws.restype = _c_int
        self._ws.argtypes = [_c_int] * 7 + [ctypes.POINTER(_c_size)]
        self._run.restype = _c_int
        self._run.argtypes = ([_vp] * 4 + [_c_int] * 4 + [ctypes.c_float] * 2 + [_vp]
                              + [_c_int] * 3 + [_vp, _c_size, _vp])
        self.dtype_a = TORCH_DTYPES[meta["dtype_a"]]
        self.dtype_b = TORCH_DTYPES[meta["dtype_b"]]
        self.dtype_d = TORCH_DTYPES[meta["dtype_d"]]
        self.has_c = meta.get("dtype_c") is not None
        self.alignment = (meta["alignment_a"], meta["alignment_b"], meta["alignment_d"])

    # -- checks --------------------------------------------------------------------------------
    def _check(self, a: torch.Tensor, b: torch.Tensor, out: torch.Tensor,
               c: torch.Tensor | None) -> tuple[int, int, int, int]:
        if a.dtype != self.dtype_a or b.dtype != self.dtype_b or out.dtype != self.dtype_d:
            raise TypeError(f"{self.name} takes {self.dtype_a} x {self.dtype_b} -> {self.dtype_d}"
                            f", got {a.dtype} x {b.dtype} -> {out.dtype}")
        if a.dim() not in (2, 3) or b.dim() != a.dim() or out.dim() != a.dim():
            raise ValueError("a, b and out must all be 2-D, or all 3-D (batched)")
        batch = a.shape[0] if a.dim() == 3 else 1
        m, k = a.shape[-2:]
        k2, n = b.shape[-2:]
        if k2 != k or tuple(out.shape[-2:]) != (m, n) or (
                a.dim() == 3 and not (b.shape[0] == out.shape[0] == batch)):
            raise ValueError(f"shapes do not chain: a {tuple(a.shape)}, b {tuple(b.shape)}, "
                             f"out {tuple(out.shape)}")
        _check_layout("a", a, self.meta["layout_a"], m, k)
        _check_layout("b", b, self.meta["layout_b"], k, n)
        _check_layout("out", out, "row", m, n)
        if c is not None:
            if not self.has_c:
                raise ValueError(f"{self.name} has no C source (it computes alpha * a @ b only)")
            if c.dtype != self.dtype_d or c.shape != out.shape:
                raise ValueError("c must have out's dtype and shape")
            _check_layout("c", c, "row", m, n)
        contiguous = (k if self.meta["layout_a"] == "row" else m,
                      n if self.meta["layout_b"] == "row" else k, n)
        for name, extent, align in zip("abd", contiguous, self.alignment, strict=True):
            if extent % align:
                raise ValueError(f"{self.name} needs the contiguous extent of {name} to be a "
                                 f"multiple of {align}, got {extent}")
        for name, t in (("a", a), ("b", b), ("out", out), ("c", c)):
            if t is None:
                continue
            if t.device.type != "cuda" or t.device != a.device:
                raise ValueError(f"{name} must be on a's CUDA device, is on {t.device}")
            if t.data_ptr() % 16:
                raise ValueError(f"{name} must start on a 16-byte boundary (TMA)")
        return m, n, k, batch

    # -- the call ---------------------------------------------------------------------------------
    def workspace_size(self, m: int, n: int, k: int, batch: int = 1, *, swizzle: int = 1,
                       raster: str = "heuristic", splits: int = 1) -> int:
        """Bytes of workspace the kernel needs (GPU only: it reads the device's SM count)."""
        size = _c_size(0)
        rc = self._ws(m, n, k, batch, swizzle, _raster(raster), splits, ctypes.byref(size))
        if rc:
            raise CutlassError(self.name, rc, "workspace query")
        return size.value

    def bind(self, a: torch.Tensor, b: torch.Tensor, out: torch.Tensor, *,
             c: torch.Tensor | None = None, alpha: float = 1.0, beta: float = 0.0,
             scale_a: torch.Tensor | None = None, scale_b: torch.Tensor | None = None,
             swizzle: int = 1, raster: str = "heuristic", splits: int = 1
             ) -> Callable[[], torch.Tensor]:
        """Check everything once and return a no-argument callable that launches the kernel
        (what a benchmark times: no per-call checks, workspace allocated once).

        ``scale_a``/``scale_b`` (fp32 scalars on the device) give ``torch._scaled_mm``
        semantics: ``out = (scale_a * a) @ (scale_b * b)``, i.e. alpha = scale_a * scale_b,
        computed on the device (no host sync)."""
        m, n, k, batch = self._check(a, b, out, c)
        if beta != 0.0 and (c is None or not self.has_c):
            raise ValueError("beta != 0 needs a C tensor and an op with a C source")
        alpha_t = None
        if scale_a is not None or scale_b is not None:
            if scale_a is None or scale_b is None:
                raise ValueError("pass both scale_a and scale_b, or neither")
            for s in (scale_a, scale_b):
                if s.numel() != 1 or s.dtype != torch.float32 or s.device != a.device:
                    raise ValueError("scales must be fp32 scalars (per-tensor) on a's device")
            alpha_t = (scale_a.reshape(()) * scale_b.reshape(())) * alpha
        r = _raster(raster)
        with torch.cuda.device(a.device):
            ws_bytes = self.workspace_size(m, n, k, batch, swizzle=swizzle, raster=raster,
                                           splits=splits)
        ws = torch.empty(max(ws_bytes, 1), dtype=torch.uint8, device=a.device)
        pa, pb, pd = a.data_ptr(), b.data_ptr(), out.data_ptr()
        pc = c.data_ptr() if c is not None else None
        palpha = alpha_t.data_ptr() if alpha_t is not None else None
        pws = ws.data_ptr() if ws_bytes else None
        run, name, device = self._run, self.name, a.device

        def call() -> torch.Tensor:
            # keep the workspace and alpha tensors alive as long as the callable
            _ = (ws, alpha_t)
            stream = torch.cuda.current_stream(device).cuda_stream
            rc = run(pa, pb, pc, pd, m, n, k, batch, alpha, beta, palpha, swizzle, r, splits,
                     pws, ws_bytes, stream)
            if rc:
                raise CutlassError(name, rc, "launch")
            return out

        return call

    def __call__(self, a: torch.Tensor, b: torch.Tensor, out: torch.Tensor, **knobs: Any
                 ) -> torch.Tensor:
        """``out = a @ b`` (see ``bind`` for the keyword arguments)."""
        with torch.cuda.device(a.device):
            return self.bind(a, b, out, **knobs)()


def _raster(raster: str) -> int:
    try:
        return RASTER[raster]
    except KeyError:
        raise ValueError(f"raster must be one of {sorted(RASTER)}, got {raster!r}") from None


def _check_layout(name: str, t: torch.Tensor, layout: str, rows: int, cols: int) -> None:
    """``t`` must be packed ``[.., rows, cols]`` in ``layout`` (row: the last index contiguous)."""
    want = (cols, 1) if layout == "row" else (1, rows)
    if tuple(t.stride()[-2:]) != want or (t.dim() == 3 and t.shape[0] > 1
                                          and t.stride(0) != rows * cols):
        raise ValueError(f"{name} must be packed {layout}-major [{rows}, {cols}] (strides "
                         f"{want}), got strides {tuple(t.stride())}")
