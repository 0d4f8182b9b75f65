"""The stop rules: where each custom tier and the CUTLASS search stand, and why one ended.

Tiers run in order, each with its share of the trial budget. A tier ends when its budget is
spent, its space is exhausted, it stalls (no > ``min_gain`` gain in ``patience`` trials), or
after ``probe`` trials it is still more than ``promise_gap`` behind the library; a bounded-gain
tier that could not close the gap is skipped. ``policy.full_search`` turns off every rule but
the budget, the space and the clock.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from search.decision import rationale
from search.decision.evidence import Evidence, TierPlan, Trial
from search.decision.policy import Policy

__all__ = ["CUTLASS_SEARCH_MAX_GAIN", "CutlassProgress", "TierProgress", "best_trial",
           "cutlass_progress", "tier_progress"]

#: The most the CUTLASS search is expected to gain over the first stage's ranked CUTLASS ops
#: (the recorded H100 runs: ``docs/benchmarks/cutlass_h100_2026-11-22.md``).
CUTLASS_SEARCH_MAX_GAIN = 0.10


@dataclass(frozen=True)
class TierProgress:
    """Where one search stands: its budget, trials created and done, its best, whether it
    ended and why."""

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


@dataclass(frozen=True)
class CutlassProgress(TierProgress):
    """Where the CUTLASS search stands, with the compile-seconds its measurements reported."""

    compile_s: float = 0.0
    compile_budget_s: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        return {**super().to_dict(), "side": "library", "compile_s": round(self.compile_s, 3),
                "compile_budget_s": self.compile_budget_s}


def best_trial(trials: Sequence[Trial]) -> Trial | None:
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


# -- custom tiers ------------------------------------------------------------------------------
def tier_progress(ev: Evidence) -> list[TierProgress]:
    """Where each applicable tier stands. Tiers run in order; tier *t* gets
    ``ceil(total x cumulative weight up to t)`` minus what earlier tiers created (so the first
    tier gets a trial even from a budget of one, and a tier that stopped early passes its
    unspent trials on)."""
    pol = ev.policy
    tiers = [t for t in ev.tiers if t.applicable]
    total_w = sum(t.weight for t in tiers) or 1.0
    lib = best_trial(ev.library)
    out: list[TierProgress] = []
    created_before, cum_w = 0, 0.0
    running_best: float | None = None
    for i, tier in enumerate(tiers):
        cum_w += tier.weight
        trials = sorted((t for t in ev.custom if t.tier == tier.name), key=lambda t: t.id)
        budget = _tier_budget(ev.max_trials, cum_w / total_w, created_before,
                              last=i == len(tiers) - 1)
        done = [t for t in trials if t.done]
        best = best_trial(trials)
        before = running_best  # the custom best of the earlier tiers
        # patience: trials since the last > min_gain improvement of the custom best so far
        running_best, since = _stall(done, running_best, pol.min_gain)
        reason = _tier_end(ev, tier, trials, done, budget, best, before, since, lib)
        room = None if budget is None else budget - len(trials)
        if not pol.full_search:
            in_flight = len(trials) - len(done)
            cap = (pol.probe - len(trials) if len(done) < pol.probe
                   else pol.patience - since - in_flight)
            room = cap if room is None else min(room, cap)
        out.append(TierProgress(tier.name, budget, len(trials), len(done),
                                best.median_us if best else None, bool(reason), reason, room))
        created_before += len(trials)
    return out


def _tier_budget(max_trials: int | None, share: float, created_before: int, *, last: bool
                 ) -> int | None:
    """A tier's trial budget: its cumulative ``share`` of ``max_trials`` less what the tiers
    before it created (the last tier gets all that is left; None: no trial cap)."""
    if max_trials is None:
        return None
    if last:
        return max(0, max_trials - created_before)
    return max(0, math.ceil(max_trials * share - 1e-9) - created_before)


def _tier_end(ev: Evidence, tier: TierPlan, trials: list[Trial], done: list[Trial],
              budget: int | None, best: Trial | None, before: float | None, since: int,
              lib: Trial | None) -> str:
    """Why the tier is over, or ``""`` while it runs (the first rule that applies)."""
    pol = ev.policy
    all_in = len(done) == len(trials)
    if _cannot_close_gap(pol, tier, trials, before, lib):
        return rationale.tier_skipped_gap(tier.max_gain, before, pol.promise_gap,
                                          lib.median_us)  # type: ignore[arg-type, union-attr]
    if budget is not None and len(trials) >= budget and all_in:
        return rationale.budget_spent(budget)
    if tier.name in ev.exhausted_tiers and all_in:
        return rationale.SPACE_EXHAUSTED
    if not pol.full_search and since >= pol.patience:
        return rationale.stalled(pol.min_gain, since)
    if (not pol.full_search and lib is not None and len(done) >= pol.probe
            and (best is None or best.median_us > lib.median_us * (1 + pol.promise_gap))):
        return rationale.not_promising(len(done), best, lib, pol.promise_gap)
    if ev.time_up and all_in:
        return rationale.TIME_SPENT
    return ""


def _cannot_close_gap(pol: Policy, tier: TierPlan, trials: list[Trial], before: float | None,
                      lib: Trial | None) -> bool:
    """A bounded-gain tier not started yet that, even gaining ``tier.max_gain`` on the earlier
    tiers' best, would stay over ``promise_gap`` behind the library."""
    if trials or pol.full_search or tier.max_gain is None or before is None or lib is None:
        return False
    return before / (1 + tier.max_gain) > lib.median_us * (1 + pol.promise_gap)


