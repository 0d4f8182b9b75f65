"""The state machine: :func:`plan` reads a job's :class:`Evidence` and says what to do next.

Each stage is one function that answers with a :class:`Plan`, or ``None`` when the job is past
it; the first stage that answers wins::

    library     calibrate; cuBLAS and the CUTLASS seeds (without ``tune_library``, a first wave
                of cuBLAS and the best-ranked seeds, the rest only if it falls short)
    verdict 1   the library's best reaches the threshold of the roofline: library_sufficient
                (with ``tune_library``, asked once the CUTLASS search has ended)
    cutlass     the CUTLASS search, library side, until its own stop rules end it
    no custom   the job allows no custom backend, or no tier applies: the library stands
    custom      the tiers in order, each stopped by :mod:`search.decision.stops`
    verdict 2   library best and custom best re-measured interleaved; then the decision

A decision that keeps the library without a verdict 2 is first confirmed: its best kernel
other than cuBLAS and cuBLAS are re-measured interleaved (:func:`_keep_library`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import Any

from search.decision import rationale
from search.decision.actions import (
    Action,
    Calibrate,
    Decide,
    Decision,
    MeasureLibrary,
    Plan,
    Search,
    StopTier,
    Verify,
    Wait,
)
from search.decision.evidence import Evidence, Stage, Trial
from search.decision.policy import Policy
from search.decision.stops import (
    CutlassProgress,
    TierProgress,
    best_trial,
    cutlass_progress,
    tier_progress,
)
from search.decision.verdicts import (
    confirmed,
    decide_after_search,
    decide_library_sufficient,
    decide_no_custom,
    with_notes,
)
from search.roofline import Roofline, roofline
from search.types import config_key

__all__ = ["plan"]


def plan(ev: Evidence) -> Plan:
    """What to do next for the job described by ``ev``."""
    pol = ev.policy
    actions: list[Action] = []
    need_cal = ev.calibration is None and not ev.calibration_failed
    if need_cal and not ev.calibration_pending:
        actions.append(Calibrate())
    skip_verdict1 = pol.force_custom or pol.full_search or not ev.library_configs
    wanted, held = _library_wanted(ev, skip_verdict1, need_cal)
    if wanted:
        actions.append(MeasureLibrary(wanted))
    # the first stage only: the CUTLASS search's trials are library too, but verdict 1 must
    # not wait for them (a search result over the threshold ends the job at once)
    lib_pending = any(not t.done for t in ev.library if t.tier is None) or bool(wanted)
    if not skip_verdict1 and (lib_pending or need_cal):
        return Plan(Stage.LIBRARY, (*actions, Wait("waiting for the library and calibration")))
    s = _Situation(ev, actions, skip_verdict1, held, lib_pending)
    stages: tuple[Callable[[_Situation], Plan | None], ...] = (
        _verdict1, _cutlass_search, _no_custom_tier, _custom_tiers)
    for stage in stages:
        answer = stage(s)
        if answer is not None:
            return answer
    return _verdict2(s)


@dataclass(frozen=True)
class _Situation:
    """One :func:`plan` call past the first stage: the evidence, the actions asked so far (a
    stage may add to them), and what the later stages derive from the evidence."""

    ev: Evidence
    actions: list[Action]
    skip_verdict1: bool
    #: CUTLASS seeds held back because the first wave answers verdict 1
    held: int
    #: first-stage library candidates not measured yet
    lib_pending: bool

    @cached_property
    def rf(self) -> Roofline | None:
        return _roofline(self.ev)

    @cached_property
    def lib(self) -> Trial | None:
        return best_trial(self.ev.library)

    @cached_property
    def lib_eff(self) -> float | None:
        return self.rf.efficiency(self.lib.median_us) if (self.rf and self.lib) else None

    @cached_property
    def cut(self) -> CutlassProgress | None:
        return cutlass_progress(self.ev)

    @cached_property
    def cut_out(self) -> bool:
        """CUTLASS search trials in flight."""
        tier = self.ev.r.library_tier
        return tier is not None and any(not t.done for t in self.ev.library if t.tier == tier)

    @cached_property
    def tuning(self) -> bool:
        """With tune_library the CUTLASS search is part of the library stage: verdict 1 waits
        for it to end (in-flight trials included) even when the library already reads
        sufficient."""
        return (not self.skip_verdict1 and self.ev.policy.tune_library and self.cut is not None
                and (not self.cut.ended or self.cut_out))

    @cached_property
    def progress(self) -> list[TierProgress]:
        return tier_progress(self.ev)

    def then(self, stage: Stage, *more: Action) -> Plan:
        return Plan(stage, (*self.actions, *more))


# -- the stages, in order ----------------------------------------------------------------------
def _verdict1(s: _Situation) -> Plan | None:
    pol = s.ev.policy
    if (s.skip_verdict1 or s.tuning or s.rf is None or s.lib is None or s.lib_eff is None
            or not _reaches(s.rf, s.lib.median_us, pol.threshold)):
        return None
    if s.cut is not None and not s.cut.ended and _confirmation(s.ev) is not None:
        # tune_library=False: the search is moot while the confirmation runs
        s.actions.append(StopTier(s.cut.name, rationale.THRESHOLD_REACHED))
    return _keep_library(s, decide_library_sufficient(s.ev, s.rf, s.lib, s.lib_eff, s.held))


def _cutlass_search(s: _Situation) -> Plan | None:
    """Library side, so before any custom tier, and it raises the library best the custom
    kernels must beat (without tune_library, verdict 1 is asked again on each result; with it,
    once the search has ended)."""
    ev, cut = s.ev, s.cut
    if cut is None:
        return None
    if cut.ended and s.cut_out:
        s.actions.append(StopTier(cut.name, cut.reason))
        if s.tuning:  # verdict 1 waits for the search's last results
            return s.then(Stage.CUTLASS, Wait("waiting for the CUTLASS search"))
    if cut.ended:
        return None
    if s.lib_pending:  # its seeds are the first stage's: never propose one twice
        return s.then(Stage.LIBRARY, Wait("waiting for the library"))
    if (not ev.time_up and cut.name not in ev.exhausted_tiers
            and cut.created < (cut.budget or 0) and (cut.room is None or cut.room > 0)):
        left = max(0.0, ev.policy.cutlass_compile_s - cut.compile_s)
        return s.then(Stage.CUTLASS, Search(cut.name, cut.room, left))
    return s.then(Stage.CUTLASS, Wait("waiting for the CUTLASS search"))


def _no_custom_tier(s: _Situation) -> Plan | None:
    """No custom backend allowed, or no tier applies (fp8: no Triton template)."""
    ev = s.ev
    no_tier = bool(ev.tiers) and not any(t.applicable for t in ev.tiers)
    if ev.custom_allowed and not no_tier:
        return None
    if s.lib_pending:
        return s.then(Stage.LIBRARY, Wait("waiting for the library"))
    return _keep_library(s, decide_no_custom(ev, s.rf, s.lib))


def _custom_tiers(s: _Situation) -> Plan | None:
    """The active tier: the first one not over whose budget is not all out (a tier whose budget
    is all created no longer holds the next one back, so the GPU never idles at a tier
    boundary). It may be waiting for results its probe or stall rule needs."""
    ev = s.ev
    for p in s.progress:
        if p.ended and any(not t.done for t in ev.custom if t.tier == p.name):
            s.actions.append(StopTier(p.name, p.reason))
    active = next((p for p in s.progress if not p.ended and p.name not in ev.exhausted_tiers
                   and (p.budget is None or p.created < p.budget)), None)
    if active is not None and not ev.time_up:
        if active.room is None or active.room > 0:
            return s.then(Stage.CUSTOM, Search(active.name, active.room))
        return s.then(Stage.CUSTOM, Wait(f"waiting for {active.name} results"))
    if any(not t.done for t in ev.trials) or s.lib_pending:
        return s.then(Stage.CUSTOM, Wait("waiting for custom trials"))
    return None


def _verdict2(s: _Situation) -> Plan:
    """Re-measure a custom best close enough to the library, then decide. With no verdict 2
    (no custom kernel, or the best too far behind) the library stands, and its pick is
    confirmed against cuBLAS as after verdict 1."""
    ev, lib, pol = s.ev, s.lib, s.ev.policy
    cus = best_trial(ev.custom)
    if cus is None or lib is None or ev.time_up \
            or cus.median_us >= lib.median_us * (1 + pol.verify_margin):
        return _keep_library(s, decide_after_search(ev, s.rf, lib, cus, s.progress))
    v = ev.verification
    if v is None or (v.library_id, v.custom_id) != (lib.id, cus.id):
        cublas = best_trial([t for t in ev.library if t.backend == ev.r.baseline])
        ref = cublas if cublas is not None and lib.backend != ev.r.baseline else None
        return s.then(Stage.VERIFY, Verify(lib, cus, pol.verify_rounds, ref,
                                           runners_up(ev.custom, cus, pol)))
    if v.status is None:
        return s.then(Stage.VERIFY, Wait("waiting for the verification"))
    return Plan(Stage.DECIDED, (Decide(with_notes(
        ev, s.cut, decide_after_search(ev, s.rf, lib, cus, s.progress))),))


def runners_up(custom: Sequence[Trial], best: Trial, pol: Policy) -> tuple[Trial, ...]:
    """The runoff's other finalists: the fastest correct custom trials after ``best``, of
    distinct configurations, within ``pol.runoff_margin`` of its search median, at most
    ``pol.runoff - 1`` of them."""
    bound = best.median_us * (1 + pol.runoff_margin)
    seen = {(best.backend, config_key(best.config))}
    out: list[Trial] = []
    for t in sorted((t for t in custom if t.ok and t.id != best.id),
                    key=lambda t: (t.median_us, t.id)):
        if len(out) >= pol.runoff - 1 or t.median_us > bound:
            break
        key = (t.backend, config_key(t.config))
        if key not in seen:
            seen.add(key)
            out.append(t)
    return tuple(out)


# -- the library confirmation ------------------------------------------------------------------
def _keep_library(s: _Situation, d: Decision) -> Plan:
    """The plan for a decision ``d`` that keeps the library without a verdict 2: first the
    library confirmation (:func:`_confirmation`) is asked for and waited for, then ``d`` is
    decided with the pick the confirmation's rounds made (see :func:`verdicts.confirmed`)."""
    ev = s.ev
    pair = _confirmation(ev)
    if pair is not None:
        other, cublas = pair
        v = ev.verification
        if v is None or v.custom_id is not None or (v.library_id, v.reference_id) != (
                other.id, cublas.id):
            return s.then(Stage.VERIFY, Verify(other, None, ev.policy.verify_rounds, cublas))
        if v.status is None:
            return s.then(Stage.VERIFY, Wait("waiting for the library confirmation"))
        d = confirmed(d, s.rf, pair, v, s.ev.r.baseline_label)
    return Plan(Stage.DECIDED, (Decide(with_notes(ev, s.cut, d)),))


