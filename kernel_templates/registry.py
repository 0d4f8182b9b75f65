"""Backend name -> implementation: turns a ``Candidate`` and an input set into a callable.

The callable takes no arguments and writes into the input set's output buffer, so a benchmark
times the kernel alone. A backend that does not exist, or does not serve the problem's dtypes,
raises ``Unsupported`` (recorded as ``Status.UNSUPPORTED``) before anything runs.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from kernel_templates.errors import Unsupported
from kernel_templates.inputs import GemmInputs, torch_dtype
from search.types import Backend, Candidate, GemmProblem

__all__ = ["BACKENDS", "check_supported", "make_callable"]

KernelCall = Callable[[], torch.Tensor]


def _cublas(candidate: Candidate, inputs: GemmInputs) -> KernelCall:
    from kernel_templates.errors import InvalidConfig
    from kernel_templates.library import cublas_matmul

    unknown = set(candidate.config) - {"allow_tf32"}
    if unknown:
        raise InvalidConfig(f"cublas takes only allow_tf32; unknown keys {sorted(unknown)}")
    tf32 = bool(candidate.config.get("allow_tf32", False))
    if tf32 and candidate.problem.dtype != "fp32":
        raise InvalidConfig("allow_tf32 applies to fp32 inputs only")
    a, b, out = inputs.a, inputs.b, inputs.out

    def call() -> torch.Tensor:
        # A process-wide flag: set on every call so the other contender's setting never leaks.
        torch.backends.cuda.matmul.allow_tf32 = tf32
        return cublas_matmul(a, b, out=out)

    return call


def _triton(candidate: Candidate, inputs: GemmInputs) -> KernelCall:
    from kernel_templates.triton.gemm import check_config, matmul

    config = check_config(candidate.config)  # a bad config fails here, before any launch
    a, b, out = inputs.a, inputs.b, inputs.out
    return lambda: matmul(a, b, config, out=out)


#: Registered backends and how each builds its callable.
BACKENDS: dict[str, Callable[[Candidate, GemmInputs], KernelCall]] = {
    Backend.CUBLAS.value: _cublas,
    Backend.TRITON.value: _triton,
}


def check_supported(backend: str, problem: GemmProblem) -> None:
    """Raise ``Unsupported`` unless ``backend`` serves ``problem``."""
    if backend not in BACKENDS:
        raise Unsupported(f"unknown backend {backend!r}; one of {sorted(BACKENDS)}")
    torch_dtype(problem.dtype)
    torch_dtype(problem.out_dtype or problem.dtype)
    if backend == Backend.CUBLAS.value and problem.out_dtype != problem.dtype:
        raise Unsupported("cublas through torch.matmul writes the input dtype only")


def make_callable(candidate: Candidate, inputs: GemmInputs) -> KernelCall:
    """A no-argument callable that runs ``candidate`` on ``inputs`` into ``inputs.out``."""
    check_supported(candidate.backend, candidate.problem)
    return BACKENDS[candidate.backend](candidate, inputs)
