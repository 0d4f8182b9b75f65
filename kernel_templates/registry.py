"""Kernels by (problem kind, backend): how a worker feeds, runs and checks any candidate.

A problem kind (``problem.kind``, e.g. ``"gemm"``) registers one :class:`KernelKind`: how to
make a fresh input set (its output buffer poisoned with NaN, so an element a kernel forgets
fails the check), the high-precision reference, the error measure and the tolerance. Each
backend that serves the kind registers a factory under ``(kind, backend)``: it turns a
``Candidate`` and an input set into a no-argument callable that writes the input set's output,
so a benchmark times the kernel alone. Optionally a backend adds a ``supports`` check (raises
``Unsupported`` for a problem it cannot serve) and a ``static_check`` (the rules a config must
satisfy on a device, checked before anything is built).

What a worker host needs of a backend is registered with it too, so ``workers`` names no
backend: ``available(device)`` (``None`` when a worker on ``device`` can run the backend, else
why not), ``catalogue(device)`` (what the worker declares to the service when it registers, e.g.
the CUTLASS operations it can build), ``prepare`` (a :class:`Preparer`: work done in the worker's
own process before the benchmark child runs a batch, e.g. parallel nvcc) and ``warm_up`` (its
kernels JIT-compile on their first run, so a worker runs each candidate once in a compile pool
ahead of the batch).

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

__all__ = ["BUILTIN", "FACTORIES", "KINDS", "Availability", "CatalogueOf", "Inputs", "KernelCall",
           "KernelKind", "Prepared", "Preparer", "availability", "backends", "catalogue_hooks",
           "check_supported", "kernel_kind", "kinds", "make_callable", "preload_modules",
           "preparer", "register", "register_kind", "static_violations", "warms_up"]


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
#: ``device -> None`` when a worker on ``device`` (a ``search.types.Device``) can run the
#: backend, else the reason it cannot.
Availability = Callable[[Any], str | None]
#: ``device -> body``: what a worker offering the backend declares when it registers
#: (``None``: nothing).
CatalogueOf = Callable[[Any], dict[str, Any] | None]


@dataclass(frozen=True)
class Prepared:
    """What preparing one unit (one CUTLASS operation, say) cost in seconds, to be charged to
    the first candidate that runs it, and when it failed, the error (every candidate of the unit
    is then a ``compile_error`` without running)."""

    compile_s: float = 0.0
    error: str | None = None


@dataclass(frozen=True)
class Preparer:
    """Work a worker does on a batch's candidates of one backend in its own process, in a
    thread, before its benchmark child runs them (building their binaries with parallel nvcc,
    say).

    ``unit(candidate)``: what the candidate shares its preparation with (CUTLASS: its operation
    name), ``None`` for nothing to prepare. ``build(candidates) -> {unit: Prepared}``: prepares
    each unit once and never raises; a unit missing from the answer is left for the child to
    classify.
    """

    unit: Callable[[Candidate], str | None]
    build: Callable[[list[Candidate]], dict[str, Prepared]]


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
    ``preload``: modules a benchmark child imports before it reports ready, so their import
    time stays out of the first candidate's timeout.
    """

    name: str
    make_inputs: Callable[[Any, Any, int], Any]
    reference: Callable[[Any, Any], Any]
    rel_error: Callable[[Any, Any], float]
    tolerance: Callable[[Any, dict[str, Any]], float]
    check: SupportCheck = _serves_all
    preload: tuple[str, ...] = ()


#: Registering function of each built-in kind ("module:function"), called on first lookup.
BUILTIN: dict[str, str] = {"gemm": "kernel_templates.gemm.backends:register",
                           "attention": "kernel_templates.attention.backends:register"}
KINDS: dict[str, KernelKind] = {}
FACTORIES: dict[tuple[str, str], Factory] = {}
_SUPPORTS: dict[tuple[str, str], SupportCheck] = {}
_STATIC: dict[tuple[str, str], StaticCheck] = {}
_AVAILABLE: dict[tuple[str, str], Availability] = {}
_CATALOGUE: dict[tuple[str, str], CatalogueOf] = {}
_PREPARE: dict[tuple[str, str], Preparer] = {}
_WARM_UP: set[tuple[str, str]] = set()
_LOADED: set[str] = set()
_LOCK = threading.RLock()


def register_kind(kind: KernelKind) -> None:
    """Register (or replace) the inputs, reference and tolerance of ``kind.name``."""
    KINDS[kind.name] = kind


def register(kind: str, backend: str, factory: Factory, *, supports: SupportCheck | None = None,
             static_check: StaticCheck | None = None, available: Availability | None = None,
             catalogue: CatalogueOf | None = None, prepare: Preparer | None = None,
             warm_up: bool = False) -> None:
    """Register (or replace) ``backend``'s kernels for problems of ``kind``, and what a worker
    host needs of them (see the module docstring; a backend without ``available`` runs
    wherever the worker runs)."""
    key = (kind, backend)
    FACTORIES[key] = factory
    tables: tuple[tuple[dict[tuple[str, str], Any], Any], ...] = (
        (_SUPPORTS, supports), (_STATIC, static_check), (_AVAILABLE, available),
        (_CATALOGUE, catalogue), (_PREPARE, prepare))
    for table, value in tables:
        if value is None:
            table.pop(key, None)
        else:
            table[key] = value
    if warm_up:
        _WARM_UP.add(key)
    else:
        _WARM_UP.discard(key)


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


def kinds() -> tuple[str, ...]:
    """Every registered kind (the built-in ones registered first), sorted."""
    for name in BUILTIN:
        _load(name)
    return tuple(sorted(KINDS))


def preload_modules() -> tuple[str, ...]:
    """What the registered kinds ask a benchmark child to import at start, in order, once."""
    return tuple(dict.fromkeys(m for name in kinds() for m in KINDS[name].preload))


def availability(device: Any) -> dict[tuple[str, str], str | None]:
    """Per registered ``(kind, backend)``: ``None`` when a worker on ``device`` can run it, else
    why it cannot."""
    kinds()
    out: dict[tuple[str, str], str | None] = {}
    for key in sorted(FACTORIES):
        check = _AVAILABLE.get(key)
        out[key] = None if check is None else check(device)
    return out


def catalogue_hooks() -> dict[tuple[str, str], CatalogueOf]:
    """The registered catalogue hooks by ``(kind, backend)``."""
    kinds()
    return dict(sorted(_CATALOGUE.items()))


def preparer(kind: str, backend: str) -> Preparer | None:
    """What a worker prepares ahead for ``backend``'s candidates of ``kind`` (``None``:
    nothing)."""
    _load(kind)
    return _PREPARE.get((kind, backend))


def warms_up(kind: str, backend: str) -> bool:
    """Whether a worker should run ``backend``'s candidates of ``kind`` once in its compile
    pool before the batch, so the benchmark child finds their JIT binaries cached."""
    _load(kind)
    return (kind, backend) in _WARM_UP


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
