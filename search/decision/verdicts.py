"""The verdicts' arithmetic: from the evidence to a :class:`Decision` with its picks, speed-up,
spend and rationale (whose sentences are :mod:`search.decision.rationale`'s).

Verdict 1 (:func:`decide_library_sufficient`, :func:`decide_no_custom`) keeps the library on
the roofline's word or for want of a custom tier. Verdict 2 (:func:`decide_after_search`)
adopts a custom kernel only when it beats the library by more than the measured spread; ties
go to the library. The spread of interleaved rounds leaves out each side's fastest and slowest
round when there are five or more (:func:`_rounds_spread`): one disturbed round (a clock dip,
another process on the GPU) must not turn a clear gap into a tie, nor a tie into a win.
:func:`confirmed` rewrites a decision that keeps the library with the pick its interleaved
confirmation against cuBLAS made.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

from search.decision import rationale
from search.decision.actions import Decision, Pick
from search.decision.evidence import Evidence, Trial, Verdict, Verification
from search.decision.stops import CutlassProgress, TierProgress
from search.roofline import Roofline, missing_roofline

__all__ = ["confirmed", "decide_after_search", "decide_library_sufficient", "decide_no_custom",
           "with_notes"]


def _rounds_spread(xs: Sequence[float]) -> float:
    """The spread of a side's round medians: their range, without the fastest and the slowest
    round once there are at least five (the median is the middle round either way)."""
    s = sorted(xs)
    if len(s) >= 5:
        s = s[1:-1]
    return (s[-1] - s[0]) if s else 0.0


def _spread(t: Trial) -> float:
    if t.p20_us is None or t.p80_us is None:
        return 0.0
    return max(0.0, t.p80_us - t.p20_us)


def _pick(t: Trial, rf: Roofline | None, median: float | None = None,
          spread: float | None = None, rel_error: float | None = None) -> Pick:
    m = t.median_us if median is None else median
    return Pick(t.backend, dict(t.config), float(m), _spread(t) if spread is None else spread,
                rf.efficiency(m) if rf else None, t.id, t.precision,
                t.rel_error if rel_error is None else rel_error)


def _spend(ev: Evidence) -> dict[str, dict[str, float]]:
    lib = [t for t in ev.library if t.tier is None]
    cut = [t for t in ev.library if t.tier is not None and t.tier == ev.r.library_tier]
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
                  "p80_us": t.p80_us,
                  "search": t.tier is not None and t.tier == ev.r.library_tier}
                 for t in sorted(ev.library, key=lambda t: t.id))


def _missing(ev: Evidence) -> str:
    """Why the job has no roofline (a clause for the rationale)."""
    if ev.calibration is None and ev.calibration_failed:
        return "the device's calibration failed"
    return missing_roofline(ev.problem, ev.calibration, ev.policy.allow_tf32)


def with_notes(ev: Evidence, cut: CutlassProgress | None, d: Decision) -> Decision:
    """``d`` with the library trials listed, the CUTLASS search (``cut``: its progress, when it
    ran) first among the searches, and the evidence's notes added to its rationale."""
    notes = tuple(ev.library_notes)
    why, tiers = d.rationale, d.tiers
    line = rationale.cutlass_search(ev.r.searched_label, cut) if cut is not None else None
    if cut is not None and line is not None:
        why += f" {line}"
        tiers = (cut.to_dict(), *tiers)
    if notes:
        why = " ".join((why, *notes))
    return replace(d, rationale=why, tiers=tiers, library_trials=_library_trials(ev),
                   notes=notes, baseline=ev.r.baseline)


# -- verdict 1 ---------------------------------------------------------------------------------
def decide_library_sufficient(ev: Evidence, rf: Roofline, lib: Trial, eff: float,
                              held: int = 0) -> Decision:
    """The library reached the threshold (``held``: CUTLASS seeds left unmeasured)."""
    why = rationale.library_sufficient(rf, lib, eff, ev.policy.threshold,
                                       ev.r.label(lib.backend))
    if held:
        why += " " + rationale.seeds_held(ev.r.searched_label, held,
                                          ev.policy.first_cutlass_seeds)
    return Decision(Verdict.LIBRARY_SUFFICIENT, why, _pick(lib, rf), None, rf, 1.0, False,
                    _spend(ev), (), ev.policy.to_dict())


