"""The decision loop: is the library sufficient, or does a custom kernel win? With evidence.

A state machine with no I/O. The service's flow gathers what is known about one job into an
:class:`Evidence` (calibration, every library and custom trial with its result, the interleaved
verification) and asks :func:`plan` what to do next; it carries out the :class:`Action` s (create
candidates, cancel pending ones, store the :class:`Decision`) and asks again when a result
arrives. Because the state is *derived* from stored results every time, a restarted service, or
another replica, picks up exactly where the last one was.

Stages::

    calibrate + library  ->  cuBLAS and every CUTLASS seed, then the CUTLASS search (when the
                             job allows CUTLASS and it serves the problem): Optuna over CUTLASS
                             configurations within a trial and a compile-seconds budget,
                             library side, ending on its own stall rule
                         ->  verdict 1: efficiency = attainable / the library's best time
                             (``policy.tune_library=False``: asked on a first wave of cuBLAS
                             and the best-ranked seed, and on each CUTLASS result after it)
        >= threshold  ->  library_sufficient (stop: no custom trial is spent; a pick other
                          than cuBLAS, or one within ``verify_margin`` of it, is first
                          confirmed against cuBLAS interleaved, and the faster is the pick)
        else          ->  custom: tiers in order (plain tiles -> split-K -> Hopper variants ->
                          lower precision, those that apply), each with its share of the
                          trial budget; a tier stops early when it stalls (no > min_gain
                          improvement in ``patience`` trials) or, after ``probe`` trials, is
                          still more than ``promise_gap`` behind the library
    verify  ->  verdict 2: library best and custom best re-measured interleaved (A B A B ...);
                the custom kernel is adopted only when faster by more than the measured
                spread (ties go to the library: somebody else maintains it); with no verdict
                2 (no custom kernel, or its best too far behind) the library's pick is
                confirmed against cuBLAS as after verdict 1
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from enum import StrEnum
from typing import Any

from search.roofline import Calibration, Roofline, roofline
from search.types import Backend, GemmProblem, config_key

__all__ = [
    "CUTLASS_TIER", "Action", "Calibrate", "CutlassProgress", "Decide", "Decision", "Evidence",
    "MeasureLibrary", "Pick", "Plan", "Policy", "Search", "Stage", "StopTier", "TierPlan",
    "TierProgress", "Trial", "Verdict", "Verification", "Verify", "Wait", "cutlass_progress",
    "plan", "tier_progress",
]

#: The ``tier`` of the CUTLASS search's candidates. Library side: its trials count with the
#: library (``Evidence.library``), never with the custom tiers.
CUTLASS_TIER = "cutlass"


class Verdict(StrEnum):
    LIBRARY_SUFFICIENT = "library_sufficient"
    CUSTOM_WINS = "custom_wins"
    LIBRARY_WINS_AFTER_SEARCH = "library_wins_after_search"


class Stage(StrEnum):
    LIBRARY = "library"
    CUTLASS = "cutlass"
    CUSTOM = "custom"
    VERIFY = "verify"
    DECIDED = "decided"


@dataclass(frozen=True)
class Policy:
    """How the agent spends GPU time. ``full_search`` disables every early stop (the baseline
    the agent is benchmarked against); ``force_custom`` skips verdict 1. ``cutlass_trials``
    and ``cutlass_compile_s`` bound the CUTLASS search (0 trials: no search): compiling a new
    CUTLASS operation costs about a minute of nvcc, far more than measuring one, so it has a
    budget of its own.

    ``tune_library`` (the default): the library stage is cuBLAS, every CUTLASS seed and then
    the CUTLASS search, and verdict 1 is asked on the library's best once that search has ended
    (by its own stall rule): a sufficient library's pick is tuned too. On the H100 the search
    found 4% over the best seed on fp8 4096^3, where cuBLAS and the seeds already read 100% of
    the calibrated peak (``docs/benchmarks/agent_h100_2026-11-22.md``, runs 7-8); on the
    sufficient bf16 shapes it costs 11-17% of a full run's GPU time (run 8). Without it verdict
    1 is asked after a first wave of cuBLAS and the ``first_cutlass_seeds`` best-ranked seeds,
    and a sufficient library ends the job there, unsearched and unrefined (the cheapest); the
    other seeds are measured, and the CUTLASS search run, only if the wave falls short of the
    threshold.

    ``confirm_library`` (the default): a decision that keeps the library without a verdict 2
    (verdict 1, no custom tier serves the problem, or the custom best is too far behind to
    re-measure) whose best kernel is not cuBLAS, or is cuBLAS with another
    library kernel within ``verify_margin`` of it, first re-measures that kernel and cuBLAS
    interleaved (``verify_rounds`` rounds, rotating order) and picks the faster there. The
    stage timings of the two were taken minutes apart on a GPU whose clock moves with its
    temperature: on the H100 the first stage put a CUTLASS op 2.3-4.7% ahead of cuBLAS five
    times on 8192^3 and 2048x4096x14336, and interleaved cuBLAS was the faster every time
    (``docs/benchmarks/agent_h100_2026-11-24.md``). The decision's speed-up over cuBLAS is then
    measured in one set of rounds, as after a custom search."""

    threshold: float = 0.9
    force_custom: bool = False
    full_search: bool = False
    allow_tf32: bool = False
    patience: int = 8
    min_gain: float = 0.01
    probe: int = 6
    promise_gap: float = 0.10
    verify_rounds: int = 5
    #: verify only a custom best whose search median is within this of the library's
    verify_margin: float = 0.03
    cutlass_trials: int = 12
    cutlass_compile_s: float = 900.0
    first_cutlass_seeds: int = 1
    tune_library: bool = True
    confirm_library: bool = True

    def __post_init__(self) -> None:
        checks = {
            "threshold": 0 < self.threshold <= 1,
            "patience": self.patience >= 1,
            "min_gain": 0 <= self.min_gain < 1,
            "probe": self.probe >= 1,
            "promise_gap": self.promise_gap >= 0,
            "verify_rounds": self.verify_rounds >= 5,
            "verify_margin": self.verify_margin >= 0,
            "cutlass_trials": self.cutlass_trials >= 0,
            "cutlass_compile_s": 0 <= self.cutlass_compile_s < math.inf,
            "first_cutlass_seeds": self.first_cutlass_seeds >= 0,
        }
        for name, ok in checks.items():
            if not ok:
                raise ValueError(f"policy.{name}={getattr(self, name)!r} is out of range")

    def to_dict(self) -> dict[str, Any]:
        return {f: getattr(self, f) for f in self.__dataclass_fields__}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any] | None) -> Policy:
        names = cls.__dataclass_fields__
        return cls(**{k: v for k, v in (data or {}).items() if k in names})


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


@dataclass(frozen=True)
class Evidence:
    """Everything known about one job's decision (built by the service from the database)."""

    problem: GemmProblem
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

    @property
    def library(self) -> list[Trial]:
        """The first stage's candidates and the CUTLASS search's."""
        return [t for t in self.trials if t.tier in (None, CUTLASS_TIER)]

    @property
    def custom(self) -> list[Trial]:
        return [t for t in self.trials if t.tier not in (None, CUTLASS_TIER)]


