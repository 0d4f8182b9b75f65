"""The GEMM backends of the hard-shape tiers (``search.kinds.gemm.hard_tiers``) in the registry:

- ``repaired`` (library side): the alignment repair's fused copy (``repair.py``), then cuBLAS
  (``torch.matmul``) or a CUTLASS operation on the packed, zero-padded copies. Configs
  ``{"inner": "cublas" | "cutlass", "b_layout": ..., ["plan": "padded" | "views" | "split"],
  [CUTLASS's "op", "raster", "swizzle", "splits"]}``: ``"views"`` (cuBLAS only) runs on views of
  the true extents of copies whose rows are aligned, as the Triton side does, writing C
  directly; ``"split"`` (cuBLAS only, ``b_layout`` ``"keep"``) copies A's aligned columns and
  writes the K tail's product to C in one launch, then adds cuBLAS's aligned product to C
  (``addmm_``, beta 1) with B read in place (``alignment.RepairPlan.split_of``); the CUTLASS
  operations are those of the padded problem, built ahead by the worker like the ``cutlass``
  backend's.
- ``triton_repair``: the copy, then the tiled or the stream-K Triton template on views of the
  copies (``search.kinds.gemm.repair_space`` configs).
- ``triton_streamk``: the stream-K template (``streamk.py``).
- ``triton_skinny``: the one-launch skinny split-K template (``skinny.py``).

``register`` is called by ``backends.register`` with the CUTLASS helpers it owns (the loaded
kernel of an operation, the operations serving a problem), so this module needs no import of
it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from kernel_templates import registry
from kernel_templates.configs import check_keys
from kernel_templates.errors import InvalidConfig, Unsupported
from kernel_templates.gemm.cutlass import hosting
from kernel_templates.gemm.inputs import GemmInputs
from kernel_templates.registry import Preparer
from search.kinds.gemm import hard_tiers, repair_space, skinny_space, streamk_space
from search.kinds.gemm.alignment import B_LAYOUTS, RepairPlan, unaligned
from search.kinds.gemm.spec import GemmProblem
from search.types import Candidate

__all__ = ["check_repaired_config", "register"]

KernelCall = registry.KernelCall
#: The CUTLASS knobs a ``repaired`` config with a CUTLASS inner kernel carries.
CUTLASS_KEYS = ("op", "raster", "swizzle", "splits")
INNERS = ("cublas", "cutlass")
#: How a ``repaired`` config lays out the copies (``alignment.RepairPlan``).
PLANS = ("padded", "views", "split")


# -- configurations -----------------------------------------------------------------------------
def check_repaired_config(config: dict[str, Any]) -> dict[str, Any]:
    """A ``repaired`` configuration checked (``InvalidConfig`` otherwise)."""
    inner = config.get("inner")
    if inner not in INNERS:
        raise InvalidConfig(f"inner must be one of {list(INNERS)}, got {inner!r}")
    check_keys(config, ("inner", "b_layout", *(CUTLASS_KEYS if inner == "cutlass" else ())),
               ("plan",))
    if config["b_layout"] not in B_LAYOUTS:
        raise InvalidConfig(f"b_layout must be one of {list(B_LAYOUTS)}, got "
                            f"{config['b_layout']!r}")
    plan = config.get("plan", "padded")
    if plan not in PLANS:
        raise InvalidConfig(f"plan must be one of {list(PLANS)}, got {plan!r}")
    if plan != "padded" and inner != "cublas":
        raise InvalidConfig("CUTLASS runs on the padded plan only (packed operands whose "
                            "contiguous extents are aligned)")
    if plan == "split" and config["b_layout"] != "keep":
        raise InvalidConfig("the split plan reads B in place: b_layout must be 'keep'")
    return {**config, "plan": plan}


def _plan(problem: GemmProblem, b_layout: Any, padded: bool, split: bool = False
          ) -> RepairPlan:
    try:
        if split:
            return RepairPlan.split_of(problem)
        return RepairPlan.of(problem, str(b_layout), padded)
    except ValueError as exc:
        raise InvalidConfig(str(exc)) from None


def _repair_supports(problem: GemmProblem) -> None:
    if problem.dtype not in hard_tiers.DTYPES:
        raise Unsupported(f"the alignment repair copies {', '.join(hard_tiers.DTYPES)} "
                          f"operands, not {problem.dtype}")
    if problem.batch != 1:
        raise Unsupported("the alignment repair serves batch 1")
    if not unaligned(problem):
        raise Unsupported(f"{problem.describe()} is aligned: nothing to repair")


def _batch1(name: str) -> Callable[[GemmProblem], None]:
    def supports(problem: GemmProblem) -> None:
        if problem.dtype not in hard_tiers.DTYPES:
            raise Unsupported(f"{name} multiplies {', '.join(hard_tiers.DTYPES)}, not "
                              f"{problem.dtype}")
        if problem.batch != 1:
            raise Unsupported(f"{name} serves batch 1")
    return supports


def _limits(mode: str, smem: int) -> Any:
    from search.limits import limits_for

    return limits_for(mode, smem)


# -- factories ---------------------------------------------------------------------------------
def _repaired_factory(cutlass_kernel: Callable[[Any], Any],
                      cutlass_ops: Callable[[GemmProblem], dict[str, Any]]):
    def factory(candidate: Candidate, inputs: GemmInputs) -> KernelCall:
        from kernel_templates.gemm.repair import RepairedCall

        config = check_repaired_config(candidate.config)
        plan = _plan(candidate.problem, config["b_layout"], padded=config["plan"] == "padded",
                     split=config["plan"] == "split")
        if not plan.padded and "C" in unaligned(candidate.problem):
            raise InvalidConfig("the views plan writes C in place: its rows must be aligned")
        if config["inner"] == "cublas":
            if plan.problem.out_dtype != plan.problem.dtype:
                raise Unsupported("cublas through torch.matmul writes the input dtype only")

            def inner(a_in: torch.Tensor, b_in: torch.Tensor, c: torch.Tensor) -> KernelCall:
                def call() -> torch.Tensor:
                    # a process-wide flag: set on every call (full fp32, as the cublas backend)
                    torch.backends.cuda.matmul.allow_tf32 = False
                    if plan.tail:  # C holds the K tail's product: add the aligned one to it
                        return c.addmm_(a_in, b_in)
                    return torch.matmul(a_in, b_in, out=c)
                return call
        else:
            inner = _cutlass_inner(plan, config, cutlass_kernel, cutlass_ops)
        return RepairedCall(plan, inputs.a, inputs.b, inputs.out, inner)

    return factory


def _cutlass_inner(plan: RepairPlan, config: dict[str, Any],
                   cutlass_kernel: Callable[[Any], Any],
                   cutlass_ops: Callable[[GemmProblem], dict[str, Any]]):
    from search.kinds.gemm.cutlass_space import violations

    if not torch.cuda.is_available():
        raise Unsupported("cutlass kernels run on a CUDA GPU only (not in the CPU interpreter)")
    major, minor = torch.cuda.get_device_capability()
    if major != 9:
        raise Unsupported(f"cutlass kernels are built for sm_90a; this GPU is sm_{major}{minor}")
    knobs = {k: config[k] for k in CUTLASS_KEYS}
    ops = cutlass_ops(plan.inner)
    reasons = violations(plan.inner, knobs, ops)
    if reasons:
        raise InvalidConfig("; ".join(reasons))
    kernel = cutlass_kernel(ops[knobs["op"]])

    def inner(a_in: torch.Tensor, b_in: torch.Tensor, c: torch.Tensor) -> KernelCall:
        return kernel.bind(a_in, b_in, c, raster=str(knobs["raster"]),
                           swizzle=int(knobs["swizzle"]), splits=int(knobs["splits"]))
    return inner


def _triton_repair(candidate: Candidate, inputs: GemmInputs) -> KernelCall:
    from kernel_templates.gemm.repair import RepairedCall

    config = dict(candidate.config)
    inner_name = config.get("INNER")
    if inner_name not in repair_space.INNERS:
        raise InvalidConfig(f"INNER must be one of {list(repair_space.INNERS)}, got "
                            f"{inner_name!r}")
    plan = _plan(candidate.problem, config.get("B_LAYOUT"), padded=False)
    inner_cfg = repair_space.inner_config(config)
    if inner_name == "tiles":
        from kernel_templates.gemm.triton import check_config, matmul

        tiled = check_config(inner_cfg)

        def inner(a_in: torch.Tensor, b_in: torch.Tensor, c: torch.Tensor) -> KernelCall:
            return lambda: matmul(a_in, b_in, tiled, out=c)
    else:
        from kernel_templates.gemm.streamk import check_streamk_config, matmul_streamk

        sk = check_streamk_config(inner_cfg)

        def inner(a_in: torch.Tensor, b_in: torch.Tensor, c: torch.Tensor) -> KernelCall:
            return lambda: matmul_streamk(a_in, b_in, sk, out=c)
    return RepairedCall(plan, inputs.a, inputs.b, inputs.out, inner)


def _triton_streamk(candidate: Candidate, inputs: GemmInputs) -> KernelCall:
    from kernel_templates.gemm.streamk import check_streamk_config, matmul_streamk

    config = check_streamk_config(candidate.config)
    a, b, out = inputs.a, inputs.b, inputs.out
    return lambda: matmul_streamk(a, b, config, out=out)


def _triton_skinny(candidate: Candidate, inputs: GemmInputs) -> KernelCall:
    from kernel_templates.gemm.skinny import check_skinny_config, matmul_skinny

    config = check_skinny_config(candidate.config)
    a, b, out = inputs.a, inputs.b, inputs.out
    return lambda: matmul_skinny(a, b, config, out=out)


# -- static checks -------------------------------------------------------------------------------
def _repair_static(problem: GemmProblem, config: dict[str, Any], mode: str, smem: int
                   ) -> list[str]:
    return repair_space.violations(problem, config, _limits(mode, smem))


def _streamk_static(problem: GemmProblem, config: dict[str, Any], mode: str, smem: int
                    ) -> list[str]:
    return streamk_space.violations(problem, config, _limits(mode, smem))


def _skinny_static(problem: GemmProblem, config: dict[str, Any], mode: str, smem: int
                   ) -> list[str]:
    # the barrier's grid limit needs the SM count: the launcher refuses it (Unsupported)
    return skinny_space.violations(problem, config, _limits(mode, smem))


def _repaired_unit(candidate: Candidate) -> str | None:
    """A ``repaired`` candidate's build unit: its CUTLASS operation, if it runs one."""
    return hosting.op_of(candidate) if candidate.config.get("inner") == "cutlass" else None


def register(cutlass_kernel: Callable[[Any], Any],
             cutlass_ops: Callable[[GemmProblem], dict[str, Any]]) -> None:
    """Register the four backends (``cutlass_kernel(op)``: the loaded kernel of a CUTLASS
    operation; ``cutlass_ops(problem)``: the operations serving a problem, by name)."""
    registry.register("gemm", hard_tiers.REPAIRED,
                      _repaired_factory(cutlass_kernel, cutlass_ops), supports=_repair_supports,
                      prepare=Preparer(unit=_repaired_unit, build=lambda cands: (
                          hosting.build_ahead([c for c in cands if _repaired_unit(c)]))))
    registry.register("gemm", hard_tiers.TRITON_REPAIR, _triton_repair,
                      supports=_repair_supports, static_check=_repair_static, warm_up=True)
    registry.register("gemm", hard_tiers.TRITON_STREAMK, _triton_streamk,
                      supports=_batch1(hard_tiers.TRITON_STREAMK), static_check=_streamk_static,
                      warm_up=True)
    registry.register("gemm", hard_tiers.TRITON_SKINNY, _triton_skinny,
                      supports=_batch1(hard_tiers.TRITON_SKINNY), static_check=_skinny_static,
                      warm_up=True)
