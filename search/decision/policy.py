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
from dataclasses import dataclass, field, replace
from typing import Any

from search.types import Measurement, Status

__all__ = ["LOWER_PRECISIONS", "MAX_REL_ERROR", "Allowance", "Bounds", "Policy", "bounds_of"]

#: Computation precisions below a problem's input precision that a policy may allow
#: (``Policy.allow``); which problems a kind computes in them is the kind's to say
#: (``ProblemKind.lowering_refusal``). tf32 for fp32 inputs predates this: ``allow_tf32``.
LOWER_PRECISIONS = ("fp8_e4m3",)
#: The most lenient bound a policy may set on a lowered kernel's relative error, and so the
#: tolerance a worker checks a lowered kernel against before the job's own bound is applied
#: (``Policy.judge``): an output whose error is 1 shares nothing with the product (zeros have
#: that error), and one over 0.5 little more.
MAX_REL_ERROR = 0.5


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
    """A field with its :class:`Bounds` (``dataclasses.MISSING``: a required field)."""
    return field(default=default, metadata={"bounds": Bounds(doc, **bounds)})


def bounds_of(f: dataclasses.Field[Any]) -> Bounds:
    """The :class:`Bounds` of one of :class:`Policy`'s fields."""
    return f.metadata["bounds"]


@dataclass(frozen=True)
class Allowance:
    """What a policy allows of one lower precision: the largest relative error
    (``‖out − ref‖_F / ‖ref‖_F`` against the float64 product of the problem's own inputs, on
    fresh random inputs of the kind's stated distribution) a kernel computing in it may have."""

    max_rel_error: float = _field(
        dataclasses.MISSING,
        "the largest relative error (Frobenius norm of the error over that of the float64 "
        "product of the problem's own inputs, on fresh random inputs of the kind's stated "
        "distribution) a kernel computing in this precision may have; over it, the kernel is "
        "wrong_result", gt=0, le=MAX_REL_ERROR)

    def __post_init__(self) -> None:
        value = self.max_rel_error
        if isinstance(value, bool) or not isinstance(value, int | float) \
                or not bounds_of(dataclasses.fields(self)[0]).admits(value):
            raise ValueError(f"max_rel_error={value!r} is out of range (over 0, at most "
                             f"{MAX_REL_ERROR})")

    def to_dict(self) -> dict[str, Any]:
        return {"max_rel_error": self.max_rel_error}


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
    runoff: int = _field(
        3, "custom finalists a verification re-measures: the search's best and the fastest "
           "others within runoff_margin of it, in the same rounds; the fastest there is the "
           "custom pick (1: the best alone)", ge=1, le=8)
    runoff_margin: float = _field(
        0.02, "a custom trial this close to the search's best (relative) joins the runoff",
        ge=0, le=1)
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
    allow: Mapping[str, Allowance] = field(
        default_factory=dict, hash=False, metadata={"bounds": Bounds(
            "computation precisions below the input precision that kernels may use, each with "
            "the largest relative error allowed, e.g. {\"fp8_e4m3\": {\"max_rel_error\": "
            "0.03}}; known: " + ", ".join(LOWER_PRECISIONS) + " (default: none, the input "
            "precision only)")})

    def __post_init__(self) -> None:
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if isinstance(value, bool) or f.name == "allow":
                continue
            if not bounds_of(f).admits(value):
                raise ValueError(f"policy.{f.name}={value!r} is out of range")
        allow: dict[str, Allowance] = {}
        for name, allowance in dict(self.allow).items():
            if name not in LOWER_PRECISIONS:
                raise ValueError(f"policy.allow.{name}: unknown precision {name!r}; one of "
                                 f"{', '.join(LOWER_PRECISIONS)}")
            if isinstance(allowance, Allowance):
                allow[name] = allowance
                continue
            try:
                allow[name] = Allowance(**dict(allowance))
            except TypeError as exc:
                raise ValueError(f"policy.allow.{name}: {exc}") from None
            except ValueError as exc:
                raise ValueError(f"policy.allow.{name}.max_rel_error: {exc}") from None
        object.__setattr__(self, "allow", allow)

    def bound(self, precision: str) -> float | None:
        """The largest relative error allowed a kernel computing in ``precision`` (a lower
        precision), ``None`` when the policy does not allow it."""
        allowance = self.allow.get(precision)
        return allowance.max_rel_error if allowance is not None else None

    def judge(self, m: Measurement, precision: str | None) -> Measurement:
        """``m``, a measurement of a kernel computing in ``precision``, as this policy judges
        it. ``None`` (the input precision) and tf32 (``allow_tf32``) are judged by the
        worker's tolerance alone: ``m`` unchanged. A lowered kernel (``LOWER_PRECISIONS``) was
        checked by the worker against ``MAX_REL_ERROR`` only; timed, it is ``ok`` when its
        error is within this policy's bound and ``wrong_result`` (its time and error kept) when
        over it or not allowed at all. Used on every report and on every stored measurement a
        job reuses, so one measured under another job's bound is judged again here."""
        if precision not in LOWER_PRECISIONS or m.median_us is None or m.rel_error is None \
                or m.status not in (Status.OK, Status.WRONG_RESULT):
            return m
        bound = self.bound(precision)
        if bound is None:
            return replace(m, status=Status.WRONG_RESULT,
                           error=f"computes in {precision}, which the job's policy does not "
                                 "allow (policy.allow)")
        if m.rel_error <= bound:
            return replace(m, status=Status.OK, error=None)
        return replace(m, status=Status.WRONG_RESULT,
                       error=f"rel_error {m.rel_error:.3g} over policy.allow.{precision}."
                             f"max_rel_error {bound:.3g}")

    def to_dict(self) -> dict[str, Any]:
        out = {f: getattr(self, f) for f in self.__dataclass_fields__}
        out["allow"] = {k: v.to_dict() for k, v in self.allow.items()}
        return out

    @classmethod
    def from_dict(cls, data: Mapping[str, Any] | None) -> Policy:
        names = cls.__dataclass_fields__
        return cls(**{k: v for k, v in (data or {}).items() if k in names})
