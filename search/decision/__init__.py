"""The decision loop: is the library sufficient, or does a custom kernel win? With evidence.

A state machine with no I/O. The service gathers what is known about one job into an
:class:`Evidence` (calibration, every library and custom trial with its result, the interleaved
verification) and asks :func:`plan` what to do next; it carries out the :class:`Action` s
(create candidates, cancel pending ones, store the :class:`Decision`) and asks again when a
result arrives. Because the state is *derived* from stored results every time, a restarted
service, or another replica, picks up exactly where the last one was.

One role per module:

- :mod:`~search.decision.policy`: :class:`Policy`, each field with its range and meaning;
- :mod:`~search.decision.evidence`: the vocabulary (:class:`Evidence`, :class:`Trial`, ...);
- :mod:`~search.decision.actions`: what a plan asks for, and the :class:`Decision`;
- :mod:`~search.decision.stops`: the stop rules of the custom tiers and the CUTLASS search;
- :mod:`~search.decision.planner`: the state machine, :func:`plan`, one function per stage;
- :mod:`~search.decision.verdicts`: verdicts 1 and 2 and the library confirmation;
- :mod:`~search.decision.rationale`: every sentence a decision carries;
- :mod:`~search.decision.savings`: the GPU-seconds a decision's early stops saved.

Callers write ``from search import decision`` and ``decision.plan(ev)``.
"""

from __future__ import annotations

from search.decision.actions import (
    Action,
    Calibrate,
    Decide,
    Decision,
    MeasureLibrary,
    Pick,
    Plan,
    Search,
    StopTier,
    Verify,
    Wait,
)
from search.decision.evidence import (
    Evidence,
    Roles,
    Stage,
    TierPlan,
    Trial,
    Verdict,
    Verification,
)
from search.decision.planner import plan
from search.decision.policy import Bounds, Policy
from search.decision.savings import early_stop_savings
from search.decision.stops import (
    CUTLASS_SEARCH_MAX_GAIN,
    CutlassProgress,
    TierProgress,
    cutlass_progress,
    tier_progress,
)

__all__ = [
    "CUTLASS_SEARCH_MAX_GAIN", "Action", "Bounds", "Roles", "Calibrate", "CutlassProgress",
    "Decide", "Decision", "Evidence", "MeasureLibrary", "Pick", "Plan", "Policy", "Search",
    "Stage", "StopTier", "TierPlan", "TierProgress", "Trial", "Verdict", "Verification",
    "Verify", "Wait", "cutlass_progress", "early_stop_savings", "plan", "tier_progress",
]
