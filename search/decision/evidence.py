"""The decision loop's vocabulary: what is known about one job (:class:`Evidence`) and the
words the stages and verdicts are named by. Values only, no logic beyond their own fields."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from search.decision.policy import Policy
from search.roofline import Calibration
from search.types import Problem

__all__ = ["Evidence", "Roles", "Stage", "TierPlan", "Trial", "Verdict", "Verification"]

@dataclass(frozen=True)
class Roles:
    """Which backends and which tier play which part in a decision, as the problem's kind
    declares them (``search.kinds``), so the decision loop names no backend of its own.

    ``baseline``: the library kernel every speed-up is also stated against, and that another
    library pick is confirmed against. ``library_tier``: the tier of a search on the library
    side (its trials count as library), searching the ranked configurations of ``searched``.
    The names are how the rationale writes them; ``labels``, how it writes a backend on the
    job's device where the backend's name would mislead (GEMM's ``cublas`` on the CPU runs
    torch's CPU matmul)."""

    baseline: str
    library_tier: str | None = None
    searched: str | None = None
    baseline_name: str = ""
    searched_name: str = ""
    labels: Mapping[str, str] = field(default_factory=dict, hash=False)

    def label(self, backend: str) -> str:
        """How the rationale writes ``backend`` on the job's device."""
        return self.labels.get(backend, backend)

    @property
    def baseline_label(self) -> str:
        return self.labels.get(self.baseline) or self.baseline_name or self.baseline

    @property
    def searched_label(self) -> str:
        return self.searched_name or str(self.searched)


class Verdict(StrEnum):
    """How a job ended: verdict 1 (the library is sufficient), or after a custom search."""

    LIBRARY_SUFFICIENT = "library_sufficient"
    CUSTOM_WINS = "custom_wins"
    LIBRARY_WINS_AFTER_SEARCH = "library_wins_after_search"


class Stage(StrEnum):
    """Where a job stands (the stage of the :class:`~search.decision.Plan` that says so)."""

    LIBRARY = "library"
    CUTLASS = "cutlass"  # the library search (its name is historic: the API reports it)
    CUSTOM = "custom"
    VERIFY = "verify"
    DECIDED = "decided"


@dataclass(frozen=True)
class TierPlan:
    """A tier of the custom search: its name, its weight in the budget, whether it applies to
    this problem on this device and why (the reason is shown either way)."""

    name: str
    weight: float
    applicable: bool = True
    reason: str = ""
    #: the most this tier is expected to gain over the best of the tiers before it (None: no
    #: bound, e.g. split-K on a skinny shape); a tier that could not close the gap to the
    #: library even with that gain is skipped
    max_gain: float | None = None
    #: the precision below the input's that the tier's kernels compute in (a policy allowed
    #: it: ``Policy.allow``), ``None`` for the input precision; the roofline of a job with
    #: such a tier applicable is the one of that precision's peak
    precision: str | None = None


@dataclass(frozen=True)
class Trial:
    """One library or custom candidate and, once it ran, its result (``status`` None: out)."""

    id: int
    backend: str
    config: Mapping[str, Any] = field(hash=False)
    tier: str | None = None  # None: a library candidate
    status: str | None = None
    median_us: float | None = None
    p20_us: float | None = None
    p80_us: float | None = None
    gpu_s: float = 0.0
    compile_s: float = 0.0  # building its callables (a CUTLASS op not in the cache: nvcc)
    #: ‖out − ref‖ / ‖ref‖ measured on its fresh inputs (None: not measured)
    rel_error: float | None = None
    #: the precision it computes in when below the input's (``ProblemKind.precision_of``)
    precision: str | None = None

    @property
    def done(self) -> bool:
        return self.status is not None

    @property
    def ok(self) -> bool:
        return self.status == "ok" and self.median_us is not None


@dataclass(frozen=True)
class Verification:
    """Interleaved re-measurement: per-round medians of each contender (and of cuBLAS, the
    ``reference``, when the library's pick is another library kernel). ``custom_id`` None: a
    library confirmation (the library's pick against cuBLAS only, see :class:`Verify`)."""

    library_id: int
    custom_id: int | None
    status: str | None = None  # None: outstanding
    library_us: tuple[float, ...] = ()
    custom_us: tuple[float, ...] = ()
    gpu_s: float = 0.0
    error: str | None = None
    reference_id: int | None = None
    reference_us: tuple[float, ...] = ()
    #: the custom contender's error on the verification's own fresh inputs
    custom_rel_error: float | None = None
    #: the runoff's other finalists that ran: (trial id, per-round medians, error)
    runners_up: tuple[tuple[int, tuple[float, ...], float | None], ...] = ()
    #: finalists left out of the rounds: (trial id or None, reason)
    runners_up_dropped: tuple[tuple[int | None, str], ...] = ()


@dataclass(frozen=True)
class Evidence:
    """Everything known about one job's decision (built by the service from the database)."""

    problem: Problem
    policy: Policy
    calibration: Calibration | None
    calibration_failed: bool = False
    calibration_pending: bool = False
    library_configs: tuple[tuple[str, Mapping[str, Any]], ...] = ()
    #: why a library backend the job allows contributed no candidate (shown in the rationale)
    library_notes: tuple[str, ...] = ()
    custom_allowed: bool = True
    tiers: tuple[TierPlan, ...] = ()
    trials: tuple[Trial, ...] = ()
    exhausted_tiers: frozenset[str] = frozenset()
    verification: Verification | None = None
    max_trials: int | None = None
    time_up: bool = False
    calibration_gpu_s: float = 0.0

    #: which backends and tier play which part (the problem's kind says)
    roles: Roles | None = None

    @property
    def r(self) -> Roles:
        if self.roles is None:
            raise ValueError("Evidence.roles is required (the problem kind's Roles)")
        return self.roles

    @property
    def library(self) -> list[Trial]:
        """The first stage's candidates and the library search's."""
        return [t for t in self.trials if t.tier in (None, self.r.library_tier)]

    @property
    def custom(self) -> list[Trial]:
        return [t for t in self.trials if t.tier not in (None, self.r.library_tier)]