# -- actions ---------------------------------------------------------------------------------
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
    are re-measured interleaved, and the faster there is the library's pick."""

    library: Trial
    custom: Trial | None
    rounds: int
    reference: Trial | None = None


@dataclass(frozen=True)
class Wait:
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

    def to_dict(self) -> dict[str, Any]:
        return {"backend": self.backend, "config": dict(self.config),
                "median_us": self.median_us, "spread_us": self.spread_us,
                "efficiency": self.efficiency, "candidate_id": self.candidate_id}


@dataclass(frozen=True)
class Decision:
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
    #: cuBLAS in the verification's rounds (when the library's pick was another kernel)
    reference: Pick | None = None

    @property
    def chosen(self) -> str:
        """``"custom"`` when the custom kernel won, else ``"library"`` (it follows the verdict)."""
        return "custom" if self.verdict == Verdict.CUSTOM_WINS else "library"

    @property
    def speedup_vs_cublas(self) -> float | None:
        """cuBLAS's time over the chosen kernel's (the library pick may be a CUTLASS op).

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
                  if t.get("backend") == Backend.CUBLAS.value and t.get("status") == "ok"
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
            "speedup": self.speedup, "speedup_vs_cublas": self.speedup_vs_cublas,
            "verified": self.verified,
            "spend": {k: dict(v) for k, v in self.spend.items()},
            "tiers": [dict(t) for t in self.tiers], "policy": dict(self.policy),
            "library_trials": [dict(t) for t in self.library_trials],
            "notes": list(self.notes),
            "reference": self.reference.to_dict() if self.reference else None,
        }


@dataclass(frozen=True)
class Decide:
    decision: Decision


Action = Calibrate | MeasureLibrary | Search | StopTier | Verify | Wait | Decide


@dataclass(frozen=True)
class Plan:
    stage: Stage
    actions: tuple[Action, ...]


# -- tiers -----------------------------------------------------------------------------------
@dataclass(frozen=True)
class TierProgress:
    name: str
    budget: int | None
    created: int
    done: int
    best_us: float | None
    ended: bool
    reason: str
    #: how many more trials may be created now: the budget left, and no more in flight than
    #: the probe or the stall rule could still need before they decide (None: no cap)
    room: int | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"tier": self.name, "budget": self.budget, "trials": self.created,
                "done": self.done, "best_us": self.best_us, "ended": self.ended,
                "reason": self.reason}


def _best(trials: Sequence[Trial]) -> Trial | None:
    """The fastest correct trial (the earliest on a tie)."""
    ok = [t for t in trials if t.ok]
    return min(ok, key=lambda t: (t.median_us, t.id)) if ok else None


def _stall(done: Sequence[Trial], best: float | None, min_gain: float
           ) -> tuple[float | None, int]:
    """The best time after ``done`` (in order, starting from ``best``) and how many trials
    have passed since the last one that improved it by more than ``min_gain``."""
    since = 0
    for t in done:
        if t.ok and (best is None or t.median_us < best * (1 - min_gain)):
            best, since = t.median_us, 0
        else:
            since += 1
            if t.ok and best is not None:
                best = min(best, t.median_us)
    return best, since


def tier_progress(ev: Evidence) -> list[TierProgress]:
    """Where each applicable tier stands. Tiers run in order; tier *t* gets
    ``ceil(total x cumulative weight up to t)`` minus what earlier tiers created (so the first
    tier gets a trial even from a budget of one, and a tier that stopped early passes its
    unspent trials on)."""
    pol = ev.policy
    tiers = [t for t in ev.tiers if t.applicable]
    total_w = sum(t.weight for t in tiers) or 1.0
    lib = _best(ev.library)
    out: list[TierProgress] = []
    created_before, cum_w = 0, 0.0
    running_best: float | None = None
    for i, tier in enumerate(tiers):
        cum_w += tier.weight
        trials = sorted((t for t in ev.custom if t.tier == tier.name), key=lambda t: t.id)
        if ev.max_trials is None:
            budget = None
        elif i == len(tiers) - 1:
            budget = max(0, ev.max_trials - created_before)
        else:
            budget = max(0, math.ceil(ev.max_trials * cum_w / total_w - 1e-9) - created_before)
        done = [t for t in trials if t.done]
        best = _best(trials)
        ended, reason = False, ""
        before = running_best  # the custom best of the earlier tiers
        # patience: trials since the last > min_gain improvement of the custom best so far
        running_best, since = _stall(done, running_best, pol.min_gain)
        gap_ok = lib.median_us * (1 + pol.promise_gap) if lib is not None else None
        if (not trials and not pol.full_search and tier.max_gain is not None
                and before is not None and gap_ok is not None
                and before / (1 + tier.max_gain) > gap_ok):
            ended, reason = True, (
                f"skipped: even a {tier.max_gain:.0%} gain on the best so far "
                f"({before:.1f} us) would leave it over {pol.promise_gap:.0%} behind the "
                f"library's {lib.median_us:.1f} us")  # type: ignore[union-attr]
        elif budget is not None and len(trials) >= budget and len(done) == len(trials):
            ended, reason = True, f"budget of {budget} trials spent"
        elif tier.name in ev.exhausted_tiers and len(done) == len(trials):
            ended, reason = True, "space exhausted: every feasible configuration was tried"
        elif not pol.full_search and since >= pol.patience:
            ended, reason = True, (f"stalled: no gain over {pol.min_gain:.0%} in the last "
                                   f"{since} trials")
        elif (not pol.full_search and lib is not None and len(done) >= pol.probe
              and (best is None or best.median_us > lib.median_us * (1 + pol.promise_gap))):
            gap = "no correct kernel" if best is None else (
                f"best {best.median_us:.1f} us is {best.median_us / lib.median_us - 1:.0%} "
                f"behind the library's {lib.median_us:.1f} us")
            ended, reason = True, (f"not promising: after {len(done)} trials, {gap} "
                                   f"(gap allowed {pol.promise_gap:.0%})")
        elif ev.time_up and len(done) == len(trials):
            ended, reason = True, "time budget spent"
        room = None if budget is None else budget - len(trials)
        if not pol.full_search:
            in_flight = len(trials) - len(done)
            cap = (pol.probe - len(trials) if len(done) < pol.probe
                   else pol.patience - since - in_flight)
            room = cap if room is None else min(room, cap)
        out.append(TierProgress(tier.name, budget, len(trials), len(done),
                                best.median_us if best else None, ended, reason, room))
        created_before += len(trials)
    return out


@dataclass(frozen=True)
class CutlassProgress(TierProgress):
    """Where the CUTLASS search stands, with the compile-seconds its measurements reported."""

    compile_s: float = 0.0
    compile_budget_s: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        return {**super().to_dict(), "side": "library", "compile_s": round(self.compile_s, 3),
                "compile_budget_s": self.compile_budget_s}


#: The most the CUTLASS search is expected to gain over the first stage's ranked CUTLASS ops:
#: on the recorded H100 runs (``tests/data/h100_cutlass_trials.json``) the best of 36 ops and
#: their knobs beat the best of the top 6 ranked by at most 6% (32768x512x512; fp8 4%).
CUTLASS_SEARCH_MAX_GAIN = 0.10


def cutlass_progress(ev: Evidence) -> CutlassProgress | None:
    """The CUTLASS search's state; ``None`` when it does not run: the policy gives it no
    trials, or CUTLASS contributed no first-stage candidate (the job does not allow it, or it
    cannot serve the problem; ``Evidence.library_notes`` say why).

    It is skipped (not under ``full_search``) when the first stage's best CUTLASS op is so far
    behind the library's best that even a :data:`CUTLASS_SEARCH_MAX_GAIN` gain would not make
    it faster: a library-side search only matters if it beats the library. It ends when its
    trial budget is spent, when the tuner finds nothing untried within the compile budget,
    when it stalls (no > ``min_gain`` gain on the library best in ``patience`` trials; not
    under ``full_search``), or when time is up."""
    pol = ev.policy
    if pol.cutlass_trials <= 0 or not any(b == Backend.CUTLASS for b, _ in ev.library_configs):
        return None
    trials = sorted((t for t in ev.trials if t.tier == CUTLASS_TIER), key=lambda t: t.id)
    done = [t for t in trials if t.done]
    compile_s = sum(t.compile_s for t in done)
    first = _best([t for t in ev.trials if t.tier is None])
    _, since = _stall(done, first.median_us if first is not None else None, pol.min_gain)
    budget = pol.cutlass_trials
    ended, reason = False, ""
    seeds = _best([t for t in ev.trials if t.tier is None and t.backend == Backend.CUTLASS])
    if (not trials and not pol.full_search and seeds is not None and first is not None
            and seeds.median_us / (1 + CUTLASS_SEARCH_MAX_GAIN) >= first.median_us):
        ended, reason = True, (
            f"skipped: the first stage's best CUTLASS op ({seeds.median_us:.1f} us) is "
            f"{seeds.median_us / first.median_us - 1:.0%} behind {first.backend}'s "
            f"{first.median_us:.1f} us; even a {CUTLASS_SEARCH_MAX_GAIN:.0%} gain would not "
            "make it faster")
    elif len(trials) >= budget and len(done) == len(trials):
        ended, reason = True, f"budget of {budget} trials spent"
    elif CUTLASS_TIER in ev.exhausted_tiers and len(done) == len(trials):
        ended, reason = True, ("nothing untried left within the compile budget "
                               f"({compile_s:.0f} of {pol.cutlass_compile_s:.0f} s compiled)")
    elif not pol.full_search and since >= pol.patience:
        ended, reason = True, (f"stalled: no gain over {pol.min_gain:.0%} in the last "
                               f"{since} trials")
    elif ev.time_up and len(done) == len(trials):
        ended, reason = True, "time budget spent"
    room: int | None = budget - len(trials)
    if not pol.full_search:
        room = min(budget - len(trials), pol.patience - since - (len(trials) - len(done)))
    best = _best(trials)
    return CutlassProgress(CUTLASS_TIER, budget, len(trials), len(done),
                           best.median_us if best else None, ended, reason, room, compile_s,
                           pol.cutlass_compile_s)


# -- the plan --------------------------------------------------------------------------------
def plan(ev: Evidence) -> Plan:
    """What to do next for the job described by ``ev``."""
    pol = ev.policy
    actions: list[Action] = []
    need_cal = ev.calibration is None and not ev.calibration_failed
    if need_cal and not ev.calibration_pending:
        actions.append(Calibrate())
    have = {_key(t.backend, t.config) for t in ev.library}
    wanted = tuple((b, c) for b, c in ev.library_configs if _key(b, c) not in have)
    skip_verdict1 = pol.force_custom or pol.full_search or not ev.library_configs
    held = 0  # CUTLASS seeds held back because the first wave answers verdict 1
    if not skip_verdict1 and not pol.tune_library:
        first = _first_wave(ev)
        if _first_wave_answers(ev, first, need_cal):
            held = sum(_key(b, c) not in first for b, c in wanted)
            wanted = tuple((b, c) for b, c in wanted if _key(b, c) in first)
    if wanted:
        actions.append(MeasureLibrary(wanted))

    # the first stage only: the CUTLASS search's trials are library too, but verdict 1 must
    # not wait for them (a search result over the threshold ends the job at once)
    lib_pending = any(not t.done for t in ev.library if t.tier is None) or bool(wanted)
    if not skip_verdict1 and (lib_pending or need_cal):
        return Plan(Stage.LIBRARY, (*actions, Wait("waiting for the library and calibration")))

    rf = roofline(ev.problem, ev.calibration, pol.allow_tf32)
    lib = _best(ev.library)
    lib_eff = rf.efficiency(lib.median_us) if (rf and lib) else None
    cut = cutlass_progress(ev)
    # With tune_library the CUTLASS search is part of the library stage: verdict 1 waits for
    # it to end (in-flight trials included) even when the library already reads sufficient.
    cut_out = any(not t.done for t in ev.library if t.tier == CUTLASS_TIER)
    tuning = (not skip_verdict1 and pol.tune_library and cut is not None
              and (not cut.ended or cut_out))
    if not skip_verdict1 and not tuning and lib is not None and lib_eff is not None \
            and _reaches(rf, lib.median_us, pol.threshold):
        if cut is not None and not cut.ended and _confirmation(ev) is not None:
            # tune_library=False: the search is moot while the confirmation runs
            actions.append(StopTier(CUTLASS_TIER, "the library reached the threshold"))
        return _keep_library(ev, cut, rf, actions,
                             _decide_library_sufficient(ev, rf, lib, lib_eff, held))
    # The CUTLASS search: library side, so before any custom tier, and it raises the library
    # best the custom kernels must beat (without tune_library, verdict 1 above is asked again
    # on each result; with it, once the search has ended).
    if cut is not None:
        if cut.ended and cut_out:
            actions.append(StopTier(CUTLASS_TIER, cut.reason))
            if tuning:  # verdict 1 waits for the search's last results
                return Plan(Stage.CUTLASS, (*actions, Wait("waiting for the CUTLASS search")))
        if not cut.ended:
            if lib_pending:  # its seeds are the first stage's: never propose one twice
                return Plan(Stage.LIBRARY, (*actions, Wait("waiting for the library")))
            if (not ev.time_up and CUTLASS_TIER not in ev.exhausted_tiers
                    and cut.created < (cut.budget or 0) and (cut.room is None or cut.room > 0)):
                left = max(0.0, pol.cutlass_compile_s - cut.compile_s)
                return Plan(Stage.CUTLASS, (*actions, Search(CUTLASS_TIER, cut.room, left)))
            return Plan(Stage.CUTLASS, (*actions, Wait("waiting for the CUTLASS search")))
    # No tier applies (fp8: no Triton template): as if no custom backend were allowed.
    no_tier = bool(ev.tiers) and not any(t.applicable for t in ev.tiers)
    if not ev.custom_allowed or no_tier:
        if lib_pending:
            return Plan(Stage.LIBRARY, (*actions, Wait("waiting for the library")))
        return _keep_library(ev, cut, rf, actions, _decide_no_custom(ev, rf, lib, lib_eff))

    # custom stage
    progress = tier_progress(ev)
    for p in progress:
        if p.ended and any(not t.done for t in ev.custom if t.tier == p.name):
            actions.append(StopTier(p.name, p.reason))
    # The active tier: the first one not over whose budget is not all out (a tier whose budget
    # is all created no longer holds the next one back, so the GPU never idles at a tier
    # boundary). It may be waiting for results its probe or stall rule needs.
    active = next((p for p in progress if not p.ended and p.name not in ev.exhausted_tiers
                   and (p.budget is None or p.created < p.budget)), None)
    if active is not None and not ev.time_up:
        if active.room is None or active.room > 0:
            return Plan(Stage.CUSTOM, (*actions, Search(active.name, active.room)))
        return Plan(Stage.CUSTOM, (*actions, Wait(f"waiting for {active.name} results")))
    outstanding = any(not t.done for t in ev.trials)
    if outstanding or lib_pending:
        return Plan(Stage.CUSTOM, (*actions, Wait("waiting for custom trials")))

    # verification
    cus = _best(ev.custom)
    if cus is not None and lib is not None and not ev.time_up \
            and cus.median_us < lib.median_us * (1 + pol.verify_margin):
        v = ev.verification
        if v is None or (v.library_id, v.custom_id) != (lib.id, cus.id):
            cublas = _best([t for t in ev.library if t.backend == Backend.CUBLAS])
            ref = cublas if cublas is not None and lib.backend != Backend.CUBLAS else None
            return Plan(Stage.VERIFY, (*actions, Verify(lib, cus, pol.verify_rounds, ref)))
        if v.status is None:
            return Plan(Stage.VERIFY, (*actions, Wait("waiting for the verification")))
        return Plan(Stage.DECIDED, (Decide(_with_notes(
            ev, cut, _decide_after_search(ev, rf, lib, cus, progress))),))
    # no verdict 2 (no custom kernel, or the best too far behind): the library stands, and its
    # pick is confirmed against cuBLAS as after verdict 1
    return _keep_library(ev, cut, rf, actions, _decide_after_search(ev, rf, lib, cus, progress))


def _key(backend: str, config: Mapping[str, Any]) -> tuple[str, str]:
    """What identifies a library candidate: its backend and configuration."""
    return backend, config_key(dict(config))


def _first_wave(ev: Evidence) -> set[tuple[str, str]]:
    """The keys of the first stage's first wave: cuBLAS and the ``policy.first_cutlass_seeds``
    best-ranked CUTLASS seeds (``library_configs`` lists them in rank order)."""
    seeds = [_key(b, c) for b, c in ev.library_configs if b == Backend.CUTLASS]
    rest = {_key(b, c) for b, c in ev.library_configs if b != Backend.CUTLASS}
    return rest | set(seeds[:ev.policy.first_cutlass_seeds])


def _first_wave_answers(ev: Evidence, first: set[tuple[str, str]], need_cal: bool) -> bool:
    """Whether the other CUTLASS seeds wait for the first wave: the job has cuBLAS and seeds
    beyond the wave, and the wave is still being measured (or the calibration is), or it is
    measured and reaches the threshold. Once it falls short, or cannot be judged (nothing ran
    correctly, or there is no roofline), every seed is measured: one may be the library's
    best, and the verdict is asked on all of them."""
    everything = {_key(b, c) for b, c in ev.library_configs}
    if first == everything or not any(b != Backend.CUTLASS for b, _ in first):
        return False
    measured = [t for t in ev.library if t.tier is None and _key(t.backend, t.config) in first]
    if len(measured) < len(first) or any(not t.done for t in measured) or need_cal:
        return True
    rf = roofline(ev.problem, ev.calibration, ev.policy.allow_tf32)
    best = _best(measured)
    return bool(rf and best and _reaches(rf, best.median_us, ev.policy.threshold))


def _reaches(rf: Roofline | None, us: float | None, threshold: float) -> bool:
    """Verdict 1's test: a library time ``us`` reaches the threshold, at the calibrated peak
    or within the calibration's own noise (at its lowest pass's peak): the calibration cannot
    tell that library from one at the threshold, and a tie goes to the library."""
    eff = rf.efficiency_at_low_peak(us) if rf is not None else None
    return eff is not None and eff >= threshold


def _confirmation(ev: Evidence) -> tuple[Trial, Trial] | None:
    """The library kernels a decision that keeps the library re-measures interleaved
    (``policy.confirm_library``): the best correct library kernel other than cuBLAS and
    cuBLAS's best, when the other is faster than cuBLAS or within ``verify_margin`` of it in
    the stage timings. None: nothing to confirm (no cuBLAS, no other kernel, the other far
    behind, the policy off, or the time is up)."""
    pol = ev.policy
    if not pol.confirm_library or ev.time_up:
        return None
    cublas = _best([t for t in ev.library if t.backend == Backend.CUBLAS])
    other = _best([t for t in ev.library if t.backend != Backend.CUBLAS])
    if cublas is None or other is None:
        return None
    if other.median_us > cublas.median_us * (1 + pol.verify_margin):
        return None
    return other, cublas


def _keep_library(ev: Evidence, cut: CutlassProgress | None, rf: Roofline | None,
                  actions: list[Action], d: Decision) -> Plan:
    """The plan for a decision ``d`` that keeps the library without a verdict 2: first the
    library confirmation (:func:`_confirmation`) is asked for and waited for, then ``d`` is
    decided with the pick the confirmation's rounds made (see :func:`_confirmed`)."""
    pair = _confirmation(ev)
    if pair is not None:
        other, cublas = pair
        v = ev.verification
        if v is None or v.custom_id is not None or (v.library_id, v.reference_id) != (
                other.id, cublas.id):
            return Plan(Stage.VERIFY, (*actions, Verify(other, None, ev.policy.verify_rounds,
                                                        cublas)))
        if v.status is None:
            return Plan(Stage.VERIFY, (*actions, Wait("waiting for the library confirmation")))
        d = _confirmed(d, rf, pair, v)
    return Plan(Stage.DECIDED, (Decide(_with_notes(ev, cut, d)),))