# -- the CUTLASS search (library side) --------------------------------------------------------
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
    searched, tier = ev.r.searched, ev.r.library_tier
    if (tier is None or pol.cutlass_trials <= 0
            or not any(b == searched for b, _ in ev.library_configs)):
        return None
    trials = sorted((t for t in ev.trials if t.tier == tier), key=lambda t: t.id)
    done = [t for t in trials if t.done]
    compile_s = sum(t.compile_s for t in done)
    first = best_trial([t for t in ev.trials if t.tier is None])
    _, since = _stall(done, first.median_us if first is not None else None, pol.min_gain)
    budget = pol.cutlass_trials
    reason = _cutlass_end(ev, trials, done, first, since, compile_s)
    room: int | None = budget - len(trials)
    if not pol.full_search:
        room = min(budget - len(trials), pol.patience - since - (len(trials) - len(done)))
    best = best_trial(trials)
    return CutlassProgress(tier, budget, len(trials), len(done),
                           best.median_us if best else None, bool(reason), reason, room,
                           compile_s, pol.cutlass_compile_s)


def _cutlass_end(ev: Evidence, trials: list[Trial], done: list[Trial], first: Trial | None,
                 since: int, compile_s: float) -> str:
    """Why the CUTLASS search is over, or ``""`` while it runs (the first rule that applies)."""
    pol = ev.policy
    all_in = len(done) == len(trials)
    seeds = best_trial([t for t in ev.trials
                        if t.tier is None and t.backend == ev.r.searched])
    if (not trials and not pol.full_search and seeds is not None and first is not None
            and seeds.median_us / (1 + CUTLASS_SEARCH_MAX_GAIN) >= first.median_us):
        return rationale.cutlass_skipped(ev.r.searched_label, seeds, first,
                                         CUTLASS_SEARCH_MAX_GAIN)
    if len(trials) >= pol.cutlass_trials and all_in:
        return rationale.budget_spent(pol.cutlass_trials)
    if ev.r.library_tier in ev.exhausted_tiers and all_in:
        return rationale.cutlass_exhausted(compile_s, pol.cutlass_compile_s)
    if not pol.full_search and since >= pol.patience:
        return rationale.stalled(pol.min_gain, since)
    if ev.time_up and all_in:
        return rationale.TIME_SPENT
    return ""
