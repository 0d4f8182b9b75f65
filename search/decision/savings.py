"""What a decision's early stops saved: the GPU-seconds of the trials its budget allowed and
the search did not run.

An estimate, stated as one: the trials the job's ``max_trials`` allowed beyond the custom
trials it measured, each at the mean GPU-seconds (compile + benchmark) of a trial the job did
measure: a custom trial where it ran any, else a library one (a job that stopped at verdict 1
ran no custom trial). A full search stops only when its budget, its space or its clock runs
out, so it saves nothing by definition.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

__all__ = ["early_stop_savings"]


def early_stop_savings(spend: Mapping[str, Mapping[str, Any]], max_trials: int | None,
                       full_search: bool) -> float | None:
    """GPU-seconds the early stops left unspent (``spend``: a decision's stage -> trials,
    gpu_s); None without a trial budget or without one measured trial to price the rest."""
    if max_trials is None:
        return None
    if full_search:
        return 0.0
    custom = spend.get("custom") or {}
    ran = int(custom.get("trials") or 0)
    left = max(0, int(max_trials) - ran)
    if ran:
        per_trial = float(custom.get("gpu_s") or 0.0) / ran
    else:
        sides = [spend.get(s) or {} for s in ("library", "cutlass")]
        trials = sum(int(s.get("trials") or 0) for s in sides)
        if not trials:
            return None
        per_trial = sum(float(s.get("gpu_s") or 0.0) for s in sides) / trials
    return round(left * per_trial, 3)
