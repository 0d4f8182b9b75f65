"""The Triton GEMM template on the GPU through the worker's own path (``workers.execute``:
static check, fresh random inputs, a NaN-poisoned output, the float64 reference, then the
timing): hand-picked configurations of every family (tiled, split-K, persistent, warp
specialised, two CTAs, tf32) on the public shapes, ragged and column-major ones too. The
configurations are the ones measured in ``docs/notes/kernels.md``."""

from __future__ import annotations

from typing import Any

import pytest

from search.kinds.gemm.spec import GemmProblem
from search.types import Candidate, Measurement, Status
from workers.execute import execute

pytestmark = pytest.mark.gpu

#: Correctness first: a short timing, enough to prove the timed calls run.
OPTS = {"target_ms": 2.0, "warmup_ms": 1.0, "min_reps": 3, "max_reps": 20}


def cfg(bm: int, bn: int, bk: int, g: int, sk: int, w: int, s: int, **extra: Any
        ) -> dict[str, Any]:
    return dict(BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk, GROUP_M=g, SPLIT_K=sk, num_warps=w,
                num_stages=s, **extra)


def measure(problem: GemmProblem, backend: str, config: dict[str, Any],
            **options: Any) -> Measurement:
    cand = Candidate(problem=problem, backend=backend, config=config)
    return Measurement.from_dict(execute(cand.to_dict(), {**OPTS, **options}))


# the shapes and configurations of the kernel sweep (docs/notes/kernels.md)
SWEEP: dict[tuple[int, int, int], list[dict[str, Any]]] = {
    (16, 4096, 4096): [
        cfg(16, 64, 128, 1, 1, 4, 4), cfg(16, 64, 128, 1, 2, 4, 4),
        cfg(16, 64, 128, 1, 4, 4, 4), cfg(16, 64, 128, 1, 8, 4, 4),
        cfg(16, 128, 128, 1, 2, 4, 4), cfg(16, 128, 128, 1, 4, 4, 4),
        cfg(16, 64, 256, 1, 2, 4, 3), cfg(16, 64, 256, 1, 4, 4, 3),
        cfg(16, 128, 64, 1, 4, 4, 6), cfg(16, 64, 64, 1, 4, 4, 6),
        cfg(16, 32, 128, 1, 4, 2, 5), cfg(16, 64, 128, 1, 4, 2, 5),
        cfg(16, 128, 256, 1, 4, 8, 3), cfg(16, 32, 256, 1, 2, 4, 4),
    ],
    (64, 64, 65536): [
        cfg(64, 64, 128, 1, 64, 4, 4), cfg(64, 64, 128, 1, 128, 4, 4),
        cfg(64, 64, 256, 1, 32, 4, 3), cfg(64, 64, 256, 1, 64, 4, 3),
        cfg(64, 64, 64, 1, 64, 4, 6), cfg(64, 64, 128, 1, 32, 4, 4),
        cfg(32, 64, 128, 1, 64, 4, 4), cfg(64, 32, 128, 1, 64, 4, 4),
        cfg(32, 32, 128, 1, 128, 4, 4), cfg(64, 64, 128, 1, 64, 8, 4),
        cfg(64, 64, 256, 1, 128, 4, 2), cfg(32, 64, 256, 1, 64, 4, 3),
    ],
    (4096, 4096, 4096): [
        cfg(128, 256, 64, 8, 1, 8, 3), cfg(128, 256, 64, 16, 1, 8, 3),
        cfg(256, 128, 64, 8, 1, 8, 3), cfg(256, 128, 64, 8, 1, 8, 4),
    ],
    (1000, 3000, 2000): [
        cfg(128, 128, 64, 8, 1, 8, 4), cfg(128, 128, 64, 8, 1, 4, 4),
        cfg(128, 256, 64, 8, 1, 8, 3), cfg(64, 128, 64, 8, 1, 4, 4),
        cfg(128, 128, 128, 8, 1, 8, 3), cfg(128, 64, 64, 8, 1, 4, 4),
    ],
}
SWEEP_CASES = [(shape, c) for shape, configs in SWEEP.items() for c in configs]


@pytest.mark.parametrize(("shape", "config"), SWEEP_CASES,
                         ids=[f"{s[0]}x{s[1]}x{s[2]}-{i}" for i, (s, _) in
                              enumerate(SWEEP_CASES)])
def test_sweep_config_is_correct_and_timed(shape: tuple[int, int, int],
                                            config: dict[str, Any]) -> None:
    m, n, k = shape
    got = measure(GemmProblem(m=m, n=n, k=k, dtype="bf16"), "triton", config)
    assert got.status == Status.OK, got.error
    assert got.median_us and got.median_us > 0 and got.rel_error is not None