def _confirmation(ev: Evidence) -> tuple[Trial, Trial] | None:
    """The library kernels a decision that keeps the library re-measures interleaved
    (``policy.confirm_library``): the best correct library kernel other than cuBLAS and
    cuBLAS's best, when the other is faster than cuBLAS or within ``verify_margin`` of it in
    the stage timings. None: nothing to confirm (no cuBLAS, no other kernel, the other far
    behind, the policy off, or the time is up)."""
    pol = ev.policy
    if not pol.confirm_library or ev.time_up:
        return None
    cublas = best_trial([t for t in ev.library if t.backend == ev.r.baseline])
    other = best_trial([t for t in ev.library if t.backend != ev.r.baseline])
    if cublas is None or other is None:
        return None
    if other.median_us > cublas.median_us * (1 + pol.verify_margin):
        return None
    return other, cublas


# -- the first stage ---------------------------------------------------------------------------
def _key(backend: str, config: Mapping[str, Any]) -> tuple[str, str]:
    """What identifies a library candidate: its backend and configuration."""
    return backend, config_key(dict(config))


def _library_wanted(ev: Evidence, skip_verdict1: bool, need_cal: bool
                    ) -> tuple[tuple[tuple[str, Mapping[str, Any]], ...], int]:
    """The library candidates to create now, and how many CUTLASS seeds are held back because
    the first wave (without ``tune_library``) answers verdict 1."""
    have = {_key(t.backend, t.config) for t in ev.library}
    wanted = tuple((b, c) for b, c in ev.library_configs if _key(b, c) not in have)
    held = 0
    if not skip_verdict1 and not ev.policy.tune_library:
        first = _first_wave(ev)
        if _first_wave_answers(ev, first, need_cal):
            held = sum(_key(b, c) not in first for b, c in wanted)
            wanted = tuple((b, c) for b, c in wanted if _key(b, c) in first)
    return wanted, held


