"""Every sentence a decision carries: its rationale, and why each search ended.

The arithmetic that chooses between them is in :mod:`search.decision.verdicts` and
:mod:`search.decision.stops`; the words are here, so the text reads as one voice and is edited
in one place. Times are in microseconds, ratios as fractions.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING

from search.decision.evidence import TierPlan, Trial, Verification
from search.roofline import Roofline

if TYPE_CHECKING:
    from search.decision.stops import CutlassProgress, TierProgress

# -- why a search ended ------------------------------------------------------------------------
SPACE_EXHAUSTED = "space exhausted: every feasible configuration was tried"
TIME_SPENT = "time budget spent"
THRESHOLD_REACHED = "the library reached the threshold"


def budget_spent(budget: int) -> str:
    return f"budget of {budget} trials spent"


def stalled(min_gain: float, since: int) -> str:
    return f"stalled: no gain over {min_gain:.0%} in the last {since} trials"


def not_promising(done: int, best: Trial | None, lib: Trial, promise_gap: float) -> str:
    gap = "no correct kernel" if best is None else (
        f"best {best.median_us:.1f} us is {best.median_us / lib.median_us - 1:.0%} "
        f"behind the library's {lib.median_us:.1f} us")
    return f"not promising: after {done} trials, {gap} (gap allowed {promise_gap:.0%})"


def tier_skipped_gap(max_gain: float, before: float, promise_gap: float, lib_us: float) -> str:
    return (f"skipped: even a {max_gain:.0%} gain on the best so far ({before:.1f} us) would "
            f"leave it over {promise_gap:.0%} behind the library's {lib_us:.1f} us")


def tier_skipped(tier: TierPlan) -> str:
    return f"skipped: {tier.reason}"


def cutlass_skipped(name: str, seeds: Trial, first: Trial, max_gain: float) -> str:
    return (f"skipped: the first stage's best {name} op ({seeds.median_us:.1f} us) is "
            f"{seeds.median_us / first.median_us - 1:.0%} behind {first.backend}'s "
            f"{first.median_us:.1f} us; even a {max_gain:.0%} gain would not make it faster")


def cutlass_exhausted(compile_s: float, budget_s: float) -> str:
    return ("nothing untried left within the compile budget "
            f"({compile_s:.0f} of {budget_s:.0f} s compiled)")


# -- the roofline and the library --------------------------------------------------------------
def _num(x: float) -> str:
    """A rate as text: whole numbers from 100 up, else three significant digits (a CPU's
    0.00281 TFLOP/s must not read as 0)."""
    return f"{x:.0f}" if x >= 100 else f"{x:.3g}"


def roofline(rf: Roofline | None, missing: str = "") -> str:
    """The roofline (a clause); ``missing``: why there is none, when ``rf`` is None."""
    if rf is None:
        return f"no roofline ({missing or 'no device calibration with a peak for these inputs'})"
    peak = f" at {_num(rf.peak_tflops)} TFLOP/s" if rf.peak_tflops else ""
    if rf.peak_tflops and rf.peak_low_tflops and rf.peak_low_tflops < rf.peak_tflops * 0.995:
        peak += f" (lowest calibration pass {_num(rf.peak_low_tflops)})"
    if rf.lowered_to:
        peak += f", the {rf.lowered_to} peak: the policy allows it"
    bw = f" at {_num(rf.bandwidth_gbs)} GB/s" if rf.bandwidth_gbs else ""
    return (f"{rf.bound}-bound: the roofline allows {rf.attainable_us:.1f} us "
            f"(compute {rf.compute_us:.1f} us{peak}, memory {rf.memory_us:.1f} us{bw})")


def share(rf: Roofline | None, us: float, threshold: float | None = None) -> str:
    """How a time stands against the roofline (a clause): its share of the attainable, at the
    roofline when a little under it, and never a share when it is far under (the calibration
    is then wrong for these inputs, and the kernel's efficiency unknown). A share just under
    ``threshold`` is cut to a tenth of a percent, never rounded up to the threshold it missed
    ("89.9%", not "90%", against 90%)."""
    if rf is None:
        return "no roofline to judge it by"
    floor = rf.attainable_us
    if rf.refuted_by(us):
        return (f"{1 - us / floor:.0%} under the {floor:.1f} us the roofline allows: the "
                "calibration underestimates this device for these inputs, so its efficiency "
                "is unknown (refresh the calibration: POST /v1/calibrations/refresh)")
    if rf.under_floor(us):
        return (f"at the roofline ({1 - us / floor:.0%} under its {floor:.1f} us, within the "
                "calibration's noise)")
    eff = floor / us
    if threshold is not None and eff < threshold <= round(eff, 2):
        return f"{math.floor(eff * 1000) / 10:.1f}% of the attainable"
    return f"{eff:.0%} of the attainable"


def library_sufficient(rf: Roofline, lib: Trial, eff: float, threshold: float,
                       name: str) -> str:
    """Verdict 1: at or above the threshold, or within the calibration's noise of it;
    ``name``: how the library's backend is written on this device."""
    if eff >= threshold:
        return (f"{roofline(rf)}; {name} takes {lib.median_us:.1f} us, "
                f"{share(rf, lib.median_us)}, at or above the {threshold:.0%} threshold: "
                "the library is sufficient and no custom kernel was tried.")
    high = rf.efficiency_at_low_peak(lib.median_us) or eff
    return (f"{roofline(rf)}; {name} takes {lib.median_us:.1f} us, "
            f"{eff:.1%} of the attainable, and {high:.1%} at the lowest peak a calibration "
            f"pass measured ({_num(rf.peak_low_tflops or 0)} TFLOP/s): the {threshold:.0%} "
            "threshold lies within the calibration's own noise, a tie, which goes to the "
            "library: it is sufficient and no custom kernel was tried.")


def seeds_held(name: str, held: int, first_cutlass_seeds: int) -> str:
    seeds = f"{held} other {name} seeds were" if held > 1 else f"other {name} seed was"
    return (f"The {seeds} not measured: the library reached the threshold without "
            f"{'them' if held > 1 else 'it'} (policy first_cutlass_seeds="
            f"{first_cutlass_seeds}).")


def no_custom(custom_allowed: bool, inapplicable: Sequence[TierPlan]) -> str:
    """Why no custom kernel can be searched (a clause)."""
    if not custom_allowed:
        return "the job allows no custom backend"
    tiers_of: dict[str, list[str]] = {}
    for t in inapplicable:
        tiers_of.setdefault(t.reason, []).append(t.name)
    return "no custom tier applies (" + "; ".join(
        f"{', '.join(names)}: {reason}" for reason, names in tiers_of.items()) + ")"


def library_stands(rf: Roofline | None, lib: Trial | None, why_no_custom: str, name: str,
                   missing: str = "") -> str:
    if lib is None or lib.median_us is None:
        return f"no library candidate ran correctly and {why_no_custom}."
    return (f"{roofline(rf, missing)}; {name} takes {lib.median_us:.1f} us "
            f"({share(rf, lib.median_us)}); {why_no_custom}, so the library stands.")


# -- the library confirmation ------------------------------------------------------------------
def confirmation_failed(baseline: str, other: Trial, v: Verification) -> str:
    return (f"The interleaved confirmation of {other.backend} against {baseline} "
            f"failed ({v.status}: {v.error or 'no detail'}): {baseline} is the library's pick.")


def confirmation(baseline: str, other: Trial, rounds: int, other_us: float,
                 other_spread: float, cublas_us: float, cublas_spread: float) -> str:
    if other_us < cublas_us:
        return (f"Interleaved over {rounds} rounds, {other.backend} took {other_us:.2f} us "
                f"(spread {other_spread:.2f}) and {baseline} {cublas_us:.2f} us (spread "
                f"{cublas_spread:.2f}): {cublas_us / other_us:.3f}x, {other.backend} is the "
                "library's pick.")
    return (f"Interleaved over {rounds} rounds, {baseline} took {cublas_us:.2f} us (spread "
            f"{cublas_spread:.2f}) and {other.backend} {other_us:.2f} us (spread "
            f"{other_spread:.2f}): {baseline} is the library's pick.")


# -- after a custom search ---------------------------------------------------------------------
def why_searched(rf: Roofline | None, lib: Trial | None, threshold: float, forced: bool,
                 name: str) -> str:
    if lib is None or lib.median_us is None:
        return "no library candidate ran correctly (or none was allowed)."
    said = f"{name} takes {lib.median_us:.1f} us ({share(rf, lib.median_us, threshold)}"
    if forced:
        return f"{said}); the custom stage was forced by the job's policy."
    eff = rf.efficiency(lib.median_us) if rf is not None else None
    if eff is not None and eff < threshold:
        said += f", under the {threshold:.0%} threshold"
    return f"{said}), so custom kernels were searched."


def tiers_ran(progress: Sequence[TierProgress]) -> str | None:
    ran = ", ".join(f"{p.name}: {p.created} trials ({p.reason or 'open'})" for p in progress)
    return f"Tiers - {ran}." if ran else None


def no_custom_kernel(trials: int) -> str:
    return f"No custom kernel ran correctly in {trials} trials."


def only_custom(custom_us: float) -> str:
    return f"The custom kernel ({custom_us:.1f} us) is the only correct one."


def reference_faster(ref: Trial, ref_us: float, lib: Trial, lib_us: float) -> str:
    return (f"Interleaved, {ref.backend} ({ref_us:.2f} us) was faster than the library's "
            f"pick {lib.backend} ({lib_us:.2f} us): it is the library's side.")


def reference_alongside(ref: Trial, ref_us: float, lib: Trial, lib_us: float) -> str:
    return (f"{ref.backend} ran in the same rounds for reference: {ref_us:.2f} us against the "
            f"library's pick {lib.backend} at {lib_us:.2f} us.")


def runoff(best_label: str, best: Trial, finalists: list[tuple[str, Trial, float]],
           won: Trial, dropped: list[tuple[int | None, str]]) -> str:
    """The runoff among custom finalists: each one's search median and median in the rounds,
    the winner, and any finalist left out of the rounds with why."""
    parts = [f"{label} #{t.id}: {t.median_us:.2f} us in the search, {us:.2f} in the rounds"
             for label, t, us in finalists]
    head = (f"Runoff: {len(finalists)} custom finalists within the runoff margin of the "
            f"search's best re-measured in the same rounds ({'; '.join(parts)})")
    if won is best:
        tail = f"; the search's best, {best_label} #{best.id}, stays the custom pick."
    else:
        tail = (f"; #{won.id} was the fastest there and is the custom pick instead of "
                f"#{best.id}.")
    out = head + tail
    for rid, why in dropped:
        out += f" Finalist #{rid} was left out of the rounds: {why}."
    return out


def verdict2(rounds: int, lib_us: float, custom_us: float, spread: float) -> str:
    """Verdict 2 on interleaved rounds: custom wins beyond the spread, else the library."""
    head = (f"Interleaved over {rounds} rounds the custom kernel took {custom_us:.2f} us vs "
            f"the library's {lib_us:.2f} us")
    if lib_us - custom_us > spread:
        return (f"{head}: {lib_us / custom_us:.3f}x, a gap of {lib_us - custom_us:.2f} us over "
                f"the measured spread of {spread:.2f} us.")
    if custom_us < lib_us:
        return (f"{head}, within the measured spread of {spread:.2f} us: a tie, which goes to "
                "the library.")
    return f"{head}: the library is faster."


def lowered(precision: str, rel_error: float | None, bound: float | None) -> str:
    """The custom kernel computes in a lower precision the policy allows."""
    err = f"{rel_error:.3g}" if rel_error is not None else "unknown"
    within = f", within the policy's bound of {bound:.3g}" if bound is not None else ""
    return (f"The custom kernel computes in {precision} (its inputs quantised inside the timed "
            f"call): measured relative error {err}{within}.")


def lowered_over_bound(precision: str, rel_error: float, bound: float) -> str:
    return (f"On the verification's fresh inputs the custom kernel's error ({precision}) was "
            f"{rel_error:.3g}, over the policy's bound of {bound:.3g}: the library is kept.")


def verification_failed(v: Verification) -> str:
    return (f"The verification failed ({v.status}: {v.error or 'no detail'}); "
            "the library is kept.")


def too_far_behind(custom_us: float, lib_us: float) -> str:
    return (f"The best custom kernel took {custom_us:.1f} us vs the library's {lib_us:.1f} us "
            f"({custom_us / lib_us:.2f}x slower); too far behind to be worth re-measuring.")


def unverified(custom_us: float, lib_us: float, spread: float, custom_wins: bool) -> str:
    """The search medians decide (the time budget left no verification)."""
    if custom_wins:
        return (f"Not re-measured (time budget spent); on the search medians the custom "
                f"kernel took {custom_us:.1f} us vs {lib_us:.1f} us, beyond the p20-p80 "
                f"spread of {spread:.2f} us.")
    return (f"Not re-measured (time budget spent); the custom kernel's {custom_us:.1f} us vs "
            f"{lib_us:.1f} us is within the spread of the measurements: a tie goes to the "
            "library.")


# -- the CUTLASS search, summarised -----------------------------------------------------------
def cutlass_search(name: str, cut: CutlassProgress) -> str | None:
    """The library search's line in the rationale (None: it neither ran nor was skipped)."""
    if cut.created:
        best = f"best {cut.best_us:.1f} us" if cut.best_us is not None else "none ran correctly"
        return (f"{name} search (library side): {cut.created} trials, {best}, "
                f"{cut.compile_s:.0f} of {cut.compile_budget_s:.0f} compile-s "
                f"({cut.reason or 'open'}).")
    if cut.reason.startswith("skipped"):
        return f"{name} search (library side): {cut.reason}."
    return None
