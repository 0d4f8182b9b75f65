"""CUTLASS library GEMMs as candidates: enumerate, render, compile (cached), load, run.

The facade::

    from kernel_templates.gemm import cutlass as kc

    ops = kc.ops_for(problem)            # [] when kc.why_unsupported(problem) says why
    result = kc.build(ops[:8])           # parallel nvcc into the artifact cache
    kernel = kc.load(ops[0].name)        # from the cache (needs torch and a GPU to run)
    kernel(a, b, out, swizzle=2, raster="along_n")

Importing this package needs neither torch nor ``cutlass_library``: ``enumerate`` imports
``cutlass_library`` inside its functions, and ``load`` imports the torch runtime on first use.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from kernel_templates.gemm.cutlass.compile import (
    Artifact,
    BuildResult,
    CompileError,
    CutlassCache,
    Toolchain,
    cache_key,
    toolchain,
)
from kernel_templates.gemm.cutlass.compile import build as _build
from kernel_templates.gemm.cutlass.enumerate import (
    CutlassOp,
    catalogue,
    cutlass_available,
    op_by_name,
    ops_for,
    why_unsupported,
)

if TYPE_CHECKING:
    from kernel_templates.gemm.cutlass.runtime import CutlassKernel

__all__ = ["Artifact", "BuildResult", "CompileError", "CutlassCache", "CutlassOp", "Toolchain",
           "build", "cache_key", "catalogue", "cutlass_available", "load", "op_by_name", "ops_for",
           "toolchain", "why_unsupported"]


def build(ops: list[CutlassOp], cache: CutlassCache | str | Path | None = None, *,
          jobs: int | None = None, per_file: int = 4, nvcc: str = "nvcc",
          tc: Toolchain | None = None,
          on_done: Callable[[str, Artifact | CompileError], None] | None = None) -> BuildResult:
    """Compile (or find in the cache) every op; see ``compile.build``."""
    if not isinstance(cache, CutlassCache):
        cache = CutlassCache(cache)
    return _build(ops, cache, jobs=jobs, per_file=per_file, nvcc=nvcc, tc=tc, on_done=on_done)


def load(op_name: str, cache: CutlassCache | str | Path | None = None, *,
         artifact: Artifact | None = None, tc: Toolchain | None = None) -> CutlassKernel:
    """The runnable kernel of ``op_name``: from ``artifact`` when given, else the cache entry
    built by this machine's toolchain (``tc``; queried from nvcc when not given). Raises
    ``LookupError`` when the op was never built with this toolchain."""
    from kernel_templates.gemm.cutlass.runtime import CutlassKernel

    if not isinstance(cache, CutlassCache):
        cache = CutlassCache(cache)
    if artifact is None:
        artifact = cache.find(op_name, tc or toolchain())
        if artifact is None:
            raise LookupError(f"{op_name} is not in the CUTLASS cache at {cache.root} for this "
                              "toolchain: build it first")
    if op_name not in artifact.op_meta:
        raise LookupError(f"artifact {artifact.key} does not hold {op_name}")
    return CutlassKernel(artifact.library, artifact.op_meta[op_name])
