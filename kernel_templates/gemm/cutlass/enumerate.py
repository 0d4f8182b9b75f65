"""SM90 GEMM operations from ``cutlass_library``, filtered to what a problem can use.

The operations come from the CUTLASS library generator (``cutlass_library.generator``) the way
PyTorch Inductor's CUTLASS backend gets them: a manifest for one architecture and CUDA version,
``GenerateSM90`` fills it, and the GEMM operations are read back. Nothing here needs a GPU or
nvcc; ``cutlass_library`` is pure Python. The generator is slow (about 2 s), so the raw list is
computed once per (arch, CUDA version, instantiation level) and process.

Layouts, in CUTLASS's terms for ``D[m, n] = A[m, k] @ B[k, n]`` (all three as matrices of those
shapes; ``RowMajor`` means the last index is contiguous):

==================  =====================  ================================================
our problem         CUTLASS layout tag     contiguous dimension (what alignment applies to)
==================  =====================  ================================================
``layout_a="row"``  A ``RowMajor`` ("t")   k  (A is K-major)
``layout_a="col"``  A ``ColumnMajor`` ("n")  m
``layout_b="row"``  B ``RowMajor`` ("t")   n  (B[k, n] row-major is N-major)
``layout_b="col"``  B ``ColumnMajor`` ("n")  k  (B stored as its transpose [n, k]: K-major)
output (always)     D ``RowMajor``         n
==================  =====================  ================================================

So the common ``torch`` case ``a @ b`` with both operands row-major is CUTLASS "tt", and the
cuBLAS-style "TN" GEMM (the one fp8 WGMMA requires: both operands K-major) is ``layout_b="col"``.
The generator emits every operation with a column-major D (the trailing ``n`` in names such as
``..._tnn_align8``); we want a row-major output like ``torch.matmul``'s, so each operation is
re-described with C and D row-major (its name then ends ``tnt``/``ttt``; the CUTLASS 3 epilogues
take either layout).
"""

from __future__ import annotations

import copy
import functools
import types
from dataclasses import dataclass, field
from typing import Any

from search.kinds.gemm.cutlass_catalogue import SERVED_INPUTS, Catalogue, OpSpec, filter_ops
from search.kinds.gemm.spec import GemmProblem

__all__ = ["ARCH", "CUDA_VERSION", "SERVED_INPUTS", "CutlassOp", "catalogue", "cutlass_available",
           "op_by_name", "ops_for", "raw_operations", "why_unsupported"]

ARCH = 90
CUDA_VERSION = "13.0.0"
#: Inductor's default: the pruned set (bf16 TN: tiles 64x256 .. 256x256, clusters 1x1/1x2/2x1).
INSTANTIATION_LEVEL = "0"

#: Problem dtype -> cutlass_library ``DataType`` member name.
_CUTLASS_DTYPE = {"bf16": "bf16", "fp16": "f16", "fp32": "f32", "fp8_e4m3": "e4m3"}
_PROBLEM_DTYPE = {v: k for k, v in _CUTLASS_DTYPE.items()}


def cutlass_available() -> str | None:
    """``None`` when ``cutlass_library`` imports, else why not (the ``cutlass`` extra)."""
    try:
        import cutlass_library  # noqa: F401
    except ImportError as exc:
        return f"cutlass_library is not installed ({exc}); pip install 'kernelsearch[cutlass]'"
    return None


