"""``parse_problem``: the one place a problem's wire form becomes a value."""

from __future__ import annotations

import pytest

from search.kinds.gemm.spec import GemmProblem
from search.types import ProblemError, parse_problem


def test_a_problem_round_trips_through_its_wire_form() -> None:
    p = GemmProblem(64, 128, 256, dtype="fp16", layout_b="col")
    assert parse_problem(p.to_dict()) == p
    assert parse_problem({"m": 1, "n": 2, "k": 3}) == GemmProblem(1, 2, 3)  # kind defaults


def test_an_unknown_kind_is_refused_by_name() -> None:
    with pytest.raises(ProblemError) as err:
        parse_problem({"kind": "conv", "m": 1, "n": 2, "k": 3})
    assert err.value.field == "kind"