def _confirmed(d: Decision, rf: Roofline | None, pair: tuple[Trial, Trial], v: Verification
               ) -> Decision:
    """``d`` after the confirmation ``v`` of ``pair`` (other, cuBLAS): its library pick is the
    faster of the two in the rounds, its ``reference`` cuBLAS in them, and its rationale says
    so. A failed confirmation (the other kernel wrong on the re-check, a crash) leaves cuBLAS,
    at its stage timing, the pick, with no reference."""
    other, cublas = pair
    if v.status != "ok" or not v.library_us or not v.reference_us:
        return replace(d, library=_pick(cublas, rf), reference=None, rationale=(
            f"{d.rationale} The interleaved confirmation of {other.backend} against cuBLAS "
            f"failed ({v.status}: {v.error or 'no detail'}): cuBLAS is the library's pick."))
    om, orng = statistics.median(v.library_us), _range(v.library_us)
    cm, crng = statistics.median(v.reference_us), _range(v.reference_us)
    ref = _pick(cublas, rf, cm, crng)
    n = len(v.library_us)
    if om < cm:
        pick, said = _pick(other, rf, om, orng), (
            f"Interleaved over {n} rounds, {other.backend} took {om:.2f} us (range "
            f"{orng:.2f}) and cuBLAS {cm:.2f} us (range {crng:.2f}): {cm / om:.3f}x, "
            f"{other.backend} is the library's pick.")
    else:
        pick, said = ref, (
            f"Interleaved over {n} rounds, cuBLAS took {cm:.2f} us (range {crng:.2f}) and "
            f"{other.backend} {om:.2f} us (range {orng:.2f}): cuBLAS is the library's pick.")
    return replace(d, library=pick, reference=ref, rationale=f"{d.rationale} {said}")


