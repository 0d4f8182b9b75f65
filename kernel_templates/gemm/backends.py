"""GEMM's kernels in the registry: cuBLAS, cuBLASLt's other algorithms, CUTLASS and the tiled
Triton template (and, through ``hard_backends``, the repaired library and the repair, stream-K
and skinny Triton kernels).

``cublaslt`` candidates name an algorithm of cuBLASLt's heuristic ranking for the problem
(``{"rank": r}``, optionally ``"split_k"``; ``kernel_templates.gemm.cublaslt``), resolved on
the worker; they run on a CUDA GPU only.

``register`` (called by ``kernel_templates.registry`` on the first GEMM lookup) registers the
GEMM ``KernelKind`` (``inputs.make_inputs``, ``reference``) and one factory per backend; each
factory turns a ``Candidate`` and a ``GemmInputs`` into a callable that writes ``inputs.out``.

fp8 e4m3 problems are scaled (``GemmProblem.scaled``): the input set carries per-tensor scales,
``cublas`` runs ``torch._scaled_mm`` with them, ``cutlass`` gets alpha = scale_a * scale_b on
the device and ``triton`` runs its fp8 template (``kernel_templates/gemm/fp8.py``). A ``triton``
config that names a ``PRECISION`` (``fp8_e4m3``) on a bf16/fp16 problem is a lowered candidate:
the same template, its inputs quantised inside the call.

``cutlass`` candidates (``search.kinds.gemm.cutlass_space`` configs) load their operation from the
CUTLASS artifact cache (``kernel_templates.gemm.cutlass``), compiling it first when the worker's
``prepare`` did not; nvcc failing raises ``kernel_templates.gemm.cutlass.CompileError``
(``Status.COMPILE_ERROR``), a launcher's non-zero status ``CutlassError``
(``Status.LAUNCH_ERROR``).

What a worker host needs is registered here too: ``cutlass`` is available on sm_90 with
``cutlass_library`` and nvcc, declares its operation catalogue and builds a batch's operations
ahead with parallel nvcc (``kernel_templates.gemm.cutlass.hosting``); ``triton`` kernels are
warmed up in the worker's compile pool; ``cublas`` runs wherever torch does.
"""

from __future__ import annotations

import functools
import threading
from typing import Any

import torch

from kernel_templates import registry
from kernel_templates.errors import InvalidConfig, Unsupported
from kernel_templates.gemm import hard_backends
from kernel_templates.gemm.cutlass import hosting
from kernel_templates.gemm.fp8_config import is_lowered
from kernel_templates.gemm.inputs import GemmInputs, make_inputs, torch_dtype
from kernel_templates.gemm.reference import reference_for, rel_error, tolerance_for
from search.kinds.gemm.spec import Backend, GemmProblem, check_served
from search.types import Candidate, ProblemError

__all__ = ["cutlass_kernel", "register"]

KernelCall = registry.KernelCall


def _cublas(candidate: Candidate, inputs: GemmInputs) -> KernelCall:
    from kernel_templates.gemm.cublas import cublas_matmul, cublas_scaled_mm

    unknown = set(candidate.config) - {"allow_tf32"}
    if unknown:
        raise InvalidConfig(f"cublas takes only allow_tf32; unknown keys {sorted(unknown)}")
    tf32 = bool(candidate.config.get("allow_tf32", False))
    if tf32 and candidate.problem.dtype != "fp32":
        raise InvalidConfig("allow_tf32 applies to fp32 inputs only")
    a, b, out = inputs.a, inputs.b, inputs.out
    if candidate.problem.scaled:
        scale_a, scale_b = _scales(inputs)
        return lambda: cublas_scaled_mm(a, b, scale_a, scale_b, out)

    def call() -> torch.Tensor:
        # A process-wide flag: set on every call so the other contender's setting never leaks.
        torch.backends.cuda.matmul.allow_tf32 = tf32
        return cublas_matmul(a, b, out=out)

    return call


