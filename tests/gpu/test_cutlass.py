"""CUTLASS library candidates on the GPU through the worker's own path (``workers.execute``):
per shape (bf16, fp8 with B column-major and per-tensor scales, the wide-and-short 32768x512x512)
the best-ranked seed and its runtime knobs (raster, swizzle, stream-K splits), each on fresh
random inputs into a NaN-poisoned output, checked against the float64 reference before it is
timed. The ops are built first, in parallel, into the cache ``KS_CUTLASS_CACHE`` names (where
``python -m scripts.bench cutlass-cache`` puts them, so a warm host compiles nothing)."""

from __future__ import annotations

from typing import Any

import pytest

from search.kinds.gemm.spec import GemmProblem
from search.types import Candidate, Measurement, Status
from workers.execute import execute

pytestmark = [pytest.mark.gpu, pytest.mark.slow]

OPTS = {"target_ms": 2.0, "warmup_ms": 1.0, "min_reps": 3, "max_reps": 20}
PROBLEMS = [
    GemmProblem(m=4096, n=4096, k=4096, dtype="bf16"),
    GemmProblem(m=4096, n=4096, k=4096, dtype="fp8_e4m3", layout_b="col"),
    GemmProblem(m=32768, n=512, k=512, dtype="bf16"),
]


@pytest.fixture(scope="module")
def seeds() -> dict[str, list[dict[str, Any]]]:
    """Each problem's best-ranked seed and a few knob settings of its op, built."""
    from kernel_templates.gemm import cutlass as kc
    from search.kinds.gemm import cutlass_space as space

    missing = kc.cutlass_available()
    if missing:
        pytest.skip(missing)
    out: dict[str, list[dict[str, Any]]] = {}
    todo = {}
    for p in PROBLEMS:
        ops = kc.ops_for(p)
        seed = space.seeds(p, ops, n=1, gpu="H100_SXM")[0]
        op = next(o for o in ops if o.name == seed["op"])
        todo[op.name] = op
        rest = space.configs(p, op)[1:]
        knobs = [c for c in rest if c["splits"] > 1][:1] + [
            c for c in rest if c["splits"] == 1 and c["raster"] != "heuristic"][:2]
        out[p.key()] = [seed, *knobs]
    built = kc.build(list(todo.values()))
    assert not built.errors, {k: str(v)[-1500:] for k, v in built.errors.items()}
    return out


@pytest.mark.parametrize("problem", PROBLEMS, ids=lambda p: p.describe().replace(" ", "-"))
def test_seed_and_its_knobs_are_correct(problem: GemmProblem,
                                        seeds: dict[str, list[dict[str, Any]]]) -> None:
    for config in seeds[problem.key()]:
        got = Measurement.from_dict(execute(
            Candidate(problem=problem, backend="cutlass", config=config).to_dict(), OPTS))
        assert got.status == Status.OK, (config, got.error)
        assert got.median_us and got.median_us > 0
