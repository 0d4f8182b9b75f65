"""GEMM as a problem kind: ``C = A @ B`` with cuBLAS and CUTLASS as the library, tiled Triton
kernels as the custom side.

The package holds everything the search side knows of GEMM: the spec (:mod:`.spec`), the
library stage (cuBLAS, ranked CUTLASS operations from the declared catalogue: :mod:`.library`),
the Triton tiers and their space (:mod:`.triton_space`, :mod:`.triton_constraints`,
:mod:`.triton_tuner`) and the CUTLASS search (:mod:`.cutlass_space`, :mod:`.cutlass_tuner`).
Its kernels live in ``kernel_templates/gemm``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from search import kinds
from search.kinds.base import Catalogues, LibraryPlan, ProblemKind
from search.kinds.gemm import library, triton_space
from search.kinds.gemm.cutlass_catalogue import Catalogue
from search.kinds.gemm.spec import Backend, GemmProblem, ProblemError, check_served

if TYPE_CHECKING:
    from search.decision import Policy, TierPlan
    from search.limits import DeviceLimits

__all__ = ["CUTLASS_TIER", "GEMM", "GemmKind", "GemmProblem", "check_served"]

#: The tier of the CUTLASS search's candidates: library side, its trials count as library.
CUTLASS_TIER = "cutlass"
CUBLAS, CUTLASS, TRITON = Backend.CUBLAS.value, Backend.CUTLASS.value, Backend.TRITON.value


class GemmKind(ProblemKind):
    """GEMM: ``GemmProblem`` specs, cuBLAS + CUTLASS library, Triton tiers."""

    name = "gemm"
    problem_type = GemmProblem
    library_backends = (CUBLAS, CUTLASS)
    custom_backends = (TRITON,)
    baseline_backend = CUBLAS
    library_tier = CUTLASS_TIER
    baseline_name = "cuBLAS"
    searched_name = "CUTLASS"

    def from_key(self, key: str) -> GemmProblem:
        return GemmProblem.from_key(key)

    def check_served(self, problem: Any, backends: Sequence[str]) -> None:
        check_served(problem)
        super().check_served(problem, backends)
        if problem.scaled and not set(backends) & set(self.library_backends):
            raise ProblemError("backends", (
                f"{problem.dtype} is served by the library backends only "
                f"({', '.join(self.library_backends)}): there is no fp8 Triton template"))

    def check_catalogue(self, backend: str, body: dict[str, Any]) -> dict[str, Any]:
        if backend == CUTLASS:
            return Catalogue.decode(body).encode()
        return body

    def library_plan(self, problem: Any, policy: Policy, backends: Sequence[str],
                     gpu_model: str, catalogues: Catalogues, seeds: int) -> LibraryPlan:
        configs: list[tuple[str, dict[str, Any]]] = []
        if CUBLAS in backends:
            configs.append((CUBLAS, {}))
            if problem.dtype == "fp32" and policy.allow_tf32:
                configs.append((CUBLAS, {"allow_tf32": True}))
        notes: list[str] = []
        if CUTLASS in backends:
            catalogue = library.decode(catalogues(library.CUTLASS_CATALOGUE))
            ranked, note = library.cutlass_configs(problem, gpu_model, seeds, catalogue)
            configs += [(CUTLASS, dict(c)) for c in ranked]
            if note:
                notes.append(note)
        return LibraryPlan(tuple(configs), tuple(notes))

    def tier_plans(self, problem: Any, device: Mapping[str, Any], policy: Policy
                   ) -> tuple[TierPlan, ...]:
        return triton_space.tier_plans(
            problem, mode=str(device.get("mode", "")), cc=str(device.get("cc", "")),
            sm_count=int(device.get("sm_count", 0) or 0), allow_tf32=policy.allow_tf32)

    def backend_of(self, tier: str) -> str:
        return CUTLASS if tier == CUTLASS_TIER else TRITON

    def tuner(self, storage_url: str, problem: Any, gpu_model: str, limits: DeviceLimits,
              seed: int, tier: str | None, catalogues: Catalogues) -> Any:
        if tier == CUTLASS_TIER:
            from search.kinds.gemm.cutlass_tuner import CutlassTuner

            catalogue = library.decode(catalogues(library.CUTLASS_CATALOGUE))
            ops, _ = library.cutlass_ops(problem, gpu_model, catalogue)
            return CutlassTuner(storage_url, problem, gpu_model, ops, seed=seed)
        from search.kinds.gemm.triton_tuner import GemmTuner

        return GemmTuner(storage_url, problem, gpu_model, limits, seed=seed, tier=tier)


GEMM = kinds.register(GemmKind())
