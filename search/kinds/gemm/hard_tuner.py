"""Tuners of the hard-shape tiers (``search.kinds.gemm.hard_tiers``): each a
:class:`~search.optimizer.SpaceTuner` over its template's space, one Optuna study per tier,
problem and GPU model (``triton-gemm|<tier>|<problem>|<gpu>``, as the tiled tiers')."""

from __future__ import annotations

from search.kinds.gemm import hard_tiers, repair_space, skinny_space, streamk_space
from search.kinds.gemm.spec import GemmProblem
from search.kinds.gemm.triton_tuner import study_name
from search.limits import DeviceLimits
from search.optimizer import SpaceTuner

__all__ = ["hard_tuner"]


def hard_tuner(storage_url: str, problem: GemmProblem, gpu_model: str, limits: DeviceLimits,
               seed: int, tier: str) -> SpaceTuner:
    """The tuner of ``tier`` (one of ``hard_tiers.TIERS``) for ``problem`` on ``gpu_model``."""
    name = study_name(problem, gpu_model, tier)
    if tier == hard_tiers.SKINNY:
        return SpaceTuner(storage_url, name, skinny_space.space(problem, limits.sm_count),
                          seeds=skinny_space.seeds(problem, limits.sm_count), seed=seed,
                          violations=lambda c: skinny_space.violations(problem, c, limits))
    if tier == hard_tiers.STREAM_K:
        return SpaceTuner(storage_url, name, streamk_space.space(problem),
                          seeds=streamk_space.seeds(problem), seed=seed,
                          complete=streamk_space.complete,
                          violations=lambda c: streamk_space.violations(problem, c, limits))
    if tier in (hard_tiers.REPAIR, hard_tiers.REPAIR_STREAM_K):
        inner = "tiles" if tier == hard_tiers.REPAIR else "streamk"
        return SpaceTuner(storage_url, name, repair_space.space(problem, inner),
                          seeds=repair_space.seeds(problem, inner), seed=seed,
                          complete=repair_space.complete(inner),
                          violations=lambda c: repair_space.violations(problem, c, limits))
    raise ValueError(f"unknown tier {tier!r}; one of {hard_tiers.TIERS}")
