"""Library candidates beyond cuBLAS: which CUTLASS operations a job measures in its first stage.

The service enumerates CUTLASS's SM90 GEMMs (``kernel_templates.gemm.cutlass.ops_for``: Python,
no GPU, no nvcc) and ranks them for the job's GPU model (``search.spaces.cutlass_gemm.seeds``:
nvMatmulHeuristics where installed, else an analytic model); the top few, at default knobs,
become library candidates. Workers compile them (nvcc) and measure them like cuBLAS.

The ``cutlass`` extra may be missing on the service host: CUTLASS is then skipped with a
reason, never an error. Enumeration takes seconds, so the answer is cached per problem, GPU
model and count in this process (``evidence`` asks on every lease and report, and the answer
must be the same each time).
"""

from __future__ import annotations

import logging
import threading
from collections import OrderedDict
from typing import Any

from search.types import GemmProblem

__all__ = ["clear_cache", "cutlass_configs"]

log = logging.getLogger("kernelsearch.agent")

_CACHE_SIZE = 256
_cache: OrderedDict[tuple[str, str, int], tuple[tuple[dict[str, Any], ...], str | None]] = (
    OrderedDict())
_lock = threading.Lock()


def cutlass_configs(problem: GemmProblem, gpu_model: str | None, n: int
                    ) -> tuple[tuple[dict[str, Any], ...], str | None]:
    """The ``n`` best-ranked CUTLASS configs for ``problem`` on ``gpu_model`` (default knobs)
    and, when there are none, why (a sentence for the decision's rationale)."""
    if n <= 0:
        return (), ("CUTLASS skipped: the service measures no CUTLASS candidates "
                    "(KS_CUTLASS_CANDIDATES=0).")
    key = (problem.key(), gpu_model or "", n)
    with _lock:
        hit = _cache.get(key)
        if hit is not None:
            _cache.move_to_end(key)
            return hit
    answer = _compute(problem, gpu_model, n)
    with _lock:
        _cache[key] = answer
        while len(_cache) > _CACHE_SIZE:
            _cache.popitem(last=False)
    return answer


def clear_cache() -> None:
    """Forget every cached answer (tests; a service picks up a new CUTLASS on restart)."""
    with _lock:
        _cache.clear()


def _compute(problem: GemmProblem, gpu_model: str | None, n: int
             ) -> tuple[tuple[dict[str, Any], ...], str | None]:
    try:
        from kernel_templates.gemm import cutlass as kc
        from search.spaces import cutlass_gemm

        why = kc.why_unsupported(problem)
        if why:
            return (), f"CUTLASS skipped: {why}."
        ops = kc.ops_for(problem)
        seeds = cutlass_gemm.seeds(problem, ops, n, gpu=cutlass_gemm.heuristics_gpu(gpu_model))
    except Exception as exc:  # noqa: BLE001 - a broken extra must not take the service down
        log.warning("CUTLASS candidates for %s unavailable: %r", problem.key(), exc)
        return (), f"CUTLASS skipped: enumerating its kernels failed on the service ({exc})."
    if not seeds:
        return (), (f"CUTLASS skipped: none of its {len(ops)} kernels for this problem has a "
                    "feasible default configuration.")
    return tuple(seeds), None
