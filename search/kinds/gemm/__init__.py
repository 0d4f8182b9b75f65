"""GEMM as a problem kind: ``C = A @ B`` with cuBLAS (its own pick and cuBLASLt's other ranked
algorithms) and CUTLASS as the library, tiled Triton kernels as the custom side.

The package holds everything the search side knows of GEMM: the spec (:mod:`.spec`), the
library stage (cuBLAS, cuBLASLt's ranked algorithms, ranked CUTLASS operations from the
declared catalogue: :mod:`.library`), the Triton tiers and their space
(:mod:`.triton_space`, :mod:`.triton_constraints`,
:mod:`.triton_tuner`), the fp8 tier (:mod:`.fp8_space`, :mod:`.fp8_tuner`: fp8 problems, and
bf16/fp16 ones computed in fp8 where the policy allows), the cluster rule (:mod:`.cluster`), the
CUTLASS search (:mod:`.cutlass_space`, :mod:`.cutlass_tuner`), and the tiers for shapes the
library leaves far from the roofline (:mod:`.hard_tiers`: the alignment repair,
:mod:`.alignment` and :mod:`.repair_space`, with its library side the ``repaired`` backend;
stream-K, :mod:`.streamk_space`; the skinny split-K kernel, :mod:`.skinny_space`; their tuners
:mod:`.hard_tuner`). Its kernels live in ``kernel_templates/gemm``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from search import kinds
from search.kinds.base import Catalogues, LibraryPlan, ProblemKind
from search.kinds.gemm import fp8_space, hard_tiers, library, repair_space, triton_space
from search.kinds.gemm.alignment import describe_unaligned, unaligned
from search.kinds.gemm.cutlass_catalogue import Catalogue
from search.kinds.gemm.spec import Backend, GemmProblem, check_served

if TYPE_CHECKING:
    from search.decision import Policy, TierPlan
    from search.limits import DeviceLimits
    from search.types import Problem

__all__ = ["CUTLASS_TIER", "GEMM", "GemmKind", "GemmProblem", "check_served"]

#: The tier of the CUTLASS search's candidates: library side, its trials count as library.
CUTLASS_TIER = "cutlass"
CUBLAS, CUTLASS, TRITON = Backend.CUBLAS.value, Backend.CUTLASS.value, Backend.TRITON.value
CUBLASLT = Backend.CUBLASLT.value


class GemmKind(ProblemKind):
    """GEMM: ``GemmProblem`` specs, cuBLAS + CUTLASS library, Triton tiers."""

    name = "gemm"
    problem_type = GemmProblem
    library_backends = (CUBLAS, CUBLASLT, CUTLASS, hard_tiers.REPAIRED)
    custom_backends = (TRITON, hard_tiers.TRITON_REPAIR, hard_tiers.TRITON_STREAMK,
                       hard_tiers.TRITON_SKINNY)
    baseline_backend = CUBLAS
    library_tier = CUTLASS_TIER
    baseline_name = "cuBLAS"
    searched_name = "CUTLASS"
    map_axes = ("m", "n")
    cpu_labels = {"cublas": "torch CPU matmul", "triton": "Triton interpreter"}

    def from_key(self, key: str) -> GemmProblem:
        return GemmProblem.from_key(key)

    def parse(self, data: Mapping[str, Any]) -> Problem:
        """As the base's, with B column-major when an fp8 request leaves ``layout_b`` out: the
        one layout fp8 takes (:func:`check_served`), so leaving it out can only mean it."""
        if data.get("layout_b") is None and data.get("dtype") == "fp8_e4m3":
            data = {**data, "layout_b": "col"}
        return super().parse(data)

    def check_served(self, problem: Any, backends: Sequence[str]) -> None:
        check_served(problem)
        super().check_served(problem, backends)

    def lowering_refusal(self, problem: Any, precision: str, backends: Sequence[str]
                         ) -> str | None:
        if precision != fp8_space.LOWERED:
            return f"no GEMM backend computes in {precision}"
        why = fp8_space.lowering_refusal(problem)
        if why is None and TRITON not in backends:
            why = (f"only the {TRITON} backend computes a {problem.dtype} GEMM in {precision} "
                   f"(its fp8 template); the job's backends are {', '.join(backends)}")
        return why

    def precision_of(self, problem: Any, backend: str, config: Mapping[str, Any]
                     ) -> str | None:
        if backend == TRITON:
            named = config.get("PRECISION")
            if named is not None and named != problem.dtype:
                return str(named)
            if problem.dtype == "fp32" and config.get("INPUT_PRECISION") == "tf32":
                return "tf32"
        if backend == CUBLAS and problem.dtype == "fp32" and config.get("allow_tf32"):
            return "tf32"
        return None

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
        if CUBLASLT in backends:
            configs += [(CUBLASLT, dict(c)) for c in library.cublaslt_configs(problem)]
        notes: list[str] = []
        if CUTLASS in backends:
            catalogue = library.decode(catalogues(library.CUTLASS_CATALOGUE))
            ranked, note = library.cutlass_configs(problem, gpu_model, seeds, catalogue)
            configs += [(CUTLASS, dict(c)) for c in ranked]
            if note:
                notes.append(note)
        if (hard_tiers.REPAIRED in backends and problem.dtype in hard_tiers.DTYPES
                and problem.batch == 1 and unaligned(problem)):
            catalogue = (library.decode(catalogues(library.CUTLASS_CATALOGUE))
                         if CUTLASS in backends else None)
            repaired, why = repair_space.library_configs(problem, gpu_model, catalogue,
                                                         cutlass=CUTLASS in backends)
            configs += [(hard_tiers.REPAIRED, c) for c in repaired]
            notes.append(f"The {describe_unaligned(problem)}: the library is measured plain "
                         f"({CUBLAS}, {CUTLASS}) and on aligned copies ({hard_tiers.REPAIRED}: "
                         "one fused copy pass, counted in its time, then cuBLAS or CUTLASS; "
                         "where only A's rows are, A's aligned columns copied and the K tail's "
                         "product written to C in that pass, then cuBLAS adds the rest); "
                         "a pick's backend says which.")
            notes += why
        return LibraryPlan(tuple(configs), tuple(notes))

    def tier_plans(self, problem: Any, device: Mapping[str, Any], policy: Policy
                   ) -> tuple[TierPlan, ...]:
        mode, cc = str(device.get("mode", "")), str(device.get("cc", ""))
        sm_count = int(device.get("sm_count", 0) or 0)
        allowed = {name: a.max_rel_error for name, a in policy.allow.items()}
        base = triton_space.tier_plans(problem, mode=mode, cc=cc, sm_count=sm_count,
                                       allow_tf32=policy.allow_tf32)
        hard = hard_tiers.tier_plans(problem, base, sm_count=sm_count,
                                     memory_bytes=int(device.get("memory_bytes", 0) or 0))
        return (*hard, fp8_space.tier_plan(problem, mode=mode, cc=cc, allowed=allowed))

    def backend_of(self, tier: str) -> str:
        if tier == CUTLASS_TIER:
            return CUTLASS
        return hard_tiers.BACKEND_OF.get(tier, TRITON)

    def tuner(self, storage_url: str, problem: Any, gpu_model: str, limits: DeviceLimits,
              seed: int, tier: str | None, catalogues: Catalogues) -> Any:
        if tier == CUTLASS_TIER:
            from search.kinds.gemm.cutlass_tuner import CutlassTuner

            catalogue = library.decode(catalogues(library.CUTLASS_CATALOGUE))
            ops, _ = library.cutlass_ops(problem, gpu_model, catalogue)
            return CutlassTuner(storage_url, problem, gpu_model, ops, seed=seed)
        if tier in hard_tiers.TIERS:
            from search.kinds.gemm.hard_tuner import hard_tuner

            return hard_tuner(storage_url, problem, gpu_model, limits, seed, tier)
        if tier == fp8_space.TIER:
            from search.kinds.gemm.fp8_tuner import Fp8Tuner

            return Fp8Tuner(storage_url, problem, gpu_model, limits, seed=seed)
        from search.kinds.gemm.triton_tuner import GemmTuner

        return GemmTuner(storage_url, problem, gpu_model, limits, seed=seed, tier=tier)


GEMM = kinds.register(GemmKind())