def decide_no_custom(ev: Evidence, rf: Roofline | None, lib: Trial | None) -> Decision:
    """No custom kernel can be searched (none allowed, or no tier applies): the library
    stands."""
    inapplicable = [t for t in ev.tiers if not t.applicable] if ev.custom_allowed else []
    skipped = tuple({"tier": t.name, "trials": 0, "ended": True,
                     "reason": rationale.tier_skipped(t)} for t in inapplicable)
    why = rationale.library_stands(rf, lib, rationale.no_custom(ev.custom_allowed, inapplicable),
                                   ev.r.label(lib.backend) if lib else "", _missing(ev))
    return Decision(Verdict.LIBRARY_SUFFICIENT, why, _pick(lib, rf) if lib else None, None, rf,
                    1.0 if lib else None, False, _spend(ev), skipped, ev.policy.to_dict())


# -- verdict 2 ---------------------------------------------------------------------------------
@dataclass(frozen=True)
class _Outcome:
    """What one way of ending a custom search settled: the verdict, both sides, the sentences
    that say why, and the interleaved reference (cuBLAS) when it ran."""

    verdict: Verdict
    library: Pick | None
    custom: Pick | None
    said: tuple[str, ...]
    verified: bool = False
    reference: Pick | None = None


def decide_after_search(ev: Evidence, rf: Roofline | None, lib: Trial | None,
                        cus: Trial | None, progress: list[TierProgress]) -> Decision:
    """The decision once the custom tiers are over: verdict 2 on the interleaved verification
    when it ran, else on the search medians (or for want of one side)."""
    pol = ev.policy
    tiers = tuple(p.to_dict() for p in progress) + tuple(
        {"tier": t.name, "trials": 0, "ended": True, "reason": rationale.tier_skipped(t)}
        for t in ev.tiers if not t.applicable)
    spend = _spend(ev)
    why = [rationale.roofline(rf, _missing(ev)) + ".",
           rationale.why_searched(rf, lib, pol.threshold, pol.force_custom or pol.full_search,
                                  ev.r.label(lib.backend) if lib else "")]
    ran = rationale.tiers_ran(progress)
    if ran:
        why.append(ran)
    v = ev.verification
    if v is not None and v.custom_id is None:
        v = None  # a library confirmation (see planner._keep_library), not verdict 2
    if cus is None:
        out = _Outcome(Verdict.LIBRARY_WINS_AFTER_SEARCH, _pick(lib, rf) if lib else None, None,
                       (rationale.no_custom_kernel(spend["custom"]["trials"]),))
    elif lib is None:
        said = (rationale.only_custom(cus.median_us),)
        if cus.precision is not None:
            said += (rationale.lowered(cus.precision, cus.rel_error,
                                       pol.bound(cus.precision)),)
        out = _Outcome(Verdict.CUSTOM_WINS, None, _pick(cus, rf), said)
    elif (v is not None and v.status == "ok" and (v.library_id, v.custom_id) == (lib.id, cus.id)
          and v.library_us and v.custom_us):
        out = _interleaved(ev, rf, lib, cus, v)
    else:
        out = _on_search_medians(ev, rf, lib, cus, v)
    speedup = None
    if out.library is not None:
        chosen_us = (out.custom.median_us if out.verdict == Verdict.CUSTOM_WINS and out.custom
                     else out.library.median_us)
        speedup = out.library.median_us / chosen_us
    return Decision(out.verdict, " ".join((*why, *out.said)), out.library, out.custom, rf,
                    speedup, out.verified, spend, tiers, pol.to_dict(),
                    reference=out.reference)


def _interleaved(ev: Evidence, rf: Roofline | None, lib: Trial, cus: Trial, v: Verification
                 ) -> _Outcome:
    """Verdict 2 on the verification's rounds. cuBLAS, when it ran as the reference and was
    faster than the library's pick there, becomes the library's side."""
    said: list[str] = []
    cus, v, runoff = _runoff(ev, cus, v)
    if runoff:
        said.append(runoff)
    lm, cm = statistics.median(v.library_us), statistics.median(v.custom_us)
    ls, cs = _rounds_spread(v.library_us), _rounds_spread(v.custom_us)
    lib_pick, cus_pick = _pick(lib, rf, lm, ls), _pick(cus, rf, cm, cs)
    reference: Pick | None = None
    ref = next((t for t in ev.library if t.id == v.reference_id), None)
    if ref is not None and v.reference_us:
        rm, rs = statistics.median(v.reference_us), _rounds_spread(v.reference_us)
        reference = _pick(ref, rf, rm, rs)
        if rm < lm:  # interleaved, cuBLAS beat the pick the stage timings made
            said.append(rationale.reference_faster(ref, rm, lib, lm))
            lib_pick, lm, ls = reference, rm, rs
        else:
            said.append(rationale.reference_alongside(ref, rm, lib, lm))
    spread = max(ls, cs)
    said.append(rationale.verdict2(len(v.library_us), lm, cm, spread))
    verdict = (Verdict.CUSTOM_WINS if lm - cm > spread else Verdict.LIBRARY_WINS_AFTER_SEARCH)
    if cus.precision is not None:
        # a lowered kernel's error on the re-check's fresh inputs counts too
        errors = [e for e in (cus.rel_error, v.custom_rel_error) if e is not None]
        err = max(errors) if errors else None
        cus_pick = replace(cus_pick, rel_error=err)
        bound = ev.policy.bound(cus.precision)
        if bound is not None and err is not None and err > bound:
            said.append(rationale.lowered_over_bound(cus.precision, err, bound))
            verdict = Verdict.LIBRARY_WINS_AFTER_SEARCH
        elif verdict == Verdict.CUSTOM_WINS:
            said.append(rationale.lowered(cus.precision, err, bound))
    return _Outcome(verdict, lib_pick, cus_pick, tuple(said), verified=True,
                    reference=reference)


