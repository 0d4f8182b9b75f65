"""Cluster size as a search dimension: the hopper tier and the fp8 tier search ``num_ctas``
1 and 2, and one rule (``search.kinds.gemm.cluster``) refuses what Triton 3.6 computes wrong
on an H100 (a column-major A through TMA), in the static constraints and in the launcher alike.
What is refused and what is allowed is pinned on the GPU (``tests/gpu/test_clusters.py``)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch

from kernel_templates.errors import Unsupported
from kernel_templates.gemm.inputs import make_inputs
from kernel_templates.gemm.triton import matmul
from search.kinds.gemm import fp8_space, triton_space
from search.kinds.gemm.cluster import cluster_refusal, cluster_violations, fp8_cluster_refusal
from search.kinds.gemm.fp8_tuner import Fp8Tuner
from search.kinds.gemm.spec import GemmProblem
from search.kinds.gemm.triton_constraints import violations
from search.kinds.gemm.triton_tuner import GemmTuner
from search.limits import DeviceLimits
from search.optimizer import close_storages
from search.types import Measurement, Status, config_key

H100 = DeviceLimits()
ROW = GemmProblem(m=4096, n=4096, k=4096)
COL_A = GemmProblem(m=4096, n=4096, k=4096, layout_a="col")
HOPPER = dict(BLOCK_M=128, BLOCK_N=128, BLOCK_K=64, GROUP_M=8, SPLIT_K=1, num_warps=8,
              num_stages=3, PERSISTENT=1)


def _dims(problem: GemmProblem, tier: str) -> dict[str, tuple[Any, ...]]:
    return {c.name: c.values for c in triton_space.space(problem, tier)}


def test_the_hopper_tier_searches_the_cluster_size() -> None:
    assert _dims(ROW, "hopper")["num_ctas"] == (1, 2)
    assert "num_ctas" in triton_space.params("hopper")
    assert "num_ctas" not in _dims(ROW, "tiles")
    fp8 = {c.name: c.values for c in fp8_space.space(ROW)}
    assert fp8["num_ctas"] == (1, 2)


def test_a_column_major_a_through_tma_is_refused_in_a_cluster() -> None:
    refused = violations(COL_A, {**HOPPER, "num_ctas": 2}, H100)
    assert refused == [cluster_refusal(2, True)]
    assert violations(COL_A, {**HOPPER, "num_ctas": 1}, H100) == []
    assert violations(ROW, {**HOPPER, "num_ctas": 2}, H100) == []
    tiled = {**HOPPER, "PERSISTENT": 0, "num_ctas": 2}
    # automatic loads fall back to pointers for a column-major A: allowed; TMA asked: refused
    assert violations(COL_A, tiled, H100) == []
    assert violations(COL_A, {**tiled, "LOADS": "tma"}, H100) == [cluster_refusal(2, True)]
    assert any("SPLIT_K=1" in r for r in violations(ROW, {**tiled, "SPLIT_K": 2}, H100))


def test_the_fp8_templates_a_is_row_major_so_clusters_are_allowed() -> None:
    lowered = fp8_space.complete({**fp8_space.seeds(COL_A)[0], "num_ctas": 2}, True)
    assert fp8_space.violations(COL_A, lowered, H100) == []
    assert cluster_violations(COL_A, {"num_ctas": 4}, tma_a=False)  # not a cluster size


def test_the_hopper_tuner_never_proposes_a_refused_cluster(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'o.db'}"
    store: dict[str, Measurement] = {}
    proposed: list[dict[str, Any]] = []
    try:
        for _ in range(3):
            tuner = GemmTuner(url, COL_A, "fake-gpu", H100, tier="hopper")
            for p in tuner.propose(8, lambda c: store.get(config_key(c))):
                proposed.append(p.config)
                m = Measurement(Status.OK, median_us=100.0 + p.config["num_stages"])
                store[config_key(p.config)] = m
                tuner.record(p.trial_number, m)
        # the row-major twin proposes clusters: the dimension is searched
        tuner = GemmTuner(url, ROW, "fake-gpu", H100, tier="hopper")
        row = [p.config for p in tuner.propose(24, lambda c: None)]
    finally:
        close_storages()
    assert len(proposed) == 24 and all(c["num_ctas"] == 1 for c in proposed)
    assert {c["num_ctas"] for c in row} == {1, 2}


@pytest.mark.parametrize("extra", [{"PERSISTENT": 1}, {"LOADS": "tma"}])
def test_the_launcher_refuses_with_the_same_rule(extra: dict[str, Any]) -> None:
    p = GemmProblem(m=32, n=32, k=32, dtype="bf16", layout_a="col")
    inp = make_inputs(p, "cpu", 0)
    config = dict(BLOCK_M=16, BLOCK_N=16, BLOCK_K=16, GROUP_M=1, SPLIT_K=1, num_warps=4,
                  num_stages=2, num_ctas=2, **extra)
    with pytest.raises(Unsupported) as err:
        matmul(inp.a, inp.b, config, out=inp.out)
    assert str(err.value) == cluster_refusal(2, True)
    # the same configuration with a row-major A runs (the interpreter ignores num_ctas)
    row = GemmProblem(m=32, n=32, k=32, dtype="bf16")
    ok = make_inputs(row, "cpu", 0)
    matmul(ok.a, ok.b, config, out=ok.out)
    assert torch.isfinite(ok.out).all()


def test_the_fp8_tuner_never_proposes_a_cluster_tile_that_does_not_compile(tmp_path: Path
                                                                           ) -> None:
    fp8 = GemmProblem(m=4096, n=4096, k=4096, dtype="fp8_e4m3", layout_b="col")
    url = f"sqlite:///{tmp_path / 'o.db'}"
    try:
        tuner = Fp8Tuner(url, fp8, "fake-gpu", H100)
        proposed = [p.config for p in tuner.propose(32, lambda c: None)]
    finally:
        close_storages()
    clusters = [c for c in proposed if c["num_ctas"] == 2]
    assert clusters  # the dimension is searched
    assert not [c for c in clusters if fp8_cluster_refusal(c, row_scales=False)]
