"""Attention's kernels in the registry: the library backends and the Triton templates.

``register`` (called by ``kernel_templates.registry`` on the first attention lookup) registers
the attention ``KernelKind`` (``inputs.make_inputs``, ``reference``) and one factory per
backend; each turns a ``Candidate`` and an ``AttentionInputs`` into a callable that writes
``inputs.out``:

- library (``library.py``; configs are empty): ``sdpa_cudnn``, ``sdpa_flash``,
  ``sdpa_efficient`` and ``flex`` on CUDA devices, ``sdpa_math`` everywhere (the library side
  of a CPU worker);
- custom: ``triton`` (the flash-attention template, ``triton.py``) and ``triton_decode`` (the
  split-KV decode template, ``decode.py``, for ``s_q <= 16``), both with static checks
  (``triton_config.py``) and warmed up in the worker's compile pool.
"""

from __future__ import annotations

from typing import Any

from kernel_templates import registry
from kernel_templates.attention import library
from kernel_templates.attention.inputs import AttentionInputs, make_inputs, torch_dtype
from kernel_templates.attention.reference import reference, rel_error, tolerance
from kernel_templates.attention.triton_config import (
    DECODE_MAX_SQ,
    check_decode_config,
    check_flash_config,
    decode_violations,
    flash_violations,
)
from kernel_templates.errors import Unsupported
from search.kinds.attention.spec import AttentionProblem
from search.types import Candidate

__all__ = ["KIND", "TRITON", "TRITON_DECODE", "register"]

KIND = "attention"
TRITON = "triton"
TRITON_DECODE = "triton_decode"

KernelCall = registry.KernelCall


def _triton(candidate: Candidate, inputs: AttentionInputs) -> KernelCall:
    from kernel_templates.attention.triton import flash_attention

    config = check_flash_config(candidate.config)  # a bad config fails here, before any launch
    problem = candidate.problem
    q, k, v, out = inputs.q, inputs.k, inputs.v, inputs.out
    return lambda: flash_attention(q, k, v, out, problem, config)


def _triton_decode(candidate: Candidate, inputs: AttentionInputs) -> KernelCall:
    from kernel_templates.attention.decode import DecodeWorkspace, decode_attention

    config = check_decode_config(candidate.config)
    problem = candidate.problem
    q, k, v, out = inputs.q, inputs.k, inputs.v, inputs.out
    workspace = DecodeWorkspace.allocate(problem, config["NUM_SPLITS"], q.device)
    return lambda: decode_attention(q, k, v, out, problem, config, workspace)


def _decode_supports(problem: AttentionProblem) -> None:
    if problem.s_q > DECODE_MAX_SQ:
        raise Unsupported(f"triton_decode serves s_q <= {DECODE_MAX_SQ} (decode steps), got "
                          f"s_q={problem.s_q}; the triton template serves longer queries")


def _check(problem: AttentionProblem) -> None:
    torch_dtype(problem.dtype)


def _flash_static(problem: AttentionProblem, config: dict[str, Any], mode: str, smem: int
                  ) -> list[str]:
    return flash_violations(problem, config, mode, smem)


def _decode_static(problem: AttentionProblem, config: dict[str, Any], mode: str, smem: int
                   ) -> list[str]:
    return decode_violations(problem, config, mode, smem)


def register() -> None:
    """Register the attention kind, its library backends and its Triton templates."""
    registry.register_kind(registry.KernelKind(
        name=KIND, make_inputs=make_inputs, reference=reference, rel_error=rel_error,
        tolerance=tolerance, check=_check, preload=("torch", "triton")))
    for name in library.SDPA_BACKENDS:
        registry.register(KIND, name, library.sdpa_factory(name),
                          supports=library.sdpa_supports(name),
                          available=None if name == "sdpa_math" else library.cuda_only)
    registry.register(KIND, library.FLEX, library.flex_factory, supports=library.flex_supports,
                      available=library.cuda_only, warm_up=True)
    registry.register(KIND, TRITON, _triton, static_check=_flash_static, warm_up=True)
    registry.register(KIND, TRITON_DECODE, _triton_decode, supports=_decode_supports,
                      static_check=_decode_static, warm_up=True)
