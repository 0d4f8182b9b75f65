"""GEMM's library stage beyond cuBLAS: which cuBLASLt algorithms and CUTLASS operations a job
measures (and, for CUTLASS, searches).

cuBLASLt ranks several algorithms for a problem and ``torch.matmul`` runs its first; the
library stage also measures the next few (:data:`CUBLASLT_RANKS`), the first few run without a
K split (:data:`CUBLASLT_UNSPLIT`) and the first two with other cluster shapes and a custom
option (:data:`CUBLASLT_REFIT`), as ``cublaslt`` candidates that a worker resolves against its
own cuBLAS (:func:`cublaslt_configs`).

The service never enumerates CUTLASS (that needs ``cutlass_library``, a GPU host's extra): a
worker that offers CUTLASS declares its operation catalogue when it registers
(:mod:`search.kinds.gemm.cutlass_catalogue`), stored per GPU model. For a job bound to a GPU
model the declared catalogue is filtered to the operations that serve the problem
(:func:`cutlass_ops`) and ranked (:func:`search.kinds.gemm.cutlass_space.seeds`:
nvMatmulHeuristics where installed, else an analytic model); the top few, at default knobs,
become library candidates (:func:`cutlass_configs`), and the CUTLASS search runs over the same
operations.

No declared catalogue, or a problem CUTLASS cannot serve, skips CUTLASS with a reason, never an
error. Ranking is not free and the service asks on every lease and report, so answers (and
decoded catalogues) are cached per problem, GPU model, count and catalogue digest.
"""

from __future__ import annotations

import logging
import threading
from collections import OrderedDict
from typing import Any

from search.kinds.base import Declared
from search.kinds.gemm import cutlass_space
from search.kinds.gemm.cutlass_catalogue import Catalogue, OpSpec, filter_ops
from search.kinds.gemm.spec import GemmProblem

__all__ = ["CUBLASLT_RANKS", "CUBLASLT_REFIT", "CUBLASLT_UNSPLIT", "CUTLASS_CATALOGUE",
           "clear_cache", "cublaslt_configs", "cutlass_configs", "cutlass_ops", "decode"]

log = logging.getLogger("kernelsearch.agent")

#: Key of the CUTLASS operation catalogue, as workers declare it (``"<kind>/<backend>"``) and
#: as ``db.catalogues`` stores it
CUTLASS_CATALOGUE = "gemm/cutlass"

#: The heuristic's ranks measured as they are (rank 0 is, to the noise, ``torch.matmul``'s own
#: pick, which the ``cublas`` candidate measures).
CUBLASLT_RANKS = (1, 2, 3, 4, 5)
#: The ranks also measured without a K split (a worker refuses one already unsplit).
CUBLASLT_UNSPLIT = (0, 1, 2)
#: The ranks also measured with a 1x1 or 2x1 thread-block cluster, with their own custom
#: option and with option 1 (a worker refuses a setting the rank already has, or one its
#: algorithm lacks): the heuristic's cluster pick is sometimes far off
#: (docs/benchmarks/cublaslt_space_h100_2026-11-27.md).
CUBLASLT_REFIT = tuple({"rank": r, "cluster": c, **extra} for r in (0, 1)
                       for c in ("1x1", "2x1") for extra in ({}, {"custom": 1}))

_CACHE_SIZE = 256
_Answer = tuple[tuple[dict[str, Any], ...], str | None]
_cache: OrderedDict[tuple[str, str, int, str], _Answer] = OrderedDict()
_decoded: dict[str, Catalogue] = {}
_lock = threading.Lock()


def decode(declared: Declared | None) -> Catalogue | None:
    """The declared CUTLASS catalogue as operations (decoded once per digest)."""
    if declared is None:
        return None
    with _lock:
        hit = _decoded.get(declared.digest)
    if hit is None:
        hit = Catalogue.decode(declared.body)
        with _lock:
            _decoded[declared.digest] = hit
    return hit


def cutlass_ops(problem: GemmProblem, gpu_model: str, catalogue: Catalogue | None
                ) -> tuple[list[OpSpec], str | None]:
    """The declared operations that serve ``problem`` and, when there are none, why (a
    sentence for the decision's rationale)."""
    if catalogue is None:
        return [], (f"CUTLASS skipped: no worker of {gpu_model or 'this GPU model'} declared a "
                    "CUTLASS operation catalogue (the worker needs the cutlass extra).")
    ops, why = filter_ops(problem, catalogue.ops)
    return ops, (f"CUTLASS skipped: {why}." if why else None)


def cutlass_configs(problem: GemmProblem, gpu_model: str | None, n: int,
                    catalogue: Catalogue | None) -> _Answer:
    """The ``n`` best-ranked CUTLASS configs for ``problem`` on ``gpu_model`` (default knobs)
    among the declared ``catalogue`` and, when there are none, why."""
    if n <= 0:
        return (), ("CUTLASS skipped: the service measures no CUTLASS candidates "
                    "(KS_CUTLASS_CANDIDATES=0).")
    key = (problem.key(), gpu_model or "", n, catalogue.digest if catalogue else "")
    with _lock:
        hit = _cache.get(key)
        if hit is not None:
            _cache.move_to_end(key)
            return hit
    answer = _compute(problem, gpu_model or "", n, catalogue)
    with _lock:
        _cache[key] = answer
        while len(_cache) > _CACHE_SIZE:
            _cache.popitem(last=False)
    return answer


def cublaslt_configs(problem: GemmProblem) -> tuple[dict[str, int | str], ...]:
    """The ``cublaslt`` candidates of ``problem``'s library stage; none for the products it
    does not serve (fp8, or an output dtype other than the inputs')."""
    if problem.scaled or problem.out_dtype != problem.dtype:
        return ()
    return (*({"rank": r} for r in CUBLASLT_RANKS),
            *({"rank": r, "split_k": 1} for r in CUBLASLT_UNSPLIT),
            *(dict(c) for c in CUBLASLT_REFIT))


def clear_cache() -> None:
    """Forget every cached answer (tests)."""
    with _lock:
        _cache.clear()
        _decoded.clear()


def _compute(problem: GemmProblem, gpu_model: str, n: int, catalogue: Catalogue | None
             ) -> _Answer:
    ops, why = cutlass_ops(problem, gpu_model, catalogue)
    if why:
        return (), why
    try:
        seeds = cutlass_space.seeds(problem, ops, n,
                                    gpu=cutlass_space.heuristics_gpu(gpu_model))
    except Exception as exc:  # noqa: BLE001 - a broken ranking model must not take the service down
        log.warning("CUTLASS candidates for %s unavailable: %r", problem.key(), exc)
        return (), f"CUTLASS skipped: ranking its kernels failed on the service ({exc})."
    if not seeds:
        return (), (f"CUTLASS skipped: none of its {len(ops)} kernels for this problem has a "
                    "feasible default configuration.")
    return tuple(seeds), None
