"""What a decision's early stops saved (``search.decision.early_stop_savings``), and the shape
labels and map axes the kinds give the dashboard."""

from __future__ import annotations

import pytest

from search import kinds
from search.decision import early_stop_savings
from search.types import parse_problem

SPEND = {"calibration": {"trials": 1, "gpu_s": 30.0}, "library": {"trials": 4, "gpu_s": 2.0},
         "cutlass": {"trials": 6, "gpu_s": 8.0}, "custom": {"trials": 10, "gpu_s": 25.0},
         "verify": {"trials": 1, "gpu_s": 1.0}}


def test_unrun_trials_are_priced_at_the_jobs_own_custom_trials() -> None:
    # 64 allowed, 10 run at 2.5 s each: 54 left
    assert early_stop_savings(SPEND, 64, full_search=False) == pytest.approx(54 * 2.5)


def test_a_verdict_one_stop_is_priced_at_the_library_trials() -> None:
    spend = {**SPEND, "custom": {"trials": 0, "gpu_s": 0.0}}
    assert early_stop_savings(spend, 64, full_search=False) == pytest.approx(64 * 10.0 / 10)


def test_a_full_search_saves_nothing_and_no_budget_or_no_trial_says_nothing() -> None:
    assert early_stop_savings(SPEND, 64, full_search=True) == 0.0
    assert early_stop_savings(SPEND, None, full_search=False) is None
    assert early_stop_savings({"custom": {"trials": 0, "gpu_s": 0}}, 64, False) is None
    assert early_stop_savings(SPEND, 8, full_search=False) == 0.0  # more run than allowed


@pytest.mark.parametrize("spec,label", [
    ({"m": 64, "n": 48, "k": 80, "dtype": "fp16"}, "64x48x80"),
    ({"m": 64, "n": 48, "k": 80, "batch": 4, "dtype": "bf16"}, "4x64x48x80"),
    ({"kind": "attention", "batch": 8, "heads": 32, "kv_heads": 8, "s_q": 4096,
      "s_kv": 4096, "d": 128, "causal": True}, "b8 h32/kv8 s4096x4096 d128 causal"),
])
def test_shape_labels_leave_the_dtype_out(spec: dict, label: str) -> None:
    problem = parse_problem(spec)
    assert kinds.get(problem.kind).shape_label(problem) == label


def test_map_axes_of_the_kinds(clean_registry: None) -> None:
    assert kinds.get("gemm").axes() == ("m", "n")
    assert kinds.get("attention").axes() == ("s_q", "s_kv")
    import tests.plugins.axpy  # noqa: F401  (registers a kind with one integer field)

    assert kinds.get("axpy").axes() is None
