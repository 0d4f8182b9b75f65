"""The correctness tolerance is tight: a finite result just outside it is a wrong result.

The kernel is FAKE: it writes the float64 reference scaled by ``1 + f`` into the output, so its
``rel_error`` is ``f`` (fp32 output rounding adds ~1e-7, far below the margins used here).
"""

from __future__ import annotations

import pytest

from kernel_templates import registry
from kernel_templates.gemm.reference import reference_for, tolerance_for
from search.kinds.gemm.spec import GemmProblem
from search.types import Candidate, Measurement, Status
from workers.execute import execute

PROBLEM = GemmProblem(m=32, n=32, k=64, dtype="fp32")
OPTS = {"interpret": True, "target_ms": 5.0, "warmup_ms": 1.0}


def _scaled(factor: float):
    """A FAKE kernel factory: output = reference * factor."""

    def factory(candidate, inputs):
        def call():
            inputs.out.copy_((reference_for(inputs) * factor).to(inputs.out.dtype))
            return inputs.out
        return call

    return factory


def _run(monkeypatch: pytest.MonkeyPatch, factor: float) -> Measurement:
    registry.backends("gemm")  # load the built-in GEMM kernels, then replace one
    monkeypatch.setitem(registry.FACTORIES, ("gemm", "cublas"), _scaled(factor))
    cand = Candidate(problem=PROBLEM, backend="cublas", config={})
    return Measurement.from_dict(execute(cand.to_dict(), OPTS))


def test_just_outside_tolerance_is_wrong_result(monkeypatch: pytest.MonkeyPatch) -> None:
    tol = tolerance_for(PROBLEM, {})
    m = _run(monkeypatch, 1 + 2 * tol)
    assert m.status == Status.WRONG_RESULT, m.error
    assert m.rel_error == pytest.approx(2 * tol, rel=1e-2)
    assert m.median_us is None


def test_just_inside_tolerance_passes(monkeypatch: pytest.MonkeyPatch) -> None:
    tol = tolerance_for(PROBLEM, {})
    m = _run(monkeypatch, 1 + 0.5 * tol)
    assert m.status == Status.OK, m.error
    assert m.rel_error == pytest.approx(0.5 * tol, rel=1e-2)
    assert m.median_us is not None and m.median_us > 0