def _cublaslt(candidate: Candidate, inputs: GemmInputs) -> KernelCall:
    from kernel_templates.gemm.cublaslt import LtGemm, check_config, resolve

    check_config(candidate.config)  # a bad config fails here, before any device work
    gemm = LtGemm(inputs.a, inputs.b, inputs.out)
    return gemm.launcher(resolve(gemm, candidate.config))


def _cublaslt_supports(problem: GemmProblem) -> None:
    if problem.scaled or problem.out_dtype != problem.dtype:
        raise Unsupported("cublaslt serves bf16, fp16 and fp32 products that write their input "
                          "dtype")


def _cuda_only(device: Any) -> str | None:
    """The ``available`` hook of a backend that needs a CUDA GPU."""
    if device.mode != "cuda":
        return "cuBLASLt runs on a CUDA GPU only, not in the CPU interpreter"
    return None


def _scales(inputs: GemmInputs) -> tuple[torch.Tensor, torch.Tensor]:
    """The input set's per-tensor scales; a scaled problem's inputs always carry both."""
    if inputs.scale_a is None or inputs.scale_b is None:
        raise ValueError("a scaled (fp8) problem's inputs need scale_a and scale_b")
    return inputs.scale_a, inputs.scale_b


def _triton(candidate: Candidate, inputs: GemmInputs) -> KernelCall:
    from kernel_templates.gemm.triton import check_config, matmul

    a, b, out = inputs.a, inputs.b, inputs.out
    if candidate.problem.scaled or is_lowered(candidate.config):
        return _triton_fp8(candidate, inputs)
    config = check_config(candidate.config)  # a bad config fails here, before any launch
    return lambda: matmul(a, b, config, out=out)


def _triton_fp8(candidate: Candidate, inputs: GemmInputs) -> KernelCall:
    """The fp8 template: an fp8 problem's scaled product, or a bf16/fp16 one lowered to fp8."""
    from kernel_templates.gemm.fp8 import lowered_matmul, scaled_matmul
    from kernel_templates.gemm.fp8_config import check_config

    problem = candidate.problem
    config = check_config(candidate.config, lowered=not problem.scaled)  # before any launch
    a, b, out = inputs.a, inputs.b, inputs.out
    if problem.scaled:
        scale_a, scale_b = _scales(inputs)
        return lambda: scaled_matmul(a, b, scale_a, scale_b, config, out)
    return lambda: lowered_matmul(a, b, config, out)


# -- CUTLASS --------------------------------------------------------------------------------------
_CUTLASS_LOCK = threading.Lock()
_CUTLASS_KERNELS: dict[str, Any] = {}  # op name -> CutlassKernel, per process


@functools.lru_cache(maxsize=64)
def _cutlass_ops(problem: GemmProblem) -> dict[str, Any]:
    """The CUTLASS operations serving ``problem`` by name (enumeration is slow: once each)."""
    from kernel_templates.gemm import cutlass as kc

    return {op.name: op for op in kc.ops_for(problem)}


@functools.cache
def _cutlass_toolchain() -> Any:
    from kernel_templates.gemm import cutlass as kc

    return kc.toolchain()  # CompileError when nvcc cannot run


def cutlass_kernel(op: Any) -> Any:
    """The loaded kernel of CUTLASS operation ``op``: from the artifact cache, built first when
    missing (in the calling process, usually the benchmark child after ``prepare`` missed it).
    Raises ``kernel_templates.gemm.cutlass.CompileError`` when nvcc fails or is missing."""
    from kernel_templates.gemm import cutlass as kc

    with _CUTLASS_LOCK:
        kernel = _CUTLASS_KERNELS.get(op.name)
        if kernel is not None:
            return kernel
        tc = _cutlass_toolchain()
        cache = kc.CutlassCache()
        try:
            kernel = kc.load(op.name, cache, tc=tc)
        except LookupError:
            result = kc.build([op], cache, tc=tc, jobs=1)
            if op.name in result.errors:
                raise result.errors[op.name] from None
            kernel = kc.load(op.name, cache, artifact=result.artifacts[op.name], tc=tc)
        _CUTLASS_KERNELS[op.name] = kernel
        return kernel