@dataclass(frozen=True)
class CutlassOp(OpSpec):
    """One compiled-kernel identity: everything fixed at compile time.

    ``name`` is the CUTLASS procedural name (stable across runs of the generator for one CUTLASS
    version; unique in the enumeration; also a valid C identifier, used for the launcher symbols).
    Schedules are the ``cutlass_library`` enum member names (``TmaWarpSpecializedCooperative``,
    ``ScheduleAuto`` ...). Dtypes are this project's names (``bf16``, ``fp8_e4m3``), ``dtype_c`` is
    ``None`` for a kernel with no C source (beta must be 0). Layouts are in *problem* terms
    (``row``/``col``, see the module docstring). Alignments are in elements. ``operation`` is the
    ``cutlass_library`` object the renderer needs; it is never serialised or compared.
    """

    operation: Any = field(default=None, compare=False, hash=False, repr=False)

    @property
    def persistent(self) -> bool:
        """Persistent kernels walk tiles with the SM90 tile scheduler, so the raster order and
        swizzle knobs mean something; the non-persistent ones launch one CTA per tile and ignore
        them. ``ScheduleAuto`` resolves to a persistent TMA schedule when the operands are
        16-byte aligned (the CUTLASS SM90 collective builder), which is every Auto op here."""
        s = self.kernel_schedule
        return "Cooperative" in s or "Pingpong" in s or s == "ScheduleAuto"

    @property
    def stream_k(self) -> bool:
        return self.tile_scheduler == "stream_k"

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "tile": list(self.tile), "cluster": list(self.cluster),
                "kernel_schedule": self.kernel_schedule,
                "epilogue_schedule": self.epilogue_schedule,
                "tile_scheduler": self.tile_scheduler, "dtype_a": self.dtype_a,
                "dtype_b": self.dtype_b, "dtype_c": self.dtype_c, "dtype_d": self.dtype_d,
                "layout_a": self.layout_a, "layout_b": self.layout_b,
                "alignment_a": self.alignment_a, "alignment_b": self.alignment_b,
                "alignment_c": self.alignment_c, "alignment_d": self.alignment_d,
                "arch": self.arch}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> CutlassOp:
        data = dict(data)
        data["tile"] = tuple(data["tile"])
        data["cluster"] = tuple(data["cluster"])
        return cls(**data)


# -- the generator ------------------------------------------------------------------------------
def _manifest_args(arch: int, cuda_version: str, level: str) -> types.SimpleNamespace:
    """What ``cutlass_library.manifest.Manifest`` reads from its command line (the generator's
    argparse namespace), for every kind of operation of one architecture."""
    return types.SimpleNamespace(
        operations="all", build_dir="", curr_build_dir="", generator_target="",
        architectures=f"{arch}a", kernels="all", ignore_kernels="", exclude_kernels="",
        cuda_version=cuda_version, kernel_filter_file=None, selected_kernel_list=None,
        interface_dir=None, filter_by_cc="True", disable_full_archs_compilation=False,
        instantiation_level=level, disable_cutlass_package_imports=False)


@functools.lru_cache(maxsize=4)
def raw_operations(arch: int = ARCH, cuda_version: str = CUDA_VERSION,
                   level: str = INSTANTIATION_LEVEL) -> tuple[Any, ...]:
    """Every plain (not grouped, sparse, blockwise or mixed-input) CUTLASS 3.x GEMM operation the
    generator emits for ``arch``, as ``cutlass_library`` objects with their original layouts."""
    if arch != ARCH:
        raise ValueError(f"only SM{ARCH} is enumerated, not SM{arch}")
    import logging

    from cutlass_library import generator, library, manifest

    # The generator logs every skipped configuration at INFO; keep the caller's log quiet.
    logging.getLogger("cutlass_library").setLevel(logging.WARNING)
    m = manifest.Manifest(_manifest_args(arch, cuda_version, level))
    generator.GenerateSM90(m, cuda_version)
    out = []
    for by_cc in m.operations.get(library.OperationKind.Gemm, {}).values():
        for ops in by_cc.values():
            for op in ops:
                if (op.gemm_kind == library.GemmKind.Universal3x
                        and getattr(op, "mixed_input_mode", None) is None
                        and op.A.element == op.B.element):
                    out.append(op)
    return tuple(out)


def _row_major_output(op: Any) -> Any:
    """A copy of ``op`` whose C and D are row-major (see the module docstring)."""
    from cutlass_library import library

    new = copy.copy(op)
    new.C = copy.copy(op.C)
    new.D = copy.copy(op.D)
    new.C.layout = library.LayoutType.RowMajor
    new.D.layout = library.LayoutType.RowMajor
    new.__dict__.pop("_procedural_name", None)  # a cached_property: the name changes with C
    return new


