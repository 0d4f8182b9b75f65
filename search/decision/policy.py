"""The job's policy: how the decision loop spends GPU time.

Each field carries its range and its meaning (:class:`Bounds`, in the field's metadata). The
dataclass checks them, and the HTTP schema (``service.schemas.PolicyIn``) is derived from
them, so a field, default or range is written once. The measurements behind the defaults are in
``docs/benchmarks/agent_h100_2026-11-22.md`` (runs 5-8: ``tune_library``, the CUTLASS budget)
and ``docs/benchmarks/agent_h100_2026-11-24.md`` (run 9: ``confirm_library``).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

__all__ = ["Bounds", "Policy", "bounds_of"]


@dataclass(frozen=True)
class Bounds:
    """A policy field's range (``None``: unbounded on that side) and what the field means."""

    doc: str
    ge: float | None = None
    gt: float | None = None
    le: float | None = None
    lt: float | None = None

    def admits(self, value: float) -> bool:
        """Whether ``value`` lies in the range (NaN never does, infinity only when unbounded)."""
        if isinstance(value, float) and math.isnan(value):
            return False
        return ((self.ge is None or value >= self.ge) and (self.gt is None or value > self.gt)
                and (self.le is None or value <= self.le)
                and (self.lt is None or value < self.lt))


def _field(default: Any, doc: str, **bounds: float) -> Any:
    return field(default=default, metadata={"bounds": Bounds(doc, **bounds)})


def bounds_of(f: dataclasses.Field[Any]) -> Bounds:
    """The :class:`Bounds` of one of :class:`Policy`'s fields."""
    return f.metadata["bounds"]


@dataclass(frozen=True)
class Policy:
    """How the decision loop spends GPU time; every field is optional in a job.

    ``full_search`` disables every early stop (the baseline the loop is benchmarked against);
    ``force_custom`` skips verdict 1. The stage timings of two kernels are taken minutes apart
    on a GPU whose clock follows its temperature, hence ``confirm_library``: why each default
    is what it is, measured, is in the benchmark reports the module docstring names."""

    threshold: float = _field(
        0.9, "library efficiency (attainable / measured) at or above which the library is "
             "sufficient", gt=0, le=1)
    force_custom: bool = _field(
        False, "search custom kernels even when the library is sufficient")
    full_search: bool = _field(
        False, "spend the whole budget: no early stops (the agent's baseline)")
    allow_tf32: bool = _field(False, "fp32 inputs may be multiplied in tf32")
    patience: int = _field(
        8, "a search (a custom tier, the CUTLASS search) stalls after this many trials without "
           "a gain over min_gain", ge=1, le=10_000)
    min_gain: float = _field(
        0.01, "the smallest relative improvement that resets the stall count", ge=0, lt=1)
    probe: int = _field(
        6, "trials a custom tier runs before it is judged against promise_gap", ge=1,
        le=10_000)
    promise_gap: float = _field(
        0.10, "a custom tier whose best is further than this behind the library after probe "
              "trials stops", ge=0, le=100)
    verify_rounds: int = _field(
        5, "interleaved rounds of a verification or a library confirmation", ge=5, le=100)
    verify_margin: float = _field(
        0.03, "re-measure a custom best only when within this of the library", ge=0, le=10)
    cutlass_trials: int = _field(
        12, "trials of the CUTLASS search (0: none)", ge=0, le=10_000)
    cutlass_compile_s: float = _field(
        900.0, "compile-seconds the CUTLASS search may spend building new operations (knob "
               "variants of built ones are free)", ge=0, le=1e6)
    first_cutlass_seeds: int = _field(
        1, "without tune_library: CUTLASS seeds measured with cuBLAS before verdict 1 (the "
           "best-ranked); the other seeds only when these fall short of the threshold",
        ge=0, le=1000)
    tune_library: bool = _field(
        True, "the library stage is cuBLAS, every CUTLASS seed and the CUTLASS search, and "
              "verdict 1 is asked once that search ends (false: after the first wave, and a "
              "sufficient library ends the job unsearched)")
    confirm_library: bool = _field(
        True, "a decision that keeps the library re-measures its pick (when not cuBLAS, or "
              "within verify_margin of it) and cuBLAS interleaved, and the faster is the pick")

    def __post_init__(self) -> None:
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if isinstance(value, bool):
                continue
            if not bounds_of(f).admits(value):
                raise ValueError(f"policy.{f.name}={value!r} is out of range")

    def to_dict(self) -> dict[str, Any]:
        return {f: getattr(self, f) for f in self.__dataclass_fields__}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any] | None) -> Policy:
        names = cls.__dataclass_fields__
        return cls(**{k: v for k, v in (data or {}).items() if k in names})
