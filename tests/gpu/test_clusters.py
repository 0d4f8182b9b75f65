"""Cluster size (``num_ctas=2``) on the GPU with the installed Triton: the combinations the
search allows are right, and the one it refuses (``search.kinds.gemm.cluster``: a column-major
A loaded through TMA) is pinned as still wrong.

The refused combination runs in a fresh process with the refusal lifted, so a crash or a
poisoned CUDA context stays there. When a Triton upgrade computes it right,
``test_the_refused_clusters_are_still_wrong`` fails and says to lift the refusal (and move
the combination to the allowed ones below)."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from typing import Any

import pytest

from search.kinds.gemm.cluster import cluster_violations
from search.kinds.gemm.spec import GemmProblem
from search.types import Candidate, Measurement, Status
from workers.execute import execute

pytestmark = pytest.mark.gpu

LAY = {"r": "row", "c": "col"}
OPTS = {"target_ms": 2.0, "warmup_ms": 1.0, "min_reps": 3, "max_reps": 20}
TILED = dict(BLOCK_M=128, BLOCK_N=128, BLOCK_K=64, GROUP_M=8, SPLIT_K=1, num_warps=4,
             num_stages=3, num_ctas=2)
#: how each path of the tiled template is asked for
PATHS = {"pointer": {"LOADS": "pointer"}, "tma": {"LOADS": "tma"}, "persistent": {"PERSISTENT": 1}}
SHAPES = [(512, 512, 512), (1000, 3000, 2000)]

_PINNED = textwrap.dedent("""
    import json, sys
    import torch
    from kernel_templates.gemm import triton as t
    from kernel_templates.gemm.inputs import make_inputs
    from kernel_templates.gemm.reference import reference_for, rel_error
    from search.kinds.gemm.spec import GemmProblem
    t.cluster_refusal = lambda num_ctas, a_col: None  # the refusal lifted, in here only
    p = GemmProblem(**json.loads(sys.argv[1]))
    inp = make_inputs(p, "cuda", 7)
    t.matmul(inp.a, inp.b, json.loads(sys.argv[2]), out=inp.out)
    torch.cuda.synchronize()
    print(json.dumps({"rel_error": rel_error(inp.out, reference_for(inp))}))
""")


def _lifted(problem: GemmProblem, config: dict[str, Any]) -> tuple[float | None, str]:
    """``(rel_error, output)`` of the config with the refusal lifted, in a fresh process;
    ``None`` when it crashed or hung (still broken, in another way)."""
    try:
        run = subprocess.run([sys.executable, "-c", _PINNED, json.dumps(problem.to_dict()),
                              json.dumps(config)], capture_output=True, text=True, timeout=600)
    except subprocess.TimeoutExpired:
        return None, "timed out"
    if run.returncode != 0:
        return None, run.stderr[-2000:]
    return float(json.loads(run.stdout.strip().splitlines()[-1])["rel_error"]), run.stdout


@pytest.mark.parametrize("path", ["tma", "persistent"])
@pytest.mark.parametrize("layouts", ["cr", "cc"])
@pytest.mark.parametrize(("m", "n", "k"), SHAPES)
def test_the_refused_clusters_are_still_wrong(path: str, layouts: str, m: int, n: int,
                                              k: int) -> None:
    p = GemmProblem(m=m, n=n, k=k, dtype="bf16", layout_a=LAY[layouts[0]],
                    layout_b=LAY[layouts[1]])
    config = {**TILED, **PATHS[path]}
    assert cluster_violations(p, config, tma_a=True), "the search no longer refuses it"
    err, out = _lifted(p, config)
    assert err is None or err > 1e-2, (
        f"Triton now computes num_ctas=2 with a TMA-loaded column-major A right ({path}, "
        f"{layouts}, {m}x{n}x{k}: rel_error {err:.2e}): lift the refusal in "
        f"search/kinds/gemm/cluster.py and allow it here\n{out}")


@pytest.mark.parametrize("path", ["pointer", "tma", "persistent"])
@pytest.mark.parametrize("layouts", ["rr", "rc", "cr", "cc"])
@pytest.mark.parametrize(("m", "n", "k"), SHAPES)
def test_the_allowed_clusters_are_right(path: str, layouts: str, m: int, n: int,
                                        k: int) -> None:
    p = GemmProblem(m=m, n=n, k=k, dtype="bf16", layout_a=LAY[layouts[0]],
                    layout_b=LAY[layouts[1]])
    config = {**TILED, **PATHS[path]}
    if cluster_violations(p, config, tma_a=path != "pointer"):
        pytest.skip("refused (pinned by test_the_refused_clusters_are_still_wrong)")
    got = Measurement.from_dict(execute(Candidate(p, "triton", config).to_dict(), OPTS))
    assert got.status == Status.OK, got.error
    assert got.rel_error is not None and got.rel_error < 5e-3


@pytest.mark.parametrize("fp8", [True, False], ids=["fp8-problem", "bf16-lowered"])
@pytest.mark.parametrize("persistent", [0, 1])
def test_clusters_of_the_fp8_template_are_right(fp8: bool, persistent: int) -> None:
    p = (GemmProblem(m=1000, n=3008, k=2048, dtype="fp8_e4m3", layout_b="col") if fp8
         else GemmProblem(m=1000, n=3000, k=2000, dtype="bf16", layout_a="col"))
    config: dict[str, Any] = dict(BLOCK_M=128, BLOCK_N=128, BLOCK_K=128, GROUP_M=8,
                                  num_warps=8, num_stages=3, PERSISTENT=persistent, num_ctas=2)
    if not fp8:  # the quantised A is row-major whatever A's layout: never refused
        config.update(PRECISION="fp8_e4m3", SCALES="row")
    got = Measurement.from_dict(execute(Candidate(p, "triton", config).to_dict(), OPTS))
    assert got.status == Status.OK, got.error
    assert got.rel_error is not None
    assert got.rel_error < (1e-2 if fp8 else 0.06)