# -- decisions -------------------------------------------------------------------------------
def _spread(t: Trial) -> float:
    if t.p20_us is None or t.p80_us is None:
        return 0.0
    return max(0.0, t.p80_us - t.p20_us)


def _pick(t: Trial, rf: Roofline | None, median: float | None = None,
          spread: float | None = None) -> Pick:
    m = t.median_us if median is None else median
    return Pick(t.backend, dict(t.config), float(m), _spread(t) if spread is None else spread,
                rf.efficiency(m) if rf else None, t.id)


def _spend(ev: Evidence) -> dict[str, dict[str, float]]:
    lib = [t for t in ev.library if t.tier is None]
    cut = [t for t in ev.library if t.tier == CUTLASS_TIER]
    cus = ev.custom
    v = ev.verification
    return {
        "calibration": {"trials": int(ev.calibration_gpu_s > 0),
                        "gpu_s": round(ev.calibration_gpu_s, 3)},
        "library": {"trials": sum(t.done for t in lib),
                    "gpu_s": round(sum(t.gpu_s for t in lib), 3),
                    "compile_s": round(sum(t.compile_s for t in lib), 3)},
        "cutlass": {"trials": sum(t.done for t in cut),
                    "gpu_s": round(sum(t.gpu_s for t in cut), 3),
                    "compile_s": round(sum(t.compile_s for t in cut), 3)},
        "custom": {"trials": sum(t.done for t in cus),
                   "gpu_s": round(sum(t.gpu_s for t in cus), 3)},
        "verify": {"trials": int(v is not None and v.status is not None),
                   "gpu_s": round(v.gpu_s if v else 0.0, 3)},
    }


