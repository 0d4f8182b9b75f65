"""cuBLASLt's ranked algorithms (``kernel_templates.gemm.cublaslt``) on a GPU: every algorithm
the heuristic ranks, their re-split and swizzled variants, each layout, batches and dtypes,
checked against the float64 reference on a NaN-poisoned output; the ``cublaslt`` backend
through the worker's own path (``workers.execute``); and the refusals (a rank the heuristic
does not have, a split that changes nothing)."""

from __future__ import annotations

import gc
from dataclasses import replace

import pytest
import torch

from kernel_templates.errors import InvalidConfig
from kernel_templates.gemm.cublaslt import (
    LtGemm,
    check_config,
    library_version,
    overrides,
    resolve,
)
from kernel_templates.gemm.cublaslt_tiles import tile_shape
from kernel_templates.gemm.inputs import make_inputs
from kernel_templates.gemm.reference import reference_for, rel_error, tolerance_for
from search.kinds.gemm import library
from search.kinds.gemm.spec import GemmProblem
from search.types import Candidate, Measurement, Status
from workers.execute import execute

pytestmark = pytest.mark.gpu

OPTS = {"target_ms": 5.0, "warmup_ms": 2.0, "min_reps": 3, "max_reps": 50}
PROBLEMS = [
    GemmProblem(1000, 3000, 2000),                      # ragged
    GemmProblem(16, 4096, 4096),                        # skinny, split-K territory
    GemmProblem(64, 64, 65536),                         # long K
    GemmProblem(511, 1024, 4097),                       # unaligned rows of A
    GemmProblem(200, 300, 400, layout_a="col"),
    GemmProblem(200, 300, 400, layout_b="col"),
    GemmProblem(200, 300, 400, layout_a="col", layout_b="col"),
    GemmProblem(96, 160, 224, batch=3),
    GemmProblem(96, 160, 224, batch=3, layout_b="col"),
    GemmProblem(300, 500, 700, dtype="fp16"),
    GemmProblem(300, 500, 700, dtype="fp32"),
]


def ids(p: GemmProblem) -> str:
    return p.describe().replace(" ", "_")


def _checked(problem: GemmProblem, gemm: LtGemm, inputs, ref, config) -> float:
    inputs.out.fill_(float("nan"))
    gemm.launcher(config)()
    torch.cuda.synchronize()
    err = rel_error(inputs.out, ref)
    assert err < tolerance_for(problem), (config, err)
    return err


@pytest.mark.parametrize("problem", PROBLEMS, ids=ids)
def test_every_ranked_algorithm_and_variant_is_correct(problem: GemmProblem) -> None:
    inputs = make_inputs(problem, "cuda", seed=11)
    ref = reference_for(inputs)
    gemm = LtGemm(inputs.a, inputs.b, inputs.out)
    ranked = gemm.heuristics(16)
    assert ranked, "the heuristic ranks no algorithm"
    for config in ranked:
        _checked(problem, gemm, inputs, ref, config)
    variants = gemm.variants(ranked[0], splits=(1, 2, 4))
    assert variants[0] == ranked[0]
    for config in variants[1:]:
        _checked(problem, gemm, inputs, ref, config)


@pytest.mark.parametrize("problem", PROBLEMS[:3], ids=ids)
def test_backend_runs_the_library_plan_through_the_worker_path(problem: GemmProblem) -> None:
    inputs = make_inputs(problem, "cuda", seed=5)
    gemm = LtGemm(inputs.a, inputs.b, inputs.out)
    ran = 0
    for config in library.cublaslt_configs(problem):
        got = Measurement.from_dict(execute(Candidate(problem, "cublaslt", config).to_dict(),
                                            OPTS))
        if got.status == Status.INVALID:
            # a rank the heuristic lacks, a setting the rank already has, an option or a
            # cluster its algorithm lacks
            assert got.error and any(w in got.error for w in (
                "rank", "custom must be below", "cuBLASLt does not run")), got.error
            continue
        assert got.status == Status.OK, (config, got.error)
        assert got.median_us and got.median_us > 0
        assert got.rel_error is not None and got.rel_error < tolerance_for(problem)
        # the measurement names the algorithm the rank resolved to on the worker
        resolved = dict(got.extra["resolved"])
        assert resolved.pop("describe").startswith(f"algo {resolved['algo_id']}, tile ")
        assert resolved == resolve(gemm, config).to_dict(), config
        ran += 1
    assert ran >= 3, f"only {ran} cuBLASLt candidates ran on {problem.describe()}"