def _runoff(ev: Evidence, cus: Trial, v: Verification) -> tuple[Trial, Verification, str]:
    """The custom side after the runoff: the finalist (the search's best or a runner-up timed
    in the same rounds) with the lowest median there, the verification with its rounds and
    error as the custom side's, and the sentence that says so ("" without runners-up)."""
    if not v.runners_up and not v.runners_up_dropped:
        return cus, v, ""
    by_id = {t.id: t for t in ev.custom}
    finalists = [(statistics.median(v.custom_us), cus, v.custom_us, v.custom_rel_error)]
    finalists += [(statistics.median(us), by_id[rid], us, err)
                  for rid, us, err in v.runners_up if us and rid in by_id]
    _, won, rounds, err = min(finalists, key=lambda f: (f[0], f[1].id))
    said = rationale.runoff(ev.r.label(cus.backend), cus, [
        (ev.r.label(t.backend), t, us) for us, t, _, _ in finalists], won,
        [(rid, why) for rid, why in v.runners_up_dropped])
    if won is cus:
        return cus, v, said
    return won, replace(v, custom_id=won.id, custom_us=rounds, custom_rel_error=err), said


def _on_search_medians(ev: Evidence, rf: Roofline | None, lib: Trial, cus: Trial,
                       v: Verification | None) -> _Outcome:
    """No usable verification: it failed, the custom best was too far behind to re-measure,
    or the time ran out (then the search medians decide, beyond their p20-p80 spread)."""
    lib_pick, cus_pick = _pick(lib, rf), _pick(cus, rf)
    keep = Verdict.LIBRARY_WINS_AFTER_SEARCH
    if v is not None and v.status not in (None, "ok"):
        return _Outcome(keep, lib_pick, cus_pick, (rationale.verification_failed(v),))
    if cus.median_us >= lib.median_us * (1 + ev.policy.verify_margin):
        return _Outcome(keep, lib_pick, cus_pick,
                        (rationale.too_far_behind(cus.median_us, lib.median_us),))
    spread = max(_spread(lib), _spread(cus))
    wins = lib.median_us - cus.median_us > spread
    said = (rationale.unverified(cus.median_us, lib.median_us, spread, custom_wins=wins),)
    if wins and cus.precision is not None:
        said += (rationale.lowered(cus.precision, cus.rel_error,
                                   ev.policy.bound(cus.precision)),)
    return _Outcome(Verdict.CUSTOM_WINS if wins else keep, lib_pick, cus_pick, said)


# -- the library confirmation ------------------------------------------------------------------
def confirmed(d: Decision, rf: Roofline | None, pair: tuple[Trial, Trial], v: Verification,
              baseline: str) -> Decision:
    """``d`` after the confirmation ``v`` of ``pair`` (other, cuBLAS): its library pick is the
    faster of the two in the rounds, its ``reference`` cuBLAS in them, and its rationale says
    so. A failed confirmation (the other kernel wrong on the re-check, a crash) leaves cuBLAS,
    at its stage timing, the pick, with no reference."""
    other, cublas = pair
    if v.status != "ok" or not v.library_us or not v.reference_us:
        return replace(d, library=_pick(cublas, rf), reference=None,
                       rationale=f"{d.rationale} "
                                 f"{rationale.confirmation_failed(baseline, other, v)}")
    om, ospread = statistics.median(v.library_us), _rounds_spread(v.library_us)
    cm, cspread = statistics.median(v.reference_us), _rounds_spread(v.reference_us)
    ref = _pick(cublas, rf, cm, cspread)
    pick = _pick(other, rf, om, ospread) if om < cm else ref
    said = rationale.confirmation(baseline, other, len(v.library_us), om, ospread, cm, cspread)
    return replace(d, library=pick, reference=ref, rationale=f"{d.rationale} {said}")