@pytest.mark.parametrize("shape", list(SWEEP), ids=lambda s: "x".join(map(str, s)))
@pytest.mark.parametrize("layouts", [("row", "row"), ("col", "col")])
def test_cublas_and_the_first_configs_in_both_layouts(shape: tuple[int, int, int],
                                                      layouts: tuple[str, str]) -> None:
    m, n, k = shape
    p = GemmProblem(m=m, n=n, k=k, dtype="bf16", layout_a=layouts[0], layout_b=layouts[1])
    for backend, config in [("cublas", {}), *(("triton", c) for c in SWEEP[shape][:2])]:
        got = measure(p, backend, config)
        assert got.status == Status.OK, (backend, config, got.error)


P = dict(PERSISTENT=1)
WS = dict(PERSISTENT=1, WARP_SPECIALIZE=1)
TF32 = dict(INPUT_PRECISION="tf32")
BF16_VARIANTS = [
    cfg(128, 256, 64, 8, 1, 8, 3), cfg(128, 256, 64, 8, 1, 8, 3, WARP_SPECIALIZE=1),
    cfg(128, 256, 64, 8, 1, 8, 3, **P), cfg(128, 128, 64, 8, 1, 8, 4, **P),
    cfg(128, 128, 64, 4, 1, 8, 4, **P), cfg(128, 256, 64, 8, 1, 8, 3, **WS),
    cfg(128, 128, 64, 8, 1, 8, 4, **WS), cfg(128, 128, 64, 4, 1, 8, 4, **WS),
    cfg(128, 256, 64, 8, 1, 8, 3, num_ctas=2, **P),
    cfg(128, 256, 64, 8, 1, 8, 3, num_ctas=2, **WS),
    # the persistent kernel's variants, once process switches, now config keys
    cfg(128, 128, 64, 8, 1, 8, 4, FLATTEN=0, **P), cfg(128, 128, 64, 8, 1, 8, 4, TMA_STORE=1, **P),
    cfg(128, 128, 64, 8, 1, 8, 4, WS_LOOP="tiles", **WS),
    cfg(128, 128, 64, 8, 1, 8, 4, LOADS="pointer"),
]
FP32_VARIANTS = [
    cfg(128, 128, 32, 8, 1, 8, 3, **TF32), cfg(128, 256, 32, 8, 1, 8, 3, **TF32),
    cfg(128, 128, 32, 8, 1, 8, 3, **P, **TF32), cfg(128, 256, 32, 8, 1, 8, 2, **P, **TF32),
    cfg(128, 128, 64, 8, 1, 8, 2, **P, **TF32), cfg(128, 128, 32, 8, 1, 8, 3, **WS, **TF32),
    cfg(128, 128, 32, 8, 1, 8, 3, **P, INPUT_PRECISION="tf32x3"),
]
VARIANTS = (
    [(GemmProblem(m=4096, n=4096, k=4096, dtype="bf16"), c) for c in BF16_VARIANTS]
    + [(GemmProblem(m=2048, n=4096, k=14336, dtype="bf16"), c) for c in BF16_VARIANTS]
    + [(GemmProblem(m=4096, n=4096, k=4096, dtype="fp32"), c) for c in FP32_VARIANTS]
    + [(GemmProblem(m=4096, n=4096, k=4096, dtype="fp32", layout_b="col"), c)
       for c in FP32_VARIANTS]
    # ragged and column-major
    + [(GemmProblem(m=1000, n=3000, k=2000, dtype="bf16"), cfg(128, 128, 64, 8, 1, 8, 3, **P)),
       (GemmProblem(m=1000, n=3000, k=2000, dtype="bf16", layout_a="col", layout_b="col"),
        cfg(128, 256, 64, 8, 1, 8, 3, **WS)),
       (GemmProblem(m=1000, n=3000, k=2000, dtype="fp16", layout_b="col"),
        cfg(128, 128, 64, 4, 1, 4, 4, num_ctas=2, **P)),
       (GemmProblem(m=16, n=4096, k=4096, dtype="bf16"), cfg(64, 128, 64, 4, 1, 4, 4, **WS)),
       (GemmProblem(m=1000, n=3000, k=2000, dtype="fp32"),
        cfg(128, 128, 32, 8, 1, 8, 3, **P, **TF32)),
       (GemmProblem(m=1000, n=3000, k=2000, dtype="fp32", layout_a="col", layout_b="col"),
        cfg(128, 128, 32, 8, 1, 8, 3, **P, **TF32))]
)


@pytest.mark.parametrize(("problem", "config"), VARIANTS,
                         ids=[f"{p.describe().replace(' ', '-')}-{i}" for i, (p, _) in
                              enumerate(VARIANTS)])
def test_hopper_variant_is_never_wrong(problem: GemmProblem, config: dict[str, Any]) -> None:
    """Persistent, warp-specialised, two-CTA and tf32 kernels, including those the search
    leaves out (so no static check): each may fail to compile or be refused on this device,
    but what runs must match the reference (tf32: within its widened tolerance)."""
    got = measure(problem, "triton", config, check_constraints=False)
    assert got.status not in (Status.WRONG_RESULT, Status.CRASHED), got.error
    if got.status == Status.OK:
        assert got.rel_error is not None and got.median_us and got.median_us > 0