def test_resolve_refuses_what_names_nothing_new() -> None:
    problem = GemmProblem(16, 4096, 4096)
    inputs = make_inputs(problem, "cuda", seed=3)
    gemm = LtGemm(inputs.a, inputs.b, inputs.out)
    ranked = gemm.heuristics(16)
    with pytest.raises(InvalidConfig, match="ranks"):
        resolve(gemm, {"rank": len(ranked)} if len(ranked) < 16 else {"rank": 99})
    own = ranked[0].split_k
    with pytest.raises(InvalidConfig, match="already runs split-K"):
        resolve(gemm, {"rank": 0, "split_k": own})
    assert resolve(gemm, {"rank": 0}) == ranked[0]
    assert check_config({"rank": 0, "split_k": 2}) == (0, 2)
    assert library_version() >= 120000



@pytest.mark.parametrize("problem", [GemmProblem(192, 6144, 1024), GemmProblem(300, 500, 700)],
                         ids=ids)
def test_space_lists_the_ranked_algorithm_and_other_tiles_run_correctly(
        problem: GemmProblem) -> None:
    inputs = make_inputs(problem, "cuda", seed=13)
    ref = reference_for(inputs)
    gemm = LtGemm(inputs.a, inputs.b, inputs.out)
    first = gemm.heuristics(1)[0]
    assert first.algo_id in gemm.algo_ids()
    tiles, stages = gemm.tiles_and_stages(first.algo_id)
    assert first.tile in tiles or first.tile == 0, (first, tiles)
    assert first.stages in stages or first.stages == 0, (first, stages)
    assert all(tile_shape(t) for t in tiles if t), tiles  # ids the tile table knows
    assert 0 <= first.custom < gemm.custom_options(first.algo_id)
    others = [c for c in (replace(first, tile=t, split_k=1, reduction=0) for t in tiles)
              if c.tile != first.tile and gemm.accepts(c)]
    assert others, f"no other tile of algo {first.algo_id} runs {problem.describe()}"
    for config in others[:6]:
        _checked(problem, gemm, inputs, ref, config)


def test_cluster_and_custom_overrides_replace_only_those_fields() -> None:
    problem = GemmProblem(320, 4096, 1536)  # a mid-m shape: the heuristic picks a cluster
    inputs = make_inputs(problem, "cuda", seed=17)
    ref = reference_for(inputs)
    gemm = LtGemm(inputs.a, inputs.b, inputs.out)
    first = gemm.heuristics(1)[0]
    ran = 0
    for config in ({"rank": 0, "cluster": "1x1"}, {"rank": 0, "cluster": "2x1", "custom": 1},
                   {"rank": 0, "custom": 1}):
        try:
            got = resolve(gemm, config)
        except InvalidConfig as exc:  # the rank's own setting, or one its algorithm lacks
            assert any(w in str(exc) for w in ("already runs", "custom must be below",
                                               "does not run")), exc
            continue
        assert got == replace(first, **overrides(config)), (config, first, got)
        _checked(problem, gemm, inputs, ref, got)
        ran += 1
    assert ran >= 1, f"no override of {first} ran"


def test_descriptors_live_as_long_as_a_launcher_and_are_freed_after() -> None:
    problem = GemmProblem(256, 512, 1024)
    inputs = make_inputs(problem, "cuda", seed=9)
    ref = reference_for(inputs)
    gemm = LtGemm(inputs.a, inputs.b, inputs.out)
    finalizer, config = gemm.finalizer, gemm.heuristics(1)[0]
    call = gemm.launcher(config)
    del gemm
    gc.collect()
    assert finalizer.alive, "the descriptors were freed while a launcher still needs them"
    inputs.out.fill_(float("nan"))
    call()
    torch.cuda.synchronize()
    assert rel_error(inputs.out, ref) < tolerance_for(problem)
    del call
    gc.collect()
    assert not finalizer.alive, "the descriptors outlived every launcher"
