"""The attention spec: validation naming the field, the key round trip, and FLOPs that count
the pairs the bottom-right causal mask really keeps."""

from __future__ import annotations

import itertools
import math

import pytest

from search.kinds.attention.spec import AttentionProblem, kept_pairs
from search.types import ProblemError


def _brute(s_q: int, s_kv: int, causal: bool) -> int:
    offset = s_kv - s_q
    return sum(1 for i in range(s_q) for j in range(s_kv) if not causal or j <= i + offset)


@pytest.mark.parametrize(("s_q", "s_kv"), itertools.product((1, 2, 3, 7, 16, 33),
                                                             (1, 2, 5, 16, 48)))
def test_kept_pairs_count_the_bottom_right_mask(s_q: int, s_kv: int) -> None:
    for causal in (False, True):
        assert kept_pairs(s_q, s_kv, causal) == _brute(s_q, s_kv, causal)


def test_flops_bytes_and_key() -> None:
    p = AttentionProblem(batch=8, heads=32, kv_heads=8, s_q=4096, s_kv=4096, d=128,
                         causal=True)
    assert p.flops == 4 * 8 * 32 * 128 * (4096 * 4097 // 2)
    assert p.min_bytes == 2 * (2 * 8 * 32 * 4096 * 128 + 2 * 8 * 8 * 4096 * 128)
    assert p.scale == pytest.approx(1 / math.sqrt(128))
    assert AttentionProblem.from_key(p.key()) == p
    assert AttentionProblem(batch=1, heads=4, s_q=1, s_kv=8, d=64).kv_heads == 4


@pytest.mark.parametrize(("fields", "field"), [
    ({"d": 96}, "d"), ({"heads": 6, "kv_heads": 4}, "kv_heads"), ({"s_q": 0}, "s_q"),
    ({"dtype": "fp8_e4m3"}, "dtype"), ({"scale": -1.0}, "scale"), ({"causal": 1}, "causal"),
    ({"batch": True}, "batch"),
])
def test_impossible_specs_name_the_field(fields: dict, field: str) -> None:
    base = {"batch": 1, "heads": 4, "kv_heads": 2, "s_q": 32, "s_kv": 48, "d": 64}
    with pytest.raises(ProblemError) as info:
        AttentionProblem(**{**base, **fields})
    assert info.value.field == field
