from __future__ import annotations

import pytest

from search.kinds.gemm.spec import GemmProblem
from search.kinds.gemm.triton_constraints import smem_bytes, violations
from search.kinds.gemm.triton_space import PARAMS, complete, seeds, space
from search.limits import DeviceLimits
from search.types import ProblemError

H100 = DeviceLimits(smem_per_block=232_448)
BIG = dict(BLOCK_M=128, BLOCK_N=256, BLOCK_K=64, GROUP_M=8, SPLIT_K=1, num_warps=8, num_stages=3)


def test_big_tile_is_feasible_on_a_big_problem() -> None:
    assert violations(GemmProblem(4096, 4096, 4096), BIG, H100) == []


def test_shared_memory_over_the_device_limit_is_rejected() -> None:
    config = dict(BIG, BLOCK_K=128, num_stages=5)
    problem = GemmProblem(4096, 4096, 4096)
    assert smem_bytes(problem, config) == 5 * (128 + 256) * 128 * 2
    reasons = violations(problem, config, H100)
    assert any("shared memory" in r for r in reasons)
    # fp32 doubles the bytes: a config that fits in bf16 can overflow in fp32
    fits = dict(BIG, num_stages=4)
    assert violations(problem, fits, H100) == []
    assert any("shared memory" in r for r in
               violations(GemmProblem(4096, 4096, 4096, dtype="fp32"), fits, H100))


def test_tiles_far_larger_than_the_problem_are_rejected() -> None:
    reasons = violations(GemmProblem(16, 4096, 4096), BIG, H100)
    assert any(r.startswith("BLOCK_M=128") for r in reasons)


def test_split_k_must_leave_a_block_of_k_per_split() -> None:
    config = dict(BIG, BLOCK_M=16, BLOCK_N=64, BLOCK_K=128, SPLIT_K=64, num_warps=4)
    assert any("SPLIT_K=64" in r for r in violations(GemmProblem(16, 4096, 4096), config, H100))
    assert violations(GemmProblem(16, 4096, 65536), config, H100) == []


def test_non_power_of_two_is_rejected() -> None:
    assert violations(GemmProblem(64, 64, 64), dict(BIG, BLOCK_M=96), H100)


@pytest.mark.parametrize("shape", [(4096, 4096, 4096), (16, 4096, 4096), (64, 64, 65536),
                                   (1000, 3000, 2000), (64, 48, 80)])
def test_seeds_are_in_the_space_and_mostly_feasible(shape: tuple[int, int, int]) -> None:
    problem = GemmProblem(*shape)
    legal = {c.name: set(c.values) for c in space(problem)}
    configs = seeds(problem)
    assert configs
    for config in configs:
        assert config == complete({p: config[p] for p in PARAMS})  # PARAMS, then defaults
        assert all(config[p] in legal[p] for p in PARAMS)
    assert any(violations(problem, c, H100) == [] for c in configs)


def test_skinny_problems_seed_split_k_first() -> None:
    assert seeds(GemmProblem(64, 64, 65536))[0]["SPLIT_K"] > 1
    assert seeds(GemmProblem(4096, 4096, 4096))[0]["SPLIT_K"] == 1


@pytest.mark.parametrize("field,kwargs", [("m", {"m": 0}), ("k", {"k": -3}),
                                          ("dtype", {"dtype": "int4"}),
                                          ("layout_a", {"layout_a": "diag"}),
                                          ("batch", {"batch": 1.5})])
def test_problem_validation_names_the_field(field: str, kwargs: dict) -> None:
    args = dict(m=8, n=8, k=8) | kwargs
    with pytest.raises(ProblemError) as info:
        GemmProblem(**args)
    assert info.value.field == field


def test_problem_key_is_canonical() -> None:
    a = GemmProblem(64, 48, 80)
    b = GemmProblem.from_dict({"kind": "gemm", "m": 64, "n": 48, "k": 80, "dtype": "bf16",
                               "out_dtype": "bf16", "layout_a": "row"})
    assert a.key() == b.key()
    assert a.key() != GemmProblem(64, 48, 80, layout_b="col").key()
    assert GemmProblem(4096, 4096, 4096).flops == 2 * 4096**3


def test_problem_from_key_inverts_key() -> None:
    for p in (GemmProblem(64, 48, 80), GemmProblem(16, 32, 64, batch=3, dtype="fp16",
                                                   out_dtype="fp32", layout_a="col"),
              GemmProblem(4096, 4096, 4096, dtype="fp8_e4m3", layout_b="col")):
        assert GemmProblem.from_key(p.key()) == p
    with pytest.raises(ProblemError) as info:
        GemmProblem.from_key("gemm:b1:m4:n4:bf16")
    assert info.value.field == "key"