def _first_wave(ev: Evidence) -> set[tuple[str, str]]:
    """The keys of the first stage's first wave: cuBLAS and the ``policy.first_cutlass_seeds``
    best-ranked CUTLASS seeds (``library_configs`` lists them in rank order)."""
    seeds = [_key(b, c) for b, c in ev.library_configs if b == ev.r.searched]
    rest = {_key(b, c) for b, c in ev.library_configs if b != ev.r.searched}
    return rest | set(seeds[:ev.policy.first_cutlass_seeds])


def _first_wave_answers(ev: Evidence, first: set[tuple[str, str]], need_cal: bool) -> bool:
    """Whether the other CUTLASS seeds wait for the first wave: the job has cuBLAS and seeds
    beyond the wave, and the wave is still being measured (or the calibration is), or it is
    measured and reaches the threshold. Once it falls short, or cannot be judged (nothing ran
    correctly, or there is no roofline), every seed is measured: one may be the library's
    best, and the verdict is asked on all of them."""
    everything = {_key(b, c) for b, c in ev.library_configs}
    if first == everything or not any(b != ev.r.searched for b, _ in first):
        return False
    measured = [t for t in ev.library if t.tier is None and _key(t.backend, t.config) in first]
    if len(measured) < len(first) or any(not t.done for t in measured) or need_cal:
        return True
    rf = _roofline(ev)
    best = best_trial(measured)
    return bool(rf and best and _reaches(rf, best.median_us, ev.policy.threshold))


def _roofline(ev: Evidence) -> Roofline | None:
    """The job's roofline: at the peak of the fastest precision its kernels may compute in
    (the input's, tf32 where allowed, and a lower one an applicable tier computes in because
    the policy allows it: a bf16 library at its own peak is not sufficient when fp8 kernels
    are allowed and could take half the time)."""
    lower = tuple(t.precision for t in ev.tiers if t.applicable and t.precision)
    return roofline(ev.problem, ev.calibration, ev.policy.allow_tf32, lower)


def _reaches(rf: Roofline | None, us: float | None, threshold: float) -> bool:
    """Verdict 1's test: a library time ``us`` reaches the threshold, at the calibrated peak
    or within the calibration's own noise (at its lowest pass's peak): the calibration cannot
    tell that library from one at the threshold, and a tie goes to the library."""
    eff = rf.efficiency_at_low_peak(us) if rf is not None else None
    return eff is not None and eff >= threshold
