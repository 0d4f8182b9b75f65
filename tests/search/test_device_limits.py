"""A CUDA worker's static rules use its own shared-memory limit, not the interpreter's 1 GiB."""

from __future__ import annotations

from search.kinds.gemm.spec import GemmProblem
from search.kinds.gemm.triton_constraints import smem_bytes, violations
from search.limits import DeviceLimits, limits_for

SMEM = 101_376  # an sm_86-sized per-block limit, far from both the default and 1 GiB
PROBLEM = GemmProblem(4096, 4096, 4096, dtype="fp16")
BIG = dict(BLOCK_M=128, BLOCK_N=128, BLOCK_K=64, GROUP_M=8, SPLIT_K=1, num_warps=8,
           num_stages=4)  # 4 * (128 + 128) * 64 * 2 B = 131072 B
SMALL = {**BIG, "num_stages": 2}  # 65536 B


def test_cuda_device_gets_its_own_smem_limit() -> None:
    lim = limits_for("cuda", SMEM)
    assert lim.smem_per_block == SMEM
    assert lim != DeviceLimits.interpreter()
    assert limits_for("interpreter", SMEM).smem_per_block == 1 << 30


def test_config_over_the_device_smem_is_infeasible_there() -> None:
    assert smem_bytes(PROBLEM, BIG) > SMEM >= smem_bytes(PROBLEM, SMALL)
    lim = limits_for("cuda", SMEM)
    assert any("shared memory" in v for v in violations(PROBLEM, BIG, lim))
    assert violations(PROBLEM, SMALL, lim) == []
    # The interpreter has no such limit: the same configuration passes there.
    assert violations(PROBLEM, BIG, limits_for("interpreter", 0)) == []
