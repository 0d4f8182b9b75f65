"""Cluster size (``num_ctas``, Triton's cluster launch on Hopper) of the Triton GEMM templates:
which clusters the search may propose and the templates launch.

With Triton 3.6 on an H100 a 2-CTA cluster computes wrong results (relative error ~1) when A is
column-major and loaded through TMA descriptors (the tiled TMA kernel and the persistent kernel
alike); row-major A with either B, and the pointer kernel with any layout, are right
(``docs/notes/kernels.md``). The rule is written once, here: the static constraints of the
tiers refuse such a configuration before it is proposed, and the launchers
(``kernel_templates.gemm.triton``) refuse it at launch. ``tests/gpu/test_clusters.py`` runs the
refused combination with the refusal lifted and checks that it is still wrong, so the day a
Triton upgrade fixes it that test fails and says to lift the refusal.

The fp8 template (``kernel_templates.gemm.fp8``) compiles in a 2-CTA cluster only for some
tiles: Triton 3.6 stops on the others for sm_90 ("LLVM ERROR: Failed to find a valid layout";
with per-row scales also an ``nvvm.mapa`` verifier error), found by compiling the template's
space for sm_90 on a CPU (``docs/notes/kernels.md``). ``fp8_cluster_refusal`` refuses those
tiles; ``tests/kernel_templates/test_fp8_sm90_compile.py`` compiles one and fails once it
compiles.
"""

from __future__ import annotations

from typing import Any

from search.kinds.gemm.spec import GemmProblem

__all__ = ["CLUSTER_SIZES", "cluster_refusal", "cluster_violations", "fp8_cluster_refusal"]

#: The cluster sizes the templates launch (1: no cluster).
CLUSTER_SIZES = (1, 2)


def cluster_refusal(num_ctas: int, a_col_tma: bool) -> str | None:
    """Why a launch of ``num_ctas`` CTAs per cluster is refused when A is (``a_col_tma``) a
    column-major operand loaded through TMA; ``None`` when it may run."""
    if num_ctas > 1 and a_col_tma:
        return (f"num_ctas={num_ctas} with a column-major A through TMA loads is refused: "
                "Triton 3.6 computes it wrong on Hopper (tests/gpu/test_clusters.py)")
    return None


def cluster_violations(problem: GemmProblem, config: dict[str, Any], *, tma_a: bool
                       ) -> list[str]:
    """The cluster rule for a configuration whose kernel loads A through TMA (``tma_a``) as
    ``problem`` stores it: empty when it may run."""
    num_ctas = int(config.get("num_ctas", 1))
    if num_ctas not in CLUSTER_SIZES:
        return [f"num_ctas={num_ctas} is not one of {list(CLUSTER_SIZES)}"]
    why = cluster_refusal(num_ctas, tma_a and problem.layout_a == "col")
    return [why] if why else []


def fp8_cluster_refusal(config: dict[str, Any], row_scales: bool) -> str | None:
    """Why the fp8 template's ``config`` (per-row scales: ``row_scales``) is refused in a
    cluster: Triton 3.6 cannot compile it for sm_90; ``None`` when it compiles. Where the
    template is compiled for sm_90: every 2-CTA tile with BLOCK_M=256, and BLOCK_M=128 on 4
    warps with BLOCK_N<=64 (with per-row scales, any BLOCK_N); whatever BLOCK_K, stages,
    persistence, accumulation and store."""
    num_ctas = int(config.get("num_ctas", 1))
    bm, bn, warps = config["BLOCK_M"], config["BLOCK_N"], config["num_warps"]
    if num_ctas == 1 or not (bm >= 256 or (bm == 128 and warps <= 4
                                           and (bn <= 64 or row_scales))):
        return None
    scales = "per-row scales" if row_scales else "per-tensor scales"
    error = "an nvvm.mapa verifier error" if bm == 128 and bn > 64 else \
        "\"Failed to find a valid layout\""
    return (f"num_ctas={num_ctas} with a {bm}x{bn} tile on {warps} warps ({scales}) is refused: "
            f"Triton 3.6 cannot compile it for sm_90 ({error}; "
            "tests/kernel_templates/test_fp8_sm90_compile.py)")
