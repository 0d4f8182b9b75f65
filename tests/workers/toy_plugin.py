"""A plug-in as a worker loads it (``KS_PLUGINS``): importing it registers a toy problem kind,
``out = 2 * x``, with one ``torch`` backend that declares a catalogue; no GEMM code involved."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from kernel_templates import registry

KIND = "toy_double"


@dataclass
class DoubleInputs:
    x: torch.Tensor
    out: torch.Tensor


def _make(problem: Any, device: Any, seed: int) -> DoubleInputs:
    gen = torch.Generator(device=device).manual_seed(seed)
    x = torch.randn(int(problem.n), generator=gen, device=device)
    return DoubleInputs(x, torch.full_like(x, float("nan")))


def _rel_error(out: torch.Tensor, ref: torch.Tensor) -> float:
    if not torch.isfinite(out).all():
        return float("inf")
    return float((out.double() - ref).norm() / ref.norm().clamp_min(1e-30))


def register() -> None:
    """Register the toy kind and its ``torch`` backend (with worker-host hooks)."""
    registry.register_kind(registry.KernelKind(
        KIND, make_inputs=_make, reference=lambda problem, inp: 2 * inp.x.double(),
        rel_error=_rel_error, tolerance=lambda problem, config: 1e-6))
    registry.register(KIND, "torch", lambda cand, inp: lambda: torch.mul(inp.x, 2, out=inp.out),
                      available=lambda device: None,
                      catalogue=lambda device: {"sizes": [1, 2, 4]})


register()
