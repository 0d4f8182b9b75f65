"""The library side of attention: PyTorch's SDPA pinned to one backend each, and FlexAttention.

``scaled_dot_product_attention`` runs under ``sdpa_kernel(<backend>)``, so a candidate measures
exactly the backend it names (cuDNN, flash, memory-efficient, math), never a fallback: before
anything runs, the factory asks torch whether the pinned backend accepts these very tensors
(``torch.backends.cuda.can_use_*_attention``) and raises ``Unsupported`` with torch's reason
when it does not.

Causal masks are bottom-right (the spec). SDPA's ``is_causal`` is top-left aligned, the same
only when ``s_q == s_kv``; otherwise flash (and memory-efficient without grouped queries) take
``torch.nn.attention.bias.causal_lower_right``, which torch routes to their native bottom-right
masks, and cuDNN, math and memory-efficient with grouped queries take an explicit additive mask
``[s_q, s_kv]`` in the inputs' dtype, built with the callable (outside the timed call).

FlexAttention (``flex``) is ``torch.compile``d once per process (one compiled function; dynamo
specialises it per shape) with default kernel options, and a bottom-right causal block mask
from ``create_block_mask`` built once per shape.

Neither SDPA nor FlexAttention takes an ``out=`` tensor, so every call ends with
``inputs.out.copy_(result)``: inside the timed call, it costs one extra read and write of O
(small beside Q, K and V except at s_q ≫ s_kv, which no shape here has).
"""

from __future__ import annotations

import functools
import warnings
from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

from kernel_templates.attention.inputs import AttentionInputs
from kernel_templates.attention.reference import causal_keep
from kernel_templates.errors import InvalidConfig, Unsupported
from search.kinds.attention.spec import AttentionProblem
from search.types import Candidate, Device

__all__ = ["FLEX", "SDPA_BACKENDS", "cuda_only", "flex_factory", "flex_supports",
           "sdpa_factory", "sdpa_supports"]

#: SDPA candidates by backend name.
SDPA_BACKENDS: dict[str, SDPBackend] = {
    "sdpa_cudnn": SDPBackend.CUDNN_ATTENTION,
    "sdpa_flash": SDPBackend.FLASH_ATTENTION,
    "sdpa_efficient": SDPBackend.EFFICIENT_ATTENTION,
    "sdpa_math": SDPBackend.MATH,
}
FLEX = "flex"
_PROBES: dict[str, Callable[..., bool]] = {
    "sdpa_cudnn": torch.backends.cuda.can_use_cudnn_attention,
    "sdpa_flash": torch.backends.cuda.can_use_flash_attention,
    "sdpa_efficient": torch.backends.cuda.can_use_efficient_attention,
}
#: Shapes one worker process may compile FlexAttention for before dynamo gives up and runs it
#: eagerly (its default, 8, is a handful of jobs).
_FLEX_RECOMPILES = 256

KernelCall = Callable[[], Any]


def cuda_only(device: Device) -> str | None:
    """The ``available`` hook of the fused backends: a CUDA device of compute capability 8.0
    or more."""
    if device.mode != "cuda":
        return "runs on a CUDA GPU only, not in the CPU interpreter"
    major = device.cc.split(".")[0] if device.cc else ""
    if major.isdigit() and int(major) < 8:
        return f"needs compute capability 8.0 or more, the device has {device.cc}"
    return None


def sdpa_supports(backend: str) -> Callable[[AttentionProblem], None]:
    """The ``supports`` hook of SDPA ``backend``: what is known from the problem alone (the
    factory also asks torch about the tensors)."""

    def check(problem: AttentionProblem) -> None:
        if backend in ("sdpa_cudnn", "sdpa_flash") and problem.dtype == "fp32":
            raise Unsupported(f"{backend} takes bf16 and fp16 only, not fp32")
        if backend == "sdpa_flash" and problem.d > 256:
            raise Unsupported(f"sdpa_flash takes head dimensions up to 256, got {problem.d}")

    return check


def _no_config(candidate: Candidate) -> None:
    if candidate.config:
        raise InvalidConfig(f"{candidate.backend} takes no config keys; got "
                            f"{sorted(candidate.config)}")


def _additive_mask(problem: AttentionProblem, like: torch.Tensor) -> torch.Tensor:
    keep = causal_keep(problem.s_q, problem.s_kv, like.device)
    zeros = torch.zeros(keep.shape, dtype=like.dtype, device=like.device)
    return zeros.masked_fill(~keep, float("-inf"))


