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
"""

from __future__ import annotations

from typing import Any

from search.kinds.gemm.spec import GemmProblem

__all__ = ["CLUSTER_SIZES", "cluster_refusal", "cluster_violations"]

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
