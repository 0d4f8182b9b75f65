"""The Triton attention tuner: a :class:`~search.optimizer.SpaceTuner` over one tier's space."""

from __future__ import annotations

from search.kinds.attention import constraints, space
from search.kinds.attention.spec import AttentionProblem
from search.limits import DeviceLimits
from search.optimizer import SpaceTuner

__all__ = ["AttentionTuner", "study_name"]


def study_name(problem: AttentionProblem, gpu_model: str, tier: str) -> str:
    return f"attention|{tier}|{problem.key()}|{gpu_model}"


class AttentionTuner(SpaceTuner):
    """Proposes configurations of ``tier`` (``space.FLASH`` or ``space.DECODE``) for one
    problem on one GPU model, within the device's static ``limits``."""

    def __init__(self, storage_url: str, problem: AttentionProblem, gpu_model: str,
                 limits: DeviceLimits, tier: str, seed: int = 0) -> None:
        self.problem = problem
        self.limits = limits
        self.tier = tier
        super().__init__(storage_url, study_name(problem, gpu_model, tier),
                         space.space(problem, tier, limits),
                         seeds=space.seeds(problem, tier, limits),
                         seed=seed,
                         violations=lambda c: constraints.violations(problem, c, tier, limits))
