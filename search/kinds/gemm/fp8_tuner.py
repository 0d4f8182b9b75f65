"""The fp8 tier's tuner: a :class:`~search.optimizer.SpaceTuner` over ``fp8_space``."""

from __future__ import annotations

from search.kinds.gemm import fp8_space
from search.kinds.gemm.spec import GemmProblem
from search.limits import DeviceLimits
from search.optimizer import SpaceTuner

__all__ = ["Fp8Tuner", "study_name"]


def study_name(problem: GemmProblem, gpu_model: str) -> str:
    return f"triton-gemm|{fp8_space.TIER}|{problem.key()}|{gpu_model}"


class Fp8Tuner(SpaceTuner):
    """Proposes complete configurations of the Triton fp8 template for one problem on one GPU
    model: an fp8 problem's, or a bf16/fp16 problem's lowered to fp8 (the policy's bound is
    applied to their measurements by the service, so the study serves every bound)."""

    def __init__(self, storage_url: str, problem: GemmProblem, gpu_model: str,
                 limits: DeviceLimits, seed: int = 0) -> None:
        self.problem = problem
        self.limits = limits
        lowered = fp8_space.lowered(problem)
        super().__init__(storage_url, study_name(problem, gpu_model), fp8_space.space(problem),
                         seeds=fp8_space.seeds(problem), seed=seed,
                         complete=lambda c: fp8_space.complete(c, lowered),
                         violations=lambda c: fp8_space.violations(problem, c, limits))