def _cutlass(candidate: Candidate, inputs: GemmInputs) -> KernelCall:
    from search.kinds.gemm.cutlass_space import violations

    device = inputs.a.device
    if device.type != "cuda":
        raise Unsupported("cutlass kernels run on a CUDA GPU only (not in the CPU interpreter)")
    major, minor = torch.cuda.get_device_capability(device)
    if major != 9:
        raise Unsupported(f"cutlass kernels are built for sm_90a; this GPU is sm_{major}{minor}")
    problem, config = candidate.problem, dict(candidate.config)
    ops = _cutlass_ops(problem)
    reasons = violations(problem, config, ops)
    if reasons:
        raise InvalidConfig("; ".join(reasons))
    kernel = cutlass_kernel(ops[config["op"]])
    # fp8: alpha = scale_a * scale_b, computed on the device (torch._scaled_mm's semantics)
    scale_a, scale_b = _scales(inputs) if problem.scaled else (None, None)
    return kernel.bind(inputs.a, inputs.b, inputs.out, scale_a=scale_a, scale_b=scale_b,
                       raster=str(config["raster"]), swizzle=int(config["swizzle"]),
                       splits=int(config["splits"]))


def _check_dtypes(problem: GemmProblem) -> None:
    torch_dtype(problem.dtype)
    torch_dtype(problem.out_dtype or problem.dtype)


def _triton_supports(problem: GemmProblem) -> None:
    if problem.scaled:
        try:
            check_served(problem)  # the fp8 template's rules too: TN, 2-D
        except ProblemError as exc:
            raise Unsupported(f"the triton fp8 template cannot serve {problem.describe()}: "
                              f"{exc}") from None


def _triton_static(problem: GemmProblem, config: dict[str, Any], mode: str, smem: int
                   ) -> list[str]:
    from search.limits import limits_for

    if problem.scaled or is_lowered(config):
        from search.kinds.gemm import fp8_space

        return fp8_space.violations(problem, fp8_space.complete(config, not problem.scaled),
                                    limits_for(mode, smem))
    from search.kinds.gemm.triton_constraints import violations

    return violations(problem, config, limits_for(mode, smem))


def _cublas_supports(problem: GemmProblem) -> None:
    if problem.scaled:
        try:
            check_served(problem)  # torch._scaled_mm's rules: TN, 2-D, k and n % 16
        except ProblemError as exc:
            raise Unsupported(f"cublas (torch._scaled_mm) cannot serve {problem.describe()}: "
                              f"{exc}") from None
    elif problem.out_dtype != problem.dtype:
        raise Unsupported("cublas through torch.matmul writes the input dtype only")


def _cutlass_supports(problem: GemmProblem) -> None:
    from kernel_templates.gemm.cutlass import why_unsupported

    why = why_unsupported(problem)
    if why:
        raise Unsupported(f"cutlass cannot serve {problem.describe()}: {why}")


def register() -> None:
    """Register the GEMM kind and its cuBLAS, CUTLASS and Triton kernels."""
    registry.register_kind(registry.KernelKind(
        name="gemm", make_inputs=make_inputs,
        reference=lambda problem, inputs: reference_for(inputs), rel_error=rel_error,
        tolerance=tolerance_for, check=_check_dtypes, preload=("torch", "triton")))
    registry.register("gemm", Backend.CUBLAS.value, _cublas, supports=_cublas_supports)
    registry.register("gemm", Backend.CUBLASLT.value, _cublaslt, supports=_cublaslt_supports,
                      available=_cuda_only)
    registry.register("gemm", Backend.CUTLASS.value, _cutlass, supports=_cutlass_supports,
                      available=hosting.available, catalogue=hosting.catalogue,
                      prepare=hosting.PREPARER)
    registry.register("gemm", Backend.TRITON.value, _triton, supports=_triton_supports,
                      static_check=_triton_static, warm_up=True)
    hard_backends.register(cutlass_kernel, _cutlass_ops)
