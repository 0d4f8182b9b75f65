"""One probe measurement: check a kernel on a NaN-poisoned output against the reference, then
time it (the probes' shared rule: nothing is timed before its result is checked)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any


def checked_timing(sets: Sequence[Any], refs: Sequence[Any], calls: Sequence[Callable[[], Any]],
                   bench: Callable[[Sequence[Callable[[], Any]]], Any],
                   tolerance: float = 2e-2) -> dict[str, Any]:
    """``calls[i]`` computes into ``sets[i].out``. The first runs once on a NaN-filled output
    and must come within ``tolerance`` (relative error) of ``refs[0]``; then ``bench`` times
    them all, rotating. Returns ``{"us", "p20", "p80", "err"}``, or ``{"error"}`` for a wrong
    result."""
    import torch

    from kernel_templates.gemm.reference import rel_error

    sets[0].out.fill_(float("nan"))
    calls[0]()
    torch.cuda.synchronize()
    err = rel_error(sets[0].out, refs[0])
    if not err < tolerance:
        return {"error": f"wrong result: rel_error {err}"}
    t = bench(calls)
    return {"us": round(t.median_us, 3), "p20": round(t.p20_us, 3), "p80": round(t.p80_us, 3),
            "err": err}
