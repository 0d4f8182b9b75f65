"""The Triton GEMM tuner: a :class:`~search.optimizer.SpaceTuner` over one tier's space."""

from __future__ import annotations

from search.kinds.gemm import triton_space
from search.kinds.gemm.spec import GemmProblem
from search.kinds.gemm.triton_constraints import violations
from search.limits import DeviceLimits
from search.optimizer import SpaceTuner

__all__ = ["GemmTuner", "study_name"]


def study_name(problem: GemmProblem, gpu_model: str, tier: str | None = None) -> str:
    if tier is None:
        return f"triton-gemm|{problem.key()}|{gpu_model}"
    return f"triton-gemm|{tier}|{problem.key()}|{gpu_model}"



class GemmTuner(SpaceTuner):
    """Proposes complete Triton GEMM configurations (``triton_space.complete``) of ``tier``
    for one problem on one GPU model, within the device's static ``limits``."""

    def __init__(self, storage_url: str, problem: GemmProblem, gpu_model: str,
                 limits: DeviceLimits, seed: int = 0, tier: str | None = None) -> None:
        self.problem = problem
        self.limits = limits
        self.tier = tier
        super().__init__(storage_url, study_name(problem, gpu_model, tier),
                         triton_space.space(problem, tier),
                         seeds=triton_space.seeds(problem, tier), seed=seed,
                         complete=triton_space.complete,
                         violations=lambda config: violations(problem, config, limits))
