"""The alignment repair as a candidate family (``search.kinds.gemm.alignment`` has the plan):
the library configurations of the ``repaired`` backend, and the search spaces of the two custom
tiers that run a Triton kernel on repaired operands (backend ``triton_repair``).

Library side (``library_configs``): cuBLAS on the split plan where it applies (only A copied,
as the Triton side does, with the K tail's product written to C in the copy's launch:
``alignment.split_applies``), cuBLAS on the padded copies with B row-major and K-major, cuBLAS
on the views plan's copies where C's rows are aligned (only the unaligned operands copied, as
the Triton side does), and the best-ranked CUTLASS operations of the padded problem (the
declared catalogue ranked for it: ``search.kinds.gemm.library``), each
``{"inner": ..., "b_layout": ..., ["plan": "views" | "split"], [CUTLASS knobs]}``.

Custom side: a configuration is the inner Triton template's plus ``INNER`` (``"tiles"``: the
tiled template, split-K included; ``"streamk"``: the stream-K template) and ``B_LAYOUT`` (how a
copied B is stored, or ``"keep"`` for an aligned B left in place)::

    {"INNER": "tiles", "B_LAYOUT": "row", "BLOCK_M": 128, ..., "SPLITK_MODE": "serial", ...}
"""

from __future__ import annotations

from typing import Any

from search.kinds.gemm import library, streamk_space, triton_constraints, triton_space
from search.kinds.gemm.alignment import RepairPlan, b_layouts, split_applies, unaligned
from search.kinds.gemm.cutlass_catalogue import Catalogue
from search.kinds.gemm.spec import GemmProblem
from search.limits import DeviceLimits
from search.optimizer import Choice

__all__ = ["INNERS", "REPAIR_KEYS", "complete", "inner_config", "library_configs", "seeds",
           "space", "violations"]

#: The inner templates of the custom side, by tier.
INNERS = ("tiles", "streamk")
#: The keys the repair adds to the inner template's configuration.
REPAIR_KEYS = ("INNER", "B_LAYOUT")
#: The stream-K inner template's orders searched (rows only: the repair tier's shapes keep the
#: template's default).
REPAIR_ORDERS = ("rows",)
#: CUTLASS operations ranked for the padded problem per B layout (each may need a build).
CUTLASS_PER_LAYOUT = 2


def library_configs(problem: GemmProblem, gpu_model: str, catalogue: Catalogue | None,
                    cutlass: bool) -> tuple[list[dict[str, Any]], list[str]]:
    """The ``repaired`` backend's configurations for ``problem`` and notes on what was left
    out (``cutlass``: whether the job allows CUTLASS)."""
    configs: list[dict[str, Any]] = []
    notes: list[str] = []
    if split_applies(problem):
        configs.append({"inner": "cublas", "b_layout": "keep", "plan": "split"})
    for layout in b_layouts(problem, padded=True):
        configs.append({"inner": "cublas", "b_layout": layout})
    if "C" not in unaligned(problem):
        for layout in b_layouts(problem, padded=False):
            configs.append({"inner": "cublas", "b_layout": layout, "plan": "views"})
    if not cutlass:
        return configs, notes
    for layout in b_layouts(problem, padded=True):
        inner = RepairPlan.of(problem, layout, padded=True).inner
        ranked, why = library.cutlass_configs(inner, gpu_model, CUTLASS_PER_LAYOUT, catalogue)
        configs += [{"inner": "cutlass", "b_layout": layout, **c} for c in ranked]
        if why and why not in notes:
            notes.append(f"Repaired CUTLASS (B {layout}): {why}")
    return configs, notes


def inner_config(config: dict[str, Any]) -> dict[str, Any]:
    """The inner template's part of a ``triton_repair`` configuration."""
    return {k: v for k, v in config.items() if k not in REPAIR_KEYS}


def space(problem: GemmProblem, inner: str) -> tuple[Choice, ...]:
    """``B_LAYOUT`` and the inner template's dimensions (the tiled template's untiered space:
    tiles and split-K)."""
    layouts = Choice("B_LAYOUT", b_layouts(problem, padded=False))
    if inner == "tiles":
        return (layouts, *triton_space.space(problem, None))
    if inner == "streamk":
        return (layouts, *streamk_space.space(problem, REPAIR_ORDERS))
    raise ValueError(f"unknown inner template {inner!r}; one of {INNERS}")


def complete(inner: str):
    """The ``complete`` of the inner ``inner``'s space: fills the template's other keys and
    names the inner template."""
    fill = triton_space.complete if inner == "tiles" else streamk_space.complete

    def done(config: dict[str, Any]) -> dict[str, Any]:
        return {"INNER": inner, "B_LAYOUT": config["B_LAYOUT"], **fill(inner_config(config))}

    return done


def violations(problem: GemmProblem, config: dict[str, Any], limits: DeviceLimits
               ) -> list[str]:
    """The inner template's static rules, and a ``B_LAYOUT`` the problem allows."""
    out: list[str] = []
    layouts = b_layouts(problem, padded=False)
    if config.get("B_LAYOUT") not in layouts:
        out.append(f"B_LAYOUT={config.get('B_LAYOUT')!r} is not one of {layouts} for this "
                   "problem")
    inner = config.get("INNER")
    if inner == "tiles":
        out += triton_constraints.violations(problem, inner_config(config), limits)
    elif inner == "streamk":
        out += streamk_space.violations(problem, inner_config(config), limits)
    else:
        out.append(f"INNER={inner!r} is not one of {INNERS}")
    return out


def seeds(problem: GemmProblem, inner: str) -> list[dict[str, Any]]:
    """The inner template's seeds with the first ``B_LAYOUT``; the best-ranked one also with
    B K-major, second (K-major B is what the ``TN`` kernels read: where it pays is measured)."""
    base = (triton_space.seeds(problem, None) if inner == "tiles"
            else streamk_space.seeds(problem, REPAIR_ORDERS))
    first = b_layouts(problem, padded=False)[0]
    done = complete(inner)
    out = [done({"B_LAYOUT": first, **s}) for s in base]
    if out and first != "kmajor":
        out.insert(1, done({"B_LAYOUT": "kmajor", **base[0]}))
    return out
