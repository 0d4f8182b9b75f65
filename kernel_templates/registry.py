"""Kernels by (problem kind, backend): how a worker feeds, runs and checks any candidate.

A problem kind (``problem.kind``, e.g. ``"gemm"``) registers one :class:`KernelKind`: how to
make a fresh input set (its output buffer poisoned with NaN, so an element a kernel forgets
fails the check), the high-precision reference, the error measure and the tolerance. Each
backend that serves the kind registers a factory under ``(kind, backend)``: it turns a
``Candidate`` and an input set into a no-argument callable that writes the input set's output,
so a benchmark times the kernel alone. Optionally a backend adds a ``supports`` check (raises
``Unsupported`` for a problem it cannot serve) and a ``static_check`` (the rules a config must
satisfy on a device, checked before anything is built).

The built-in kinds register themselves on first lookup (``BUILTIN``); a new kind is a package
under ``kernel_templates/`` with a registering function, named there, or registered by whoever
imports it (a test, a plug-in) with :func:`register_kind` and :func:`register`. Nothing here
imports torch: the built-in kinds are imported only when a kernel is asked for.
"""

from __future__ import annotations

import importlib
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from kernel_templates.errors import Unsupported
from search.types import Candidate

__all__ = ["BUILTIN", "FACTORIES", "KINDS", "Inputs", "KernelCall", "KernelKind", "backends",
           "check_supported", "kernel_kind", "make_callable", "register", "register_kind",
           "static_violations"]


class Inputs(Protocol):
    """One input set of a problem: whatever operands its kernels read, and ``out``, the buffer
    they write (NaN-poisoned when made)."""

    out: Any


KernelCall = Callable[[], Any]
#: ``(candidate, inputs) -> callable``; raises ``InvalidConfig``/``Unsupported`` before a launch.
Factory = Callable[[Candidate, Any], KernelCall]
#: ``problem -> None``; raises ``Unsupported`` with the reason when the backend cannot serve it.
SupportCheck = Callable[[Any], None]
#: ``(problem, config, device mode, shared memory per block) -> reasons`` (empty: feasible).
StaticCheck = Callable[[Any, dict[str, Any], str, int], list[str]]


def _serves_all(problem: Any) -> None:
    return None


@dataclass(frozen=True)
class KernelKind:
    """What a worker needs to check any kernel of one problem kind.

    ``make_inputs(problem, device, seed)``: fresh random operands from ``seed`` and an output
    buffer filled with NaN. ``reference(problem, inputs)``: the product the kernel must write,
    in high precision. ``rel_error(out, ref)``: the error measure (``inf`` for a non-finite
    output). ``tolerance(problem, config)``: the largest error accepted for ``config``.
    ``check(problem)``: raises ``Unsupported`` when no kernel of this kind can serve it.
    """

    name: str
    make_inputs: Callable[[Any, Any, int], Any]
    reference: Callable[[Any, Any], Any]
    rel_error: Callable[[Any, Any], float]
    tolerance: Callable[[Any, dict[str, Any]], float]
    check: SupportCheck = _serves_all


#: Registering function of each built-in kind ("module:function"), called on first lookup.
BUILTIN: dict[str, str] = {"gemm": "kernel_templates.gemm.backends:register"}
KINDS: dict[str, KernelKind] = {}
FACTORIES: dict[tuple[str, str], Factory] = {}
_SUPPORTS: dict[tuple[str, str], SupportCheck] = {}
_STATIC: dict[tuple[str, str], StaticCheck] = {}
_LOADED: set[str] = set()
_LOCK = threading.RLock()


def register_kind(kind: KernelKind) -> None:
    """Register (or replace) the inputs, reference and tolerance of ``kind.name``."""
    KINDS[kind.name] = kind


def register(kind: str, backend: str, factory: Factory, *, supports: SupportCheck | None = None,
             static_check: StaticCheck | None = None) -> None:
    """Register (or replace) ``backend``'s kernels for problems of ``kind``."""
    key = (kind, backend)
    FACTORIES[key] = factory
    for table, value in ((_SUPPORTS, supports), (_STATIC, static_check)):
        if value is None:
            table.pop(key, None)
        else:
            table[key] = value  # type: ignore[assignment]


def _load(kind: str) -> None:
    """Run the built-in registration of ``kind`` once (a no-op for other kinds)."""
    if kind in _LOADED or kind not in BUILTIN:
        return
    with _LOCK:
        if kind in _LOADED:
            return
        module, _, func = BUILTIN[kind].partition(":")
        getattr(importlib.import_module(module), func)()
        _LOADED.add(kind)


def kernel_kind(name: str) -> KernelKind:
    """The registered ``KernelKind`` of ``name``; ``Unsupported`` when none is."""
    _load(name)
    try:
        return KINDS[name]
    except KeyError:
        raise Unsupported(f"no kernels for problem kind {name!r}; registered: "
                          f"{sorted(set(KINDS) | set(BUILTIN))}") from None


def backends(kind: str) -> tuple[str, ...]:
    """The backends registered for ``kind``, sorted."""
    _load(kind)
    return tuple(sorted(b for k, b in FACTORIES if k == kind))


def check_supported(backend: str, problem: Any) -> None:
    """Raise ``Unsupported`` unless ``backend`` serves ``problem``."""
    kind = kernel_kind(problem.kind)
    if (problem.kind, backend) not in FACTORIES:
        raise Unsupported(f"unknown backend {backend!r} for {problem.kind}; one of "
                          f"{list(backends(problem.kind))}")
    kind.check(problem)
    supports = _SUPPORTS.get((problem.kind, backend))
    if supports is not None:
        supports(problem)


def static_violations(candidate: Candidate, mode: str, smem: int) -> list[str]:
    """The rules ``candidate``'s config breaks on a device of ``mode`` (``"cuda"`` or
    ``"interpreter"``) with ``smem`` bytes of shared memory per block (0: unknown); empty when
    feasible or when its backend has no static rules. ``KeyError``/``TypeError`` mean a config
    too malformed to check."""
    problem = candidate.problem
    _load(problem.kind)
    check = _STATIC.get((problem.kind, candidate.backend))
    return [] if check is None else list(check(problem, dict(candidate.config), mode, smem))


def make_callable(candidate: Candidate, inputs: Any) -> KernelCall:
    """A no-argument callable that runs ``candidate`` on ``inputs`` into ``inputs.out``."""
    check_supported(candidate.backend, candidate.problem)
    return FACTORIES[(candidate.problem.kind, candidate.backend)](candidate, inputs)