def _library_trials(ev: Evidence) -> tuple[dict[str, Any], ...]:
    return tuple({"candidate_id": t.id, "backend": t.backend, "config": dict(t.config),
                  "status": t.status, "median_us": t.median_us, "p20_us": t.p20_us,
                  "p80_us": t.p80_us, "search": t.tier == CUTLASS_TIER}
                 for t in sorted(ev.library, key=lambda t: t.id))


def _with_notes(ev: Evidence, cut: CutlassProgress | None, d: Decision) -> Decision:
    """``d`` with the library trials listed, the CUTLASS search (``cut``: its progress, when it
    ran) first among the searches, and the evidence's notes added to its rationale."""
    notes = tuple(ev.library_notes)
    why, tiers = d.rationale, d.tiers
    if cut is not None and cut.created:
        best = f"best {cut.best_us:.1f} us" if cut.best_us is not None else "none ran correctly"
        why += (f" CUTLASS search (library side): {cut.created} trials, {best}, "
                f"{cut.compile_s:.0f} of {cut.compile_budget_s:.0f} compile-s "
                f"({cut.reason or 'open'}).")
        tiers = (cut.to_dict(), *tiers)
    elif cut is not None and cut.reason.startswith("skipped"):
        why += f" CUTLASS search (library side): {cut.reason}."
        tiers = (cut.to_dict(), *tiers)
    if notes:
        why = " ".join((why, *notes))
    return replace(d, rationale=why, tiers=tiers, library_trials=_library_trials(ev),
                   notes=notes)


