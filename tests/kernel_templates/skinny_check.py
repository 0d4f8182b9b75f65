"""What every skinny launch must leave behind, for the CPU and GPU tests of
kernel_templates/gemm/skinny.py."""

from __future__ import annotations

import torch

from kernel_templates.gemm import skinny


def clean(device: str | torch.device) -> bool:
    """Counters and the atomic accumulator are all zero, and each barrier arrival count (slot
    ``g`` for a grid of ``g`` programs) a multiple of its grid size: every launch must leave
    them so."""
    dev = torch.device(device)
    if dev.type == "cuda" and dev.index is None:
        dev = torch.device("cuda", torch.cuda.current_device())
    bufs = [skinny._COUNTERS.get(dev), skinny._ACCUM.get(dev)]
    arrivals = skinny._ARRIVALS.get(dev)
    grown = arrivals is None or all(
        int(v) % g == 0 for g, v in enumerate(arrivals.tolist()) if g)
    return grown and all(b is None or not b.any().item() for b in bufs)
