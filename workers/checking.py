"""The correctness check shared by candidates and tasks: fresh inputs, poison, run, compare.

Everything kind-specific (the input maker, the reference, the error measure and tolerance)
comes from the kernel registry (``kernel_templates.registry``) by the problem's kind.
"""

from __future__ import annotations

from typing import Any

from search.types import Candidate

__all__ = ["checked_calls", "fresh_inputs"]


def fresh_inputs(problem: Any, device: Any, seed: int, n_sets: int) -> tuple[list[Any], Any]:
    """``n_sets`` input sets made from ``seed``, ``seed + 1``, ... (outputs poisoned with NaN)
    and the high-precision reference of the first: ``(sets, ref)``."""
    from kernel_templates.registry import kernel_kind

    kind = kernel_kind(problem.kind)
    sets = [kind.make_inputs(problem, device, seed + i) for i in range(n_sets)]
    return sets, kind.reference(problem, sets[0])


def checked_calls(cand: Candidate, sets: list[Any], ref: Any, cuda: bool
                  ) -> tuple[list[Any], float, float]:
    """``cand``'s callables over the input ``sets``, after one run into the first set's output
    (poisoned with NaN first, so an element the kernel forgets fails) compared with ``ref``:
    ``(calls, rel_error, tolerance)``. The one correctness check of candidates and tasks."""
    import torch

    from kernel_templates.registry import kernel_kind, make_callable

    kind = kernel_kind(cand.problem.kind)
    sets[0].out.fill_(float("nan"))
    calls = [make_callable(cand, s) for s in sets]
    calls[0]()
    if cuda:
        torch.cuda.synchronize()
    return calls, kind.rel_error(sets[0].out, ref), kind.tolerance(cand.problem, cand.config)
