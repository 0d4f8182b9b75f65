"""The CUTLASS catalogue a worker declares: its wire form round-trips, stays a reasonable HTTP
body, and the service's filter over it picks exactly the operations the GPU host's own
enumeration does (``kernel_templates.gemm.cutlass.ops_for``)."""

from __future__ import annotations

import json

import pytest

from search.kinds.gemm.cutlass_catalogue import Catalogue, OpSpec, filter_ops
from search.kinds.gemm.spec import GemmProblem

PROBLEMS = [GemmProblem(m=512, n=512, k=512, dtype="fp16"),
            GemmProblem(m=1000, n=3000, k=2000),
            GemmProblem(m=4096, n=4096, k=4096, layout_b="col"),
            GemmProblem(m=256, n=256, k=256, out_dtype="fp32"),
            GemmProblem(m=256, n=256, k=256, dtype="fp8_e4m3", layout_b="col"),
            GemmProblem(m=256, n=256, k=256, dtype="fp8_e4m3"),  # fp8 layouts: none
            GemmProblem(m=64, n=63, k=61),  # misaligned: none
            GemmProblem(m=256, n=256, k=256, dtype="fp32")]


@pytest.fixture(scope="module")
def declared() -> Catalogue:
    pytest.importorskip("cutlass_library")
    from kernel_templates.gemm import cutlass as kc

    return kc.catalogue()


def test_the_wire_form_round_trips_in_a_reasonable_body(declared: Catalogue) -> None:
    body = json.dumps(declared.encode())
    assert len(body) < 1_000_000  # one POST at registration
    back = Catalogue.decode(json.loads(body))
    assert set(back.ops) == set(declared.ops) and len(back.ops) == len(declared.ops)
    assert back.source == declared.source and back.digest == declared.digest
    assert all(isinstance(op, OpSpec) for op in back.ops)


@pytest.mark.parametrize("problem", PROBLEMS, ids=lambda p: p.key())
def test_the_service_filter_agrees_with_the_hosts_enumeration(
        declared: Catalogue, problem: GemmProblem) -> None:
    from kernel_templates.gemm import cutlass as kc

    back = Catalogue.decode(json.loads(json.dumps(declared.encode())))
    ops, why = filter_ops(problem, back.ops)
    assert [op.name for op in ops] == [op.name for op in kc.ops_for(problem)]  # same order
    assert why == kc.why_unsupported(problem)
    assert [OpSpec.of(op) for op in kc.ops_for(problem)] == ops


def test_a_malformed_catalogue_is_a_value_error() -> None:
    with pytest.raises(ValueError, match="catalogue"):
        Catalogue.decode({"families": []})
    good = Catalogue((OpSpec("op", (128, 128, 64), (1, 1, 1), "TmaWarpSpecialized",
                             "TmaWarpSpecialized", "default", "bf16", "bf16", None, "bf16",
                             "row", "row", 8, 8, 8, 8),)).encode()
    assert Catalogue.decode(good).ops[0].tile == (128, 128, 64)
    good["families"][0]["ops"][0][1] = [128, 128]
    with pytest.raises(ValueError, match="3 extents"):
        Catalogue.decode(good)


def test_the_built_operations_travel_with_the_catalogue() -> None:
    op = OpSpec("op", (128, 128, 64), (1, 1, 1), "TmaWarpSpecialized", "TmaWarpSpecialized",
                "default", "bf16", "bf16", None, "bf16", "row", "row", 8, 8, 8, 8)
    plain = Catalogue((op,), source="s")
    assert "built" not in plain.encode()  # nothing built: the declaration is as before
    built = Catalogue((op,), source="s", built=("op",))
    assert Catalogue.decode(built.encode()) == built and built.digest != plain.digest
    with pytest.raises(ValueError, match="built must be a list of operation names"):
        Catalogue.decode({**built.encode(), "built": "op"})
