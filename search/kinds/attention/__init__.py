"""Attention (forward) as a problem kind: ``softmax(scale * Q K^T + mask) V`` with PyTorch's
SDPA backends and FlexAttention as the library, tuned Triton flash-attention and split-KV
decode kernels as the custom side.

The package holds everything the search side knows of attention: the spec (:mod:`.spec`), the
tiers and their spaces (:mod:`.space`), the static rules (:mod:`.constraints`) and the tuner
(:mod:`.tuner`). Its kernels live in ``kernel_templates/attention``.

The baseline is cuDNN's SDPA, the library kernel to beat on a GPU. Where a job has no cuDNN
result (a CPU worker offers the math backend only; cuDNN refuses fp32) the decision loop has
no baseline trial: the library's pick is not confirmed against one and the decision's
``speedup_vs_cublas`` is null, while the verdicts stand as they are (the library side is the
best of whatever library backends ran).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from search import kinds
from search.kinds.attention import space
from search.kinds.attention.spec import AttentionProblem
from search.kinds.base import Catalogues, LibraryPlan, ProblemKind
from search.types import ProblemError

if TYPE_CHECKING:
    from search.decision import Policy, TierPlan
    from search.limits import DeviceLimits

__all__ = ["ATTENTION", "CUSTOM", "LIBRARY", "AttentionKind", "AttentionProblem"]

#: The library backends in rank order (the order the library stage measures them):
#: ``torch.nn.functional.scaled_dot_product_attention`` pinned to one backend each, then
#: FlexAttention (``torch.compile``d), the peer generated kernel someone else maintains.
LIBRARY = ("sdpa_cudnn", "sdpa_flash", "sdpa_efficient", "sdpa_math", "flex")
#: The custom backends: the Triton flash-attention template, and split-KV decode.
CUSTOM = ("triton", "triton_decode")
_TIER_BACKEND = {space.FLASH: "triton", space.DECODE: "triton_decode"}


class AttentionKind(ProblemKind):
    """Attention: ``AttentionProblem`` specs, SDPA backends + FlexAttention as the library,
    the Triton ``flash`` and ``decode`` tiers as the custom side; no library-side search."""

    name = "attention"
    problem_type = AttentionProblem
    library_backends = LIBRARY
    custom_backends = CUSTOM
    baseline_backend = "sdpa_cudnn"
    library_tier = None
    baseline_name = "cuDNN SDPA"
    map_axes = ("s_q", "s_kv")
    cpu_labels = {"sdpa_math": "torch CPU math SDPA", "triton": "Triton interpreter",
                  "triton_decode": "Triton interpreter (decode)"}

    def from_key(self, key: str) -> AttentionProblem:
        return AttentionProblem.from_key(key)

    def check_served(self, problem: Any, backends: Sequence[str]) -> None:
        super().check_served(problem, backends)
        usable = set(backends) & {*self.library_backends, _TIER_BACKEND[space.FLASH]}
        plans = {t.name: t for t in space.tier_plans(problem)}
        if not usable and not plans[space.DECODE].applicable:
            raise ProblemError("backends", f"{_TIER_BACKEND[space.DECODE]} alone cannot "
                                           f"serve it: {plans[space.DECODE].reason}")

    def library_plan(self, problem: Any, policy: Policy, backends: Sequence[str],
                     gpu_model: str, catalogues: Catalogues, seeds: int) -> LibraryPlan:
        # Every allowed backend: one that cannot take the problem on the worker (cuDNN with
        # fp32, say) reports it as a failed candidate with the reason, never as a winner.
        return LibraryPlan(tuple((b, {}) for b in self.library_backends if b in backends))

    def tier_plans(self, problem: Any, device: Mapping[str, Any], policy: Policy
                   ) -> tuple[TierPlan, ...]:
        return space.tier_plans(problem)

    def backend_of(self, tier: str) -> str:
        if tier not in _TIER_BACKEND:
            raise ValueError(f"unknown attention tier {tier!r}; one of {space.TIERS}")
        return _TIER_BACKEND[tier]

    def tuner(self, storage_url: str, problem: Any, gpu_model: str, limits: DeviceLimits,
              seed: int, tier: str | None, catalogues: Catalogues) -> Any:
        from search.kinds.attention.tuner import AttentionTuner

        return AttentionTuner(storage_url, problem, gpu_model, limits, tier or space.FLASH,
                              seed=seed)


ATTENTION = kinds.register(AttentionKind())