def _mask_args(backend: str, problem: AttentionProblem, q: torch.Tensor
               ) -> tuple[Any, bool]:
    """``(attn_mask, is_causal)`` giving ``backend`` the bottom-right causal mask."""
    if not problem.causal:
        return None, False
    if problem.s_q == problem.s_kv:
        return None, True  # top-left and bottom-right coincide
    if backend == "sdpa_flash" or (backend == "sdpa_efficient" and problem.group == 1):
        from torch.nn.attention.bias import causal_lower_right

        return causal_lower_right(problem.s_q, problem.s_kv), False
    return _additive_mask(problem, q), False


def _probe(backend: str, inputs: AttentionInputs, mask: Any, is_causal: bool, gqa: bool
           ) -> None:
    """``Unsupported`` with torch's reasons when the pinned ``backend`` refuses these tensors
    (``CausalBias`` masks are probed as torch's own dispatch does: without a mask tensor)."""
    probe = _PROBES.get(backend)
    if probe is None:
        return
    tensor_mask = mask if isinstance(mask, torch.Tensor) else None
    params = torch.backends.cuda.SDPAParams(inputs.q, inputs.k, inputs.v, tensor_mask, 0.0,
                                            is_causal, gqa)
    with sdpa_kernel(SDPA_BACKENDS[backend]), warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        ok = probe(params, True)  # debug: the reasons come as warnings
    if not ok:
        # torch prints its reasons from C++ (stderr), which Python cannot always catch: say
        # what the tensors ask that the fused backends are known to refuse
        asked = [what for what, on in (("grouped-query heads (enable_gqa)", gqa),
                                       ("an explicit mask", mask is not None)) if on]
        reasons = "; ".join(str(w.message) for w in caught) or (
            f"torch's can_use check said no for {', '.join(asked) or 'these tensors'}")
        raise Unsupported(f"{backend} refuses this problem: {reasons}")


def sdpa_factory(backend: str) -> Callable[[Candidate, AttentionInputs], KernelCall]:
    """The factory of SDPA ``backend`` (a name of ``SDPA_BACKENDS``); configs are empty."""
    pinned = SDPA_BACKENDS[backend]

    def factory(candidate: Candidate, inputs: AttentionInputs) -> KernelCall:
        _no_config(candidate)
        problem: AttentionProblem = candidate.problem
        q, k, v, out = inputs.q, inputs.k, inputs.v, inputs.out
        gqa = problem.group > 1
        mask, is_causal = _mask_args(backend, problem, q)
        if q.device.type == "cuda":
            _probe(backend, inputs, mask, is_causal, gqa)
        scale = problem.scale

        def call() -> torch.Tensor:
            with sdpa_kernel(pinned):
                result = F.scaled_dot_product_attention(q, k, v, attn_mask=mask,
                                                        is_causal=is_causal, scale=scale,
                                                        enable_gqa=gqa)
            return out.copy_(result)  # SDPA has no out=: the copy is timed (module docstring)

        return call

    return factory


def flex_supports(problem: AttentionProblem) -> None:
    """FlexAttention's generated kernels take every served head dimension and dtype."""
    return None


@functools.cache
def _compiled_flex() -> Callable[..., torch.Tensor]:
    import torch._dynamo.config as dynamo_config
    from torch.nn.attention.flex_attention import flex_attention

    dynamo_config.recompile_limit = max(dynamo_config.recompile_limit, _FLEX_RECOMPILES)
    return torch.compile(flex_attention, dynamic=False)


@functools.lru_cache(maxsize=32)
def _causal_block_mask(s_q: int, s_kv: int, device: str) -> Any:
    from torch.nn.attention.flex_attention import create_block_mask

    offset = s_kv - s_q

    def bottom_right(b: Any, h: Any, q_idx: Any, kv_idx: Any) -> Any:
        return kv_idx <= q_idx + offset

    return create_block_mask(bottom_right, B=None, H=None, Q_LEN=s_q, KV_LEN=s_kv,
                             device=device)


def flex_factory(candidate: Candidate, inputs: AttentionInputs) -> KernelCall:
    """FlexAttention with default kernel options; configs are empty."""
    _no_config(candidate)
    problem: AttentionProblem = candidate.problem
    q, k, v, out = inputs.q, inputs.k, inputs.v, inputs.out
    if q.device.type != "cuda":
        raise Unsupported("flex runs on a CUDA GPU only here (not in the CPU interpreter)")
    flex = _compiled_flex()
    block_mask = (_causal_block_mask(problem.s_q, problem.s_kv, str(q.device))
                  if problem.causal else None)
    gqa, scale = problem.group > 1, problem.scale

    def call() -> torch.Tensor:
        result = flex(q, k, v, block_mask=block_mask, scale=scale, enable_gqa=gqa)
        return out.copy_(result)  # FlexAttention has no out=: the copy is timed

    return call
