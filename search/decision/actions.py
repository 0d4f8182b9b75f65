"""What :func:`search.decision.plan` asks for: the actions the service carries out, and the
:class:`Decision` (with its :class:`Pick` s) that ends a job."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from search.decision.evidence import Stage, Trial, Verdict
from search.roofline import Roofline

__all__ = ["Action", "Calibrate", "Decide", "Decision", "MeasureLibrary", "Pick", "Plan",
           "Search", "StopTier", "Verify", "Wait"]


@dataclass(frozen=True)
class Calibrate:
    """Measure the device (no usable calibration for this GPU model and toolkit)."""


@dataclass(frozen=True)
class MeasureLibrary:
    """Create library candidates: ``(backend, config)`` pairs not created yet."""

    candidates: tuple[tuple[str, Mapping[str, Any]], ...]


@dataclass(frozen=True)
class Search:
    """Up to ``n`` more trials in ``tier`` (``None``: no trial cap, only the window): a custom
    tier, or ``CUTLASS_TIER`` with the compile-seconds it may still spend."""

    tier: str
    n: int | None
    compile_left_s: float | None = None


@dataclass(frozen=True)
class StopTier:
    """The tier is over: its pending (not yet leased) candidates should be cancelled."""

    tier: str
    reason: str


@dataclass(frozen=True)
class Verify:
    """Re-measure ``library`` and ``custom`` interleaved; ``reference`` (cuBLAS, when the
    library's pick is another library kernel) runs in the same rounds, so the speed-up over
    cuBLAS is measured, not pieced together from timings taken minutes apart.

    ``custom`` None: a library confirmation (``policy.confirm_library``). The decision keeps
    the library without a verdict 2, and its best kernel other than cuBLAS (a CUTLASS op) is
    faster than cuBLAS or within ``policy.verify_margin`` of it in the stage timings: the two
    are re-measured interleaved, and the faster there is the library's pick.

    ``runners_up``: custom trials within ``policy.runoff_margin`` of the custom best in the
    search, up to ``policy.runoff - 1`` of them. Their search medians were taken at other
    moments than the best's, so which of them is fastest is decided in the same rounds."""

    library: Trial
    custom: Trial | None
    rounds: int
    reference: Trial | None = None
    #: the runoff's other custom finalists (``policy.runoff``), timed in the same rounds
    runners_up: tuple[Trial, ...] = ()


@dataclass(frozen=True)
class Wait:
    """Nothing to ask for until results arrive; ``reason`` says which."""

    reason: str


@dataclass(frozen=True)
class Pick:
    """One contender of the decision."""

    backend: str
    config: Mapping[str, Any] = field(hash=False)
    median_us: float = 0.0
    spread_us: float = 0.0
    efficiency: float | None = None
    candidate_id: int | None = None
    #: the precision it computes in when below the input's (None: the input precision) and
    #: its measured relative error (the larger of its trial's and its re-check's)
    precision: str | None = None
    rel_error: float | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"backend": self.backend, "config": dict(self.config),
                "median_us": self.median_us, "spread_us": self.spread_us,
                "efficiency": self.efficiency, "candidate_id": self.candidate_id,
                "precision": self.precision, "rel_error": self.rel_error}


@dataclass(frozen=True)
class Decision:
    """The verdict with its evidence: both picks, the roofline, spend per stage, the tiers and
    why each ended, the policy and the rationale."""

    verdict: Verdict
    rationale: str
    library: Pick | None
    custom: Pick | None
    roofline: Roofline | None
    speedup: float | None  # library time / chosen time (1.0 when the library is chosen)
    verified: bool
    spend: Mapping[str, Mapping[str, float]] = field(hash=False)  # stage -> trials, gpu_s
    tiers: tuple[Mapping[str, Any], ...] = ()
    policy: Mapping[str, Any] = field(default_factory=dict, hash=False)
    #: every library candidate measured (backend, config, status, median, p20, p80): the
    #: first stage and the CUTLASS search
    library_trials: tuple[Mapping[str, Any], ...] = ()
    notes: tuple[str, ...] = ()
    #: the baseline in the verification's rounds (when the library's pick was another kernel)
    reference: Pick | None = None
    #: the library backend speed-ups are also stated against (``Roles.baseline``)
    baseline: str = ""

    @property
    def chosen(self) -> str:
        """``"custom"`` when the custom kernel won, else ``"library"`` (it follows the verdict)."""
        return "custom" if self.verdict == Verdict.CUSTOM_WINS else "library"

    @property
    def speedup_vs_baseline(self) -> float | None:
        """The baseline's time over the chosen kernel's (the library pick may be another
        library kernel, e.g. a CUTLASS op against cuBLAS).

        Each ratio is taken within one measurement set. A verification that ran cuBLAS as
        its reference gives it directly (both medians from the same interleaved rounds).
        Otherwise: the decision's ``speedup`` (over the library pick; interleaved when
        verified) times cuBLAS's first-stage time over the library pick's first-stage or
        search time. Dividing cuBLAS's first-stage time by a verified, interleaved time would
        mix two runs of a throttling GPU."""
        chosen = self.custom if self.chosen == "custom" else self.library
        if self.reference is not None and chosen is not None and chosen.median_us > 0:
            return self.reference.median_us / chosen.median_us
        cublas = [t["median_us"] for t in self.library_trials
                  if t.get("backend") == self.baseline and t.get("status") == "ok"
                  and t.get("median_us")]
        if not cublas or self.library is None or self.speedup is None:
            return None
        staged = {t.get("candidate_id"): t.get("median_us") for t in self.library_trials}
        lib_us = staged.get(self.library.candidate_id)
        return min(cublas) / lib_us * self.speedup if lib_us else None

    def to_dict(self) -> dict[str, Any]:
        rf = self.roofline
        return {
            "verdict": str(self.verdict), "rationale": self.rationale, "chosen": self.chosen,
            "library": self.library.to_dict() if self.library else None,
            "custom": self.custom.to_dict() if self.custom else None,
            "bound": rf.bound if rf else None,
            "attainable_us": rf.attainable_us if rf else None,
            "roofline": rf.to_dict() if rf else None,
            "speedup": self.speedup, "baseline": self.baseline,
            # the API's name from before problem kinds: the speed-up over the baseline
            "speedup_vs_cublas": self.speedup_vs_baseline,
            "verified": self.verified,
            "spend": {k: dict(v) for k, v in self.spend.items()},
            "tiers": [dict(t) for t in self.tiers], "policy": dict(self.policy),
            "library_trials": [dict(t) for t in self.library_trials],
            "notes": list(self.notes),
            "reference": self.reference.to_dict() if self.reference else None,
        }


@dataclass(frozen=True)
class Decide:
    """Store ``decision``: the job is over."""

    decision: Decision


Action = Calibrate | MeasureLibrary | Search | StopTier | Verify | Wait | Decide


@dataclass(frozen=True)
class Plan:
    """The stage the job is in and what to do now."""

    stage: Stage
    actions: tuple[Action, ...]