def _describe(op: Any) -> CutlassOp:
    from cutlass_library import library

    def dtype(element: Any) -> str | None:
        if element == library.DataType.void:
            return None
        return _PROBLEM_DTYPE.get(element.name, element.name)

    def layout(tag: Any) -> str:
        return "row" if tag == library.LayoutType.RowMajor else "col"

    td = op.tile_description
    sched = "stream_k" if op.tile_scheduler == library.TileSchedulerType.StreamK else "default"
    epi_tma = library.is_tma_epilogue(op.epilogue_schedule)

    def out_align(desc: Any) -> int:
        # The emitter widens C/D alignment to the TMA's 16 bytes for TMA epilogues.
        if epi_tma and desc.element != library.DataType.void:
            return library.get_tma_alignment(desc.element)
        return desc.alignment

    return CutlassOp(
        name=op.procedural_name(), tile=tuple(int(x) for x in td.tile_shape),
        cluster=tuple(int(x) for x in td.cluster_shape),
        kernel_schedule=op.kernel_schedule.name, epilogue_schedule=op.epilogue_schedule.name,
        tile_scheduler=sched, dtype_a=dtype(op.A.element), dtype_b=dtype(op.B.element),
        dtype_c=dtype(op.C.element), dtype_d=dtype(op.D.element), layout_a=layout(op.A.layout),
        layout_b=layout(op.B.layout), alignment_a=op.A.alignment, alignment_b=op.B.alignment,
        alignment_c=out_align(op.C), alignment_d=out_align(op.D), arch=op.arch, operation=op)


@functools.lru_cache(maxsize=4)
def _all_ops(arch: int, cuda_version: str, level: str) -> tuple[CutlassOp, ...]:
    """Every f32-accumulating operation with served dtypes, re-described with a row-major D."""
    from cutlass_library import library

    out = []
    for op in raw_operations(arch, cuda_version, level):
        if op.tile_description.math_instruction.element_accumulator != library.DataType.f32:
            continue
        if op.A.element.name not in _PROBLEM_DTYPE or op.D.element.name not in _PROBLEM_DTYPE:
            continue
        out.append(_describe(_row_major_output(op)))
    names = [o.name for o in out]
    if len(set(names)) != len(names):  # the cache and the launcher symbols rely on it
        raise RuntimeError("cutlass_library produced duplicate operation names")
    return tuple(out)


def op_by_name(name: str, arch: int = ARCH, cuda_version: str = CUDA_VERSION,
               level: str = INSTANTIATION_LEVEL) -> CutlassOp:
    """The operation called ``name`` (``KeyError`` when this CUTLASS version has none)."""
    table = _by_name(arch, cuda_version, level)
    return table[name]


@functools.lru_cache(maxsize=4)
def _by_name(arch: int, cuda_version: str, level: str) -> dict[str, CutlassOp]:
    return {o.name: o for o in _all_ops(arch, cuda_version, level)}


# -- filtering ------------------------------------------------------------------------------------
def why_unsupported(problem: GemmProblem, arch: int = ARCH) -> str | None:
    """Why CUTLASS cannot serve ``problem`` on ``arch`` (``None``: it can). Never raises for a
    valid problem: an unserved problem is an answer, not an error."""
    missing = cutlass_available()
    if missing:
        return missing
    if arch != ARCH:
        return f"CUTLASS kernels are enumerated for SM{ARCH} only, not SM{arch}"
    return filter_ops(problem, _all_ops(arch, CUDA_VERSION, INSTANTIATION_LEVEL))[1]


def ops_for(problem: GemmProblem, arch: int = ARCH, level: str = INSTANTIATION_LEVEL
            ) -> list[CutlassOp]:
    """The operations that can run ``problem`` (dtype, layouts and alignment checked), in the
    generator's order; empty when ``why_unsupported`` has a reason."""
    if cutlass_available() or arch != ARCH:
        return []
    return filter_ops(problem, _all_ops(arch, CUDA_VERSION, level))[0]


def catalogue(level: str = INSTANTIATION_LEVEL) -> Catalogue:
    """Every operation this host can build for the served input dtypes, as data: what a worker
    declares to the service (``search.kinds.gemm.cutlass_catalogue``)."""
    from importlib.metadata import version

    ops = tuple(OpSpec.of(o) for o in _all_ops(ARCH, CUDA_VERSION, level)
                if o.dtype_a in SERVED_INPUTS)
    source = (f"nvidia-cutlass {version('nvidia-cutlass')} sm{ARCH} cuda {CUDA_VERSION} "
              f"level {level}")
    return Catalogue(ops, source)
