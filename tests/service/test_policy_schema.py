"""``PolicyIn`` (the HTTP schema) is derived from ``search.decision.Policy``: the two agree on
names, defaults, types and ranges, so a policy the API accepts is one the decision loop runs."""

from __future__ import annotations

import dataclasses
import math
from typing import Any, get_type_hints

import pytest
from pydantic import ValidationError

from search.decision import Policy
from search.decision.policy import MAX_REL_ERROR, Allowance, bounds_of
from service.schemas import AllowanceIn, PolicyIn

FIELDS = dataclasses.fields(Policy)
HINTS = get_type_hints(Policy)
#: The numeric and boolean fields (``allow``, a mapping, has its own tests below).
SCALARS = [f for f in FIELDS if HINTS[f.name] in (bool, int, float)]


def _outside(f: dataclasses.Field[Any]) -> list[Any]:
    """Values just past each of the field's bounds (one unit for ints, a hair for floats)."""
    b, step = bounds_of(f), 1 if HINTS[f.name] is int else 1e-6
    out: list[Any] = []
    if b.ge is not None:
        out.append(b.ge - step)
    if b.gt is not None:
        out.append(b.gt)
    if b.le is not None:
        out.append(b.le + step)
    if b.lt is not None:
        out.append(b.lt)
    return [HINTS[f.name](v) for v in out]


def test_the_schema_has_the_policys_fields_and_defaults() -> None:
    assert list(PolicyIn.model_fields) == [f.name for f in FIELDS]
    assert PolicyIn().model_dump() == Policy().to_dict()
    for f in FIELDS:
        assert PolicyIn.model_fields[f.name].description == bounds_of(f).doc


@pytest.mark.parametrize("f", [f for f in SCALARS if HINTS[f.name] is not bool],
                         ids=lambda f: f.name)
def test_both_refuse_a_value_out_of_range_by_name(f: dataclasses.Field[Any]) -> None:
    values = _outside(f)
    assert values, f"policy.{f.name} has no bounds"
    for value in values:
        with pytest.raises(ValueError, match=f"policy.{f.name}"):
            Policy(**{f.name: value})
        with pytest.raises(ValidationError) as e:
            PolicyIn.model_validate({f.name: value})
        assert [d["loc"] for d in e.value.errors()] == [(f.name,)]
    b = bounds_of(f)
    for edge in (b.ge, b.le):  # inclusive bounds are accepted by both
        if edge is not None:
            value = HINTS[f.name](edge)
            assert getattr(Policy(**{f.name: value}), f.name) == value
            assert getattr(PolicyIn.model_validate({f.name: value}), f.name) == value


def test_types_are_kept_strict() -> None:
    ints = [f.name for f in SCALARS if HINTS[f.name] is int]
    floats = [f.name for f in SCALARS if HINTS[f.name] is float]
    assert ints and floats
    for name in ints:  # no silent truncation of 8.5, no "8"
        for value in (8.5, "8"):
            with pytest.raises(ValidationError):
                PolicyIn.model_validate({name: value})
    for name in floats:
        for value in (math.inf, math.nan):
            with pytest.raises(ValidationError):
                PolicyIn.model_validate({name: value})
        with pytest.raises(ValueError, match=f"policy.{name}"):
            Policy(**{name: math.nan})
    with pytest.raises(ValidationError):
        PolicyIn.model_validate({"unknown": 1})


# -- policy.allow: lower precisions and their error bounds ---------------------------------------
def test_allow_is_a_mapping_of_known_precisions_to_a_bound() -> None:
    body = {"allow": {"fp8_e4m3": {"max_rel_error": 0.03}}}
    dumped = PolicyIn.model_validate(body).model_dump()
    assert dumped["allow"] == body["allow"]
    policy = Policy.from_dict(dumped)
    assert policy.bound("fp8_e4m3") == 0.03 and policy.to_dict()["allow"] == body["allow"]
    assert Policy().bound("fp8_e4m3") is None and Policy().to_dict()["allow"] == {}
    # the bound's range and meaning are written once, on the dataclass
    (f,) = dataclasses.fields(Allowance)
    assert AllowanceIn.model_fields["max_rel_error"].description == bounds_of(f).doc
    assert bounds_of(f).le == MAX_REL_ERROR and bounds_of(f).gt == 0


@pytest.mark.parametrize(("allow", "loc", "words"), [
    ({"fp8_e4m3": {"max_rel_error": -0.01}}, ("allow", "fp8_e4m3", "max_rel_error"),
     "greater than 0"),
    ({"fp8_e4m3": {"max_rel_error": 0.0}}, ("allow", "fp8_e4m3", "max_rel_error"),
     "greater than 0"),
    ({"fp8_e4m3": {"max_rel_error": 1.5}}, ("allow", "fp8_e4m3", "max_rel_error"),
     "less than or equal to 0.5"),
    ({"fp8_e4m3": {"max_rel_error": "3%"}}, ("allow", "fp8_e4m3", "max_rel_error"), ""),
    ({"fp8_e4m3": {}}, ("allow", "fp8_e4m3", "max_rel_error"), "required"),
    ({"fp8_e4m3": {"max_rel_error": 0.03, "min": 0}}, ("allow", "fp8_e4m3", "min"), ""),
    ({"fp4": {"max_rel_error": 0.03}}, ("allow", "fp4", "[key]"), "unknown precision"),
    ({"fp8_e4m3": 0.03}, ("allow", "fp8_e4m3"), ""),
])
def test_a_bad_allowance_is_refused_naming_its_field(allow: Any, loc: tuple[str, ...],
                                                     words: str) -> None:
    with pytest.raises(ValidationError) as e:
        PolicyIn.model_validate({"allow": allow})
    (err,) = e.value.errors()
    assert err["loc"] == loc and words in err["msg"]


@pytest.mark.parametrize("value", [math.nan, math.inf, -1.0, 0.0, 0.51])
def test_the_dataclass_refuses_what_the_schema_refuses(value: float) -> None:
    with pytest.raises(ValueError, match=r"policy\.allow\.fp8_e4m3\.max_rel_error"):
        Policy(allow={"fp8_e4m3": {"max_rel_error": value}})
    with pytest.raises(ValueError, match=r"policy\.allow\.int8: unknown precision"):
        Policy(allow={"int8": {"max_rel_error": 0.1}})
    assert Policy(allow={"fp8_e4m3": {"max_rel_error": MAX_REL_ERROR}}).bound("fp8_e4m3") == 0.5
