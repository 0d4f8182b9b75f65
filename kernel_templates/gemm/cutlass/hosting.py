"""What a worker host does for CUTLASS besides running kernels: whether it can offer them, the
operation catalogue it declares to the service, and building a batch's operations ahead.

Registered with the GEMM ``cutlass`` backend (``kernel_templates.gemm.backends``) as the
registry's ``available``, ``catalogue`` and ``prepare`` hooks, so the worker names no backend.
The package facade is looked up at call time (``kc.build``, ``kc.toolchain`` …), so tests can
replace it with fakes.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable
from dataclasses import replace
from typing import Any

from kernel_templates.registry import Prepared, Preparer
from search.types import Candidate, Device

__all__ = ["PREPARER", "available", "build_ahead", "catalogue", "cutlass_unavailable", "op_of"]

log = logging.getLogger("kernelsearch.worker")


def cutlass_unavailable(cc: str) -> str | None:
    """Why a GPU of compute capability ``cc`` cannot run CUTLASS candidates (``None``: it
    can): the generated kernels are sm_90a, so the GPU must be compute capability 9.x;
    enumerating needs the ``cutlass`` extra (``cutlass_library``) and building a working nvcc."""
    if not cc.startswith("9."):
        return f"the CUTLASS kernels are sm_90a and this GPU is compute capability {cc or '?'}"
    from kernel_templates.gemm import cutlass as kc

    missing = kc.cutlass_available()
    if missing:
        return missing
    try:
        kc.toolchain()
    except kc.CompileError as exc:
        return str(exc).splitlines()[0]
    return None


def available(device: Device) -> str | None:
    """The ``available`` hook: CUTLASS runs on a CUDA device only (never the interpreter)."""
    if device.mode != "cuda":
        return "the CUTLASS kernels run on a CUDA GPU only, not in the CPU interpreter"
    return cutlass_unavailable(device.cc)


def catalogue(device: Device) -> dict[str, Any] | None:
    """The ``catalogue`` hook: the operations this worker can build
    (``search.kinds.gemm.cutlass_catalogue.Catalogue.encode``), and those of them its artifact
    cache already holds (``built``: the search may measure them with no compile budget); the
    service searches over them and never enumerates CUTLASS itself."""
    from kernel_templates.gemm import cutlass as kc

    found = kc.catalogue()
    try:
        names = {op.name for op in found.ops}
        built = tuple(n for n in kc.CutlassCache().built(kc.toolchain()) if n in names)
    except Exception as exc:  # noqa: BLE001 - no nvcc or an unreadable cache: declare none
        log.warning("CUTLASS: the artifact cache's operations are not declared: %s", exc)
        built = ()
    return replace(found, built=built).encode()


def op_of(candidate: Candidate) -> str | None:
    """The unit a CUTLASS candidate shares its build with: its operation's name."""
    op = candidate.config.get("op")
    return str(op) if op else None


def build_ahead(candidates: Iterable[Candidate], jobs: int | None = None
                ) -> dict[str, Prepared]:
    """Build the CUTLASS ops of ``candidates`` (each unique op once) into the artifact cache
    with parallel nvcc (``kernel_templates.gemm.cutlass.build``), so the benchmark child only
    loads them. Returns op name -> ``Prepared``: the nvcc seconds to charge to its first
    candidate (its share of its file's compile, 0 when found in the cache) or the compile
    error's text. Never raises: an op it cannot look up, or a missing toolchain, is left for
    the child to classify."""
    names = list(dict.fromkeys(name for name in map(op_of, candidates) if name))
    if not names:
        return {}
    try:
        from kernel_templates.gemm import cutlass as kc

        ops = []
        for name in names:
            try:
                ops.append(kc.op_by_name(name))
            except KeyError:
                continue  # not an op of this CUTLASS version: the child says INVALID
        t0 = time.perf_counter()
        result = kc.build(ops, jobs=jobs)
    except Exception as exc:  # noqa: BLE001 - no nvcc, no cutlass_library: the child reports
        log.warning("building CUTLASS ops ahead failed: %s", exc)
        return {}
    out: dict[str, Prepared] = {}
    for name, art in result.artifacts.items():
        out[name] = Prepared(0.0 if art.cached else art.compile_s / max(1, len(art.ops)))
    for name, err in result.errors.items():
        out[name] = Prepared(0.0, str(err))
    log.info("CUTLASS: %d op(s) ready, %d failed, %d compiled in %.1f s", len(result.artifacts),
             len(result.errors), result.compiled, time.perf_counter() - t0)
    return out


#: The ``prepare`` hook of the GEMM ``cutlass`` backend.
PREPARER = Preparer(unit=op_of, build=build_ahead)
