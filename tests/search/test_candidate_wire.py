"""``Candidate`` on the wire: a kernel names a backend, a task names a task, never both."""

from __future__ import annotations

import pytest

from search.kinds.gemm.spec import GemmProblem
from search.types import Candidate, Task

PROBLEM = GemmProblem(64, 64, 64)


def test_a_task_travels_as_a_task_with_no_backend() -> None:
    c = Candidate.of_task(PROBLEM, Task.VERIFY.value, {"rounds": 5}, id=7)
    wire = c.to_dict()
    assert wire["task"] == "verify" and wire["backend"] is None
    assert Candidate.from_dict(wire) == c and Candidate.from_dict(wire).config == {"rounds": 5}
    kernel = Candidate(PROBLEM, "cublas", {}, 8)
    assert kernel.to_dict()["task"] is None and Candidate.from_dict(kernel.to_dict()) == kernel


@pytest.mark.parametrize(("backend", "task"), [("cublas", "verify"), (None, None)])
def test_a_candidate_is_a_kernel_or_a_task(backend: str | None, task: str | None) -> None:
    with pytest.raises(ValueError, match="backend or a task"):
        Candidate(PROBLEM, backend, {}, task=task)