def _describe_roofline(rf: Roofline | None) -> str:
    if rf is None:
        return "no roofline (no device calibration, or none with a peak for these inputs)"
    peak = f" at {rf.peak_tflops:.0f} TFLOP/s" if rf.peak_tflops else ""
    if rf.peak_tflops and rf.peak_low_tflops and rf.peak_low_tflops < rf.peak_tflops * 0.995:
        peak += f" (lowest calibration pass {rf.peak_low_tflops:.0f})"
    bw = f" at {rf.bandwidth_gbs:.0f} GB/s" if rf.bandwidth_gbs else ""
    return (f"{rf.bound}-bound: the roofline allows {rf.attainable_us:.1f} us "
            f"(compute {rf.compute_us:.1f} us{peak}, memory {rf.memory_us:.1f} us{bw})")


def _decide_library_sufficient(ev: Evidence, rf: Roofline, lib: Trial,
                               eff: float, held: int = 0) -> Decision:
    threshold = ev.policy.threshold
    if eff >= threshold:
        why = (f"{_describe_roofline(rf)}; {lib.backend} takes {lib.median_us:.1f} us, "
               f"{eff:.0%} of the attainable, at or above the {threshold:.0%} threshold: "
               "the library is sufficient and no custom kernel was tried.")
    else:
        high = rf.efficiency_at_low_peak(lib.median_us) or eff
        why = (f"{_describe_roofline(rf)}; {lib.backend} takes {lib.median_us:.1f} us, "
               f"{eff:.1%} of the attainable, and {high:.1%} at the lowest peak a calibration "
               f"pass measured ({rf.peak_low_tflops:.0f} TFLOP/s): the {threshold:.0%} "
               "threshold lies within the calibration's own noise, a tie, which goes to the "
               "library: it is sufficient and no custom kernel was tried.")
    if held:
        seeds = f"{held} other CUTLASS seeds were" if held > 1 else "other CUTLASS seed was"
        why += (f" The {seeds} not measured: the library reached the threshold without "
                f"{'them' if held > 1 else 'it'} (policy first_cutlass_seeds="
                f"{ev.policy.first_cutlass_seeds}).")
    return Decision(Verdict.LIBRARY_SUFFICIENT, why, _pick(lib, rf), None, rf, 1.0, False,
                    _spend(ev), (), ev.policy.to_dict())


