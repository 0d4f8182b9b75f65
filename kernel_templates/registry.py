"""Backend name -> implementation: turns a ``Candidate`` and an input set into a callable.

The callable takes no arguments and writes into the input set's output buffer, so a benchmark
times the kernel alone. A backend that does not exist, or does not serve the problem's dtypes,
raises ``Unsupported`` (recorded as ``Status.UNSUPPORTED``) before anything runs.

fp8 e4m3 problems are scaled (``GemmProblem.scaled``): the input set carries per-tensor scales,
``cublas`` runs ``torch._scaled_mm`` with them and ``cutlass`` gets alpha = scale_a * scale_b on
the device; Triton has no fp8 template and refuses them.

``cutlass`` candidates (``search.spaces.cutlass_gemm`` configs) load their operation from the
CUTLASS artifact cache (``kernel_templates.cutlass``), compiling it first when the worker's
``prepare`` did not; nvcc failing raises ``kernel_templates.cutlass.CompileError``
(``Status.COMPILE_ERROR``), a launcher's non-zero status ``CutlassError``
(``Status.LAUNCH_ERROR``).
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable
from typing import Any

import torch

from kernel_templates.errors import Unsupported
from kernel_templates.inputs import GemmInputs, torch_dtype
from search.types import Backend, Candidate, GemmProblem, ProblemError, check_served

__all__ = ["BACKENDS", "check_supported", "cutlass_kernel", "make_callable"]

KernelCall = Callable[[], torch.Tensor]


def _cublas(candidate: Candidate, inputs: GemmInputs) -> KernelCall:
    from kernel_templates.errors import InvalidConfig
    from kernel_templates.library import cublas_matmul, cublas_scaled_mm

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


def _scales(inputs: GemmInputs) -> tuple[torch.Tensor, torch.Tensor]:
    """The input set's per-tensor scales; a scaled problem's inputs always carry both."""
    if inputs.scale_a is None or inputs.scale_b is None:
        raise ValueError("a scaled (fp8) problem's inputs need scale_a and scale_b")
    return inputs.scale_a, inputs.scale_b


def _triton(candidate: Candidate, inputs: GemmInputs) -> KernelCall:
    from kernel_templates.triton.gemm import check_config, matmul

    config = check_config(candidate.config)  # a bad config fails here, before any launch
    a, b, out = inputs.a, inputs.b, inputs.out
    return lambda: matmul(a, b, config, out=out)


# -- CUTLASS --------------------------------------------------------------------------------------
_CUTLASS_LOCK = threading.Lock()
_CUTLASS_KERNELS: dict[str, Any] = {}  # op name -> CutlassKernel, per process


@functools.lru_cache(maxsize=64)
def _cutlass_ops(problem: GemmProblem) -> dict[str, Any]:
    """The CUTLASS operations serving ``problem`` by name (enumeration is slow: once each)."""
    from kernel_templates import cutlass as kc

    return {op.name: op for op in kc.ops_for(problem)}


@functools.cache
def _cutlass_toolchain() -> Any:
    from kernel_templates import cutlass as kc

    return kc.toolchain()  # CompileError when nvcc cannot run


def cutlass_kernel(op: Any) -> Any:
    """The loaded kernel of CUTLASS operation ``op``: from the artifact cache, built first when
    missing (in the calling process, usually the benchmark child after ``prepare`` missed it).
    Raises ``kernel_templates.cutlass.CompileError`` when nvcc fails or is missing."""
    from kernel_templates import cutlass as kc

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
    from kernel_templates.errors import InvalidConfig
    from search.spaces.cutlass_gemm import violations

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


#: Registered backends and how each builds its callable.
BACKENDS: dict[str, Callable[[Candidate, GemmInputs], KernelCall]] = {
    Backend.CUBLAS.value: _cublas,
    Backend.CUTLASS.value: _cutlass,
    Backend.TRITON.value: _triton,
}


def check_supported(backend: str, problem: GemmProblem) -> None:
    """Raise ``Unsupported`` unless ``backend`` serves ``problem``."""
    if backend not in BACKENDS:
        raise Unsupported(f"unknown backend {backend!r}; one of {sorted(BACKENDS)}")
    torch_dtype(problem.dtype)
    torch_dtype(problem.out_dtype or problem.dtype)
    if backend == Backend.TRITON.value and problem.scaled:
        raise Unsupported(f"triton has no {problem.dtype} template (kernel_templates/triton "
                          "multiplies bf16, fp16 and fp32); the library backends serve it")
    if backend == Backend.CUBLAS.value and problem.scaled:
        try:
            check_served(problem)  # torch._scaled_mm's rules: TN, 2-D, k and n % 16
        except ProblemError as exc:
            raise Unsupported(f"cublas (torch._scaled_mm) cannot serve {problem.describe()}: "
                              f"{exc}") from None
    elif backend == Backend.CUBLAS.value and problem.out_dtype != problem.dtype:
        raise Unsupported("cublas through torch.matmul writes the input dtype only")
    if backend == Backend.CUTLASS.value:
        from kernel_templates.cutlass import why_unsupported

        why = why_unsupported(problem)
        if why:
            raise Unsupported(f"cutlass cannot serve {problem.describe()}: {why}")


def make_callable(candidate: Candidate, inputs: GemmInputs) -> KernelCall:
    """A no-argument callable that runs ``candidate`` on ``inputs`` into ``inputs.out``."""
    check_supported(candidate.backend, candidate.problem)
    return BACKENDS[candidate.backend](candidate, inputs)
