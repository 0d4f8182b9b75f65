"""The CUTLASS operations a GPU host can build, as data: what a worker declares to the service.

Enumerating CUTLASS's GEMMs needs ``cutlass_library`` (``kernel_templates.gemm.cutlass``), which
only the GPU hosts install. A worker that offers CUTLASS describes every operation it can build
(``OpSpec``: the compile-time identity, no ``cutlass_library`` object) and sends the list when it
registers; the service stores it per GPU model and filters, ranks and searches over it
(``filter_ops`` here, ``cutlass_space`` and ``cutlass_tuner`` beside it) without importing
CUTLASS. ``kernel_templates.gemm.cutlass.ops_for`` applies the same ``filter_ops``, so a
worker and the service agree on which operations serve a problem.

On the wire a catalogue is grouped by family (input and output dtypes, layouts), each operation a
row of its remaining fields: about 2,400 SM90 operations in a few hundred KB of JSON
(``Catalogue.encode``).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar

from search.kinds.gemm.spec import GemmProblem

__all__ = ["ARCH", "SERVED_INPUTS", "Catalogue", "FilterOp", "OpSpec", "filter_ops"]

ARCH = 90
#: Input dtypes CUTLASS serves here. fp32 inputs would run as tf32 on tensor cores, and this
#: service serves fp32 in full fp32 (docs/architecture.md, "What is served").
SERVED_INPUTS = ("bf16", "fp16", "fp8_e4m3")

#: The fields shared by every operation of a family, and those of one row, in wire order.
_FAMILY = ("dtype_a", "dtype_b", "dtype_d", "layout_a", "layout_b", "arch")
_ROW = ("name", "tile", "cluster", "kernel_schedule", "epilogue_schedule", "tile_scheduler",
        "dtype_c", "alignment_a", "alignment_b", "alignment_c", "alignment_d")


class FilterOp(Protocol):
    """What ``filter_ops`` reads of an operation (``OpSpec`` and ``CutlassOp`` have it)."""

    dtype_a: str
    dtype_b: str
    dtype_c: str | None
    dtype_d: str
    layout_a: str
    layout_b: str
    alignment_a: int
    alignment_b: int
    alignment_c: int
    alignment_d: int


T = TypeVar("T", bound=FilterOp)


@dataclass(frozen=True)
class OpSpec:
    """One CUTLASS operation as data: everything fixed at compile time (see
    ``kernel_templates.gemm.cutlass.CutlassOp``, which adds the ``cutlass_library`` object)."""

    name: str
    tile: tuple[int, int, int]
    cluster: tuple[int, int, int]
    kernel_schedule: str
    epilogue_schedule: str
    tile_scheduler: str  # "default" or "stream_k"
    dtype_a: str
    dtype_b: str
    dtype_c: str | None
    dtype_d: str
    layout_a: str
    layout_b: str
    alignment_a: int
    alignment_b: int
    alignment_c: int
    alignment_d: int
    arch: int = ARCH

    @classmethod
    def of(cls, op: Any) -> OpSpec:
        """The spec of any object with these attributes (a ``CutlassOp``)."""
        return cls(**{f: getattr(op, f) for f in _FAMILY + _ROW})


@dataclass(frozen=True)
class Catalogue:
    """The operations one GPU host can build, and the toolchain that enumerated them
    (``source``, e.g. ``cutlass_library 4.2.0.0 sm90 level 0``); ``built``: the names of
    those its artifact cache already holds for its nvcc (``python -m scripts.bench
    cutlass-cache`` fills it ahead of a session), which cost no compile time to measure."""

    ops: tuple[OpSpec, ...]
    source: str = ""
    built: tuple[str, ...] = ()

    @property
    def digest(self) -> str:
        """Identifies the declaration (a CUTLASS upgrade changes it, and so does a newly
        built operation)."""
        text = json.dumps(self.encode(), sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(text.encode()).hexdigest()[:16]

    def encode(self) -> dict[str, Any]:
        """The compact JSON form (see the module docstring)."""
        families: dict[tuple[Any, ...], list[list[Any]]] = {}
        for op in self.ops:
            row = [getattr(op, f) for f in _ROW]
            row[1], row[2] = list(op.tile), list(op.cluster)
            families.setdefault(tuple(getattr(op, f) for f in _FAMILY), []).append(row)
        out = {"source": self.source, "family_fields": list(_FAMILY), "op_fields": list(_ROW),
               "families": [{"family": list(k), "ops": rows} for k, rows in families.items()]}
        if self.built:
            out["built"] = sorted(self.built)
        return out

    @classmethod
    def decode(cls, data: dict[str, Any]) -> Catalogue:
        """The inverse of ``encode``; ``ValueError`` naming what is malformed."""
        try:
            if (list(data["family_fields"]) != list(_FAMILY)
                    or list(data["op_fields"]) != list(_ROW)):
                raise ValueError(f"catalogue fields must be {list(_FAMILY)} and {list(_ROW)}")
            ops = []
            for fam in data["families"]:
                shared = dict(zip(_FAMILY, fam["family"], strict=True))
                for row in fam["ops"]:
                    values = dict(zip(_ROW, row, strict=True))
                    values["tile"] = tuple(int(x) for x in values["tile"])
                    values["cluster"] = tuple(int(x) for x in values["cluster"])
                    if len(values["tile"]) != 3 or len(values["cluster"]) != 3:
                        raise ValueError(f"{values['name']}: tile and cluster have 3 extents")
                    ops.append(OpSpec(**shared, **values))
            built = data.get("built", [])
            if not isinstance(built, list) or not all(isinstance(b, str) for b in built):
                raise ValueError("catalogue built must be a list of operation names")
            return cls(tuple(ops), str(data.get("source", "")), tuple(built))
        except (KeyError, TypeError) as exc:
            raise ValueError(f"malformed CUTLASS catalogue: {exc!r}") from exc


def _contiguous_extents(problem: GemmProblem) -> tuple[int, int, int]:
    """Length of the contiguous dimension of A, B and D (what each alignment must divide)."""
    a = problem.k if problem.layout_a == "row" else problem.m
    b = problem.n if problem.layout_b == "row" else problem.k
    return a, b, problem.n


def _aligned(op: FilterOp, problem: GemmProblem) -> bool:
    a, b, d = _contiguous_extents(problem)
    return (a % op.alignment_a == 0 and b % op.alignment_b == 0 and d % op.alignment_d == 0
            and (op.dtype_c is None or d % op.alignment_c == 0))


def filter_ops(problem: GemmProblem, ops: Iterable[T]) -> tuple[list[T], str | None]:
    """The operations that serve ``problem`` (dtype, layouts, alignment) and, when none does,
    the reason (the first filter that left nothing)."""
    if problem.dtype not in SERVED_INPUTS:
        why = ("CUTLASS SM90 tensor cores run fp32 inputs as tf32; fp32 is served in full fp32"
               if problem.dtype == "fp32" else f"dtype {problem.dtype} has no CUTLASS kernels")
        return [], why
    kept: Sequence[T] = [o for o in ops if o.dtype_a == problem.dtype
                         and o.dtype_b == problem.dtype]
    if not kept:
        return [], f"no SM{ARCH} CUTLASS kernels for {problem.dtype} inputs"
    kept = [o for o in kept if o.dtype_d == problem.out_dtype]
    if not kept:
        return [], f"no SM{ARCH} CUTLASS kernels for {problem.dtype} -> {problem.out_dtype}"
    kept = [o for o in kept if (o.layout_a, o.layout_b) == (problem.layout_a, problem.layout_b)]
    if not kept:
        hint = (" (fp8 WGMMA reads both operands K-major: A row-major, B column-major)"
                if problem.dtype == "fp8_e4m3" else "")
        return [], (f"no SM{ARCH} CUTLASS {problem.dtype} kernels for A {problem.layout_a}-major,"
                    f" B {problem.layout_b}-major{hint}")
    fitting = [o for o in kept if _aligned(o, problem)]
    if not fitting:
        a, b, d = _contiguous_extents(problem)
        best = min(kept, key=lambda o: (o.alignment_a, o.alignment_b, o.alignment_d))
        return [], (f"alignment: the contiguous extents (A {a}, B {b}, D {d} elements) are not "
                    f"multiples of the smallest CUTLASS alignments (A {best.alignment_a}, "
                    f"B {best.alignment_b}, D {best.alignment_d})")
    return fitting, None