def _decide_no_custom(ev: Evidence, rf: Roofline | None, lib: Trial | None,
                      eff: float | None) -> Decision:
    inapplicable = [t for t in ev.tiers if not t.applicable] if ev.custom_allowed else []
    skipped = tuple({"tier": t.name, "trials": 0, "ended": True, "reason": f"skipped: {t.reason}"}
                    for t in inapplicable)
    tiers_of: dict[str, list[str]] = {}
    for t in inapplicable:
        tiers_of.setdefault(t.reason, []).append(t.name)
    no_custom = ("the job allows no custom backend" if not ev.custom_allowed else
                 "no custom tier applies (" + "; ".join(
                     f"{', '.join(names)}: {reason}" for reason, names in tiers_of.items()) + ")")
    if lib is None:
        why = f"no library candidate ran correctly and {no_custom}."
    else:
        eff_text = f"{eff:.0%} of the attainable" if eff is not None else "efficiency unknown"
        why = (f"{_describe_roofline(rf)}; {lib.backend} takes {lib.median_us:.1f} us "
               f"({eff_text}); {no_custom}, so the library stands.")
    return Decision(Verdict.LIBRARY_SUFFICIENT, why, _pick(lib, rf) if lib else None, None, rf,
                    1.0 if lib else None, False, _spend(ev), skipped, ev.policy.to_dict())


def _decide_after_search(ev: Evidence, rf: Roofline | None, lib: Trial | None,
                         cus: Trial | None, progress: list[TierProgress]) -> Decision:
    pol = ev.policy
    tiers = tuple(p.to_dict() for p in progress) + tuple(
        {"tier": t.name, "trials": 0, "ended": True, "reason": f"skipped: {t.reason}"}
        for t in ev.tiers if not t.applicable)
    spend = _spend(ev)
    n_custom = spend["custom"]["trials"]
    lib_eff = rf.efficiency(lib.median_us) if (rf and lib) else None
    why = [_describe_roofline(rf) + "."]
    if lib is not None:
        eff_text = f"{lib_eff:.0%} of the attainable" if lib_eff is not None else "no roofline"
        if pol.force_custom or pol.full_search:
            why.append(f"{lib.backend} takes {lib.median_us:.1f} us ({eff_text}); the custom "
                       "stage was forced by the job's policy.")
        else:
            why.append(f"{lib.backend} takes {lib.median_us:.1f} us ({eff_text}, under the "
                       f"{pol.threshold:.0%} threshold), so custom kernels were searched.")
    else:
        why.append("no library candidate ran correctly (or none was allowed).")
    ran = ", ".join(f"{p.name}: {p.created} trials ({p.reason or 'open'})" for p in progress)
    if ran:
        why.append(f"Tiers - {ran}.")
    v = ev.verification
    if v is not None and v.custom_id is None:
        v = None  # a library confirmation (see _keep_library), not verdict 2
    verified = False
    reference: Pick | None = None
    if cus is None:
        verdict = Verdict.LIBRARY_WINS_AFTER_SEARCH
        why.append(f"No custom kernel ran correctly in {n_custom} trials.")
        lib_pick, cus_pick = (_pick(lib, rf) if lib else None), None
    elif lib is None:
        verdict = Verdict.CUSTOM_WINS
        why.append(f"The custom kernel ({cus.median_us:.1f} us) is the only correct one.")
        lib_pick, cus_pick = None, _pick(cus, rf)
    elif v is not None and v.status == "ok" and (v.library_id, v.custom_id) == (lib.id, cus.id) \
            and v.library_us and v.custom_us:
        verified = True
        lm, cm = statistics.median(v.library_us), statistics.median(v.custom_us)
        ls, cs = _range(v.library_us), _range(v.custom_us)
        lib_pick, cus_pick = _pick(lib, rf, lm, ls), _pick(cus, rf, cm, cs)
        ref = next((t for t in ev.library if t.id == v.reference_id), None)
        if ref is not None and v.reference_us:
            rm, rs = statistics.median(v.reference_us), _range(v.reference_us)
            reference = _pick(ref, rf, rm, rs)
            if rm < lm:  # interleaved, cuBLAS beat the pick the stage timings made
                why.append(f"Interleaved, {ref.backend} ({rm:.2f} us) was faster than the "
                           f"library's pick {lib.backend} ({lm:.2f} us): it is the library's "
                           "side.")
                lib_pick, lm, ls = reference, rm, rs
            else:
                why.append(f"{ref.backend} ran in the same rounds for reference: {rm:.2f} us "
                           f"against the library's pick {lib.backend} at {lm:.2f} us.")
        spread = max(ls, cs)
        rounds = len(v.library_us)
        if lm - cm > spread:
            verdict = Verdict.CUSTOM_WINS
            why.append(f"Interleaved over {rounds} rounds the custom kernel took {cm:.2f} us vs "
                       f"the library's {lm:.2f} us: {lm / cm:.3f}x, a gap of "
                       f"{lm - cm:.2f} us over the measured spread of {spread:.2f} us.")
        else:
            verdict = Verdict.LIBRARY_WINS_AFTER_SEARCH
            if cm < lm:
                why.append(f"Interleaved over {rounds} rounds the custom kernel took {cm:.2f} us "
                           f"vs the library's {lm:.2f} us, within the measured spread of "
                           f"{spread:.2f} us: a tie, which goes to the library.")
            else:
                why.append(f"Interleaved over {rounds} rounds the custom kernel took {cm:.2f} us "
                           f"vs the library's {lm:.2f} us: the library is faster.")
    else:
        lib_pick, cus_pick = _pick(lib, rf), _pick(cus, rf)
        spread = max(_spread(lib), _spread(cus))
        if v is not None and v.status not in (None, "ok"):
            why.append(f"The verification failed ({v.status}: {v.error or 'no detail'}); "
                       "the library is kept.")
            verdict = Verdict.LIBRARY_WINS_AFTER_SEARCH
        elif cus.median_us >= lib.median_us * (1 + pol.verify_margin):
            verdict = Verdict.LIBRARY_WINS_AFTER_SEARCH
            why.append(f"The best custom kernel took {cus.median_us:.1f} us vs the library's "
                       f"{lib.median_us:.1f} us ({cus.median_us / lib.median_us:.2f}x slower); "
                       "too far behind to be worth re-measuring.")
        elif lib.median_us - cus.median_us > spread:
            verdict = Verdict.CUSTOM_WINS
            why.append(f"Not re-measured (time budget spent); on the search medians the custom "
                       f"kernel took {cus.median_us:.1f} us vs {lib.median_us:.1f} us, beyond "
                       f"the p20-p80 spread of {spread:.2f} us.")
        else:
            verdict = Verdict.LIBRARY_WINS_AFTER_SEARCH
            why.append(f"Not re-measured (time budget spent); the custom kernel's "
                       f"{cus.median_us:.1f} us vs {lib.median_us:.1f} us is within the spread "
                       "of the measurements: a tie goes to the library.")
    speedup = None
    if lib_pick is not None:
        chosen_us = (cus_pick.median_us if verdict == Verdict.CUSTOM_WINS and cus_pick
                     else lib_pick.median_us)
        speedup = lib_pick.median_us / chosen_us
    return Decision(verdict, " ".join(why), lib_pick, cus_pick, rf, speedup, verified, spend,
                    tiers, pol.to_dict(), reference=reference)


def _range(xs: Sequence[float]) -> float:
    return (max(xs) - min(xs)) if xs else 0.0
