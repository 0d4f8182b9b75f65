"""Problem kinds: one module per kind (GEMM, ...), found through one registry.

A kind is everything the search side knows of a family of problems: its spec (validation with
field-named errors, canonical key, FLOPs and minimal bytes for the roofline), which backends
are its library and which its custom side, what the library stage measures and which custom
tiers apply, and the tuner of each tier. The service, the database and the decision loop reach a
problem only through its kind, so a new kind is a module here (or a plug-in module named in the
settings), its kernels under ``kernel_templates/``, and one ``register`` call each.
"""

from __future__ import annotations

import importlib
import threading
from collections.abc import Iterable

from search import types
from search.kinds.base import ProblemKind, parse_query
from search.types import Problem, ProblemError, parse_problem

__all__ = [
    "Problem", "ProblemKind", "get", "kinds", "load_plugins", "parse_problem", "parse_query",
    "problem_from_key", "register",
]

_KINDS: dict[str, ProblemKind] = {}
_LOCK = threading.Lock()


def register(kind: ProblemKind) -> ProblemKind:
    """Make ``kind`` known by its name (its problems parse through ``parse_problem`` from now
    on); registering a name again replaces it (a plug-in imported twice)."""
    with _LOCK:
        _KINDS[kind.name] = kind
        types.PARSERS[kind.name] = kind.parse
    return kind


def kinds() -> dict[str, ProblemKind]:
    """Every registered kind by name."""
    return dict(_KINDS)


def get(name: str) -> ProblemKind:
    """The kind called ``name``; ``ProblemError('kind', ...)`` when there is none."""
    kind = _KINDS.get(name)
    if kind is None:
        raise ProblemError("kind", f"unknown problem kind {name!r}; one of {sorted(_KINDS)}")
    return kind


def problem_from_key(key: str) -> Problem:
    """The problem whose canonical key is ``key`` (keys start with the kind's name)."""
    return get(key.split(":", 1)[0]).from_key(key)


def load_plugins(modules: Iterable[str]) -> None:
    """Import plug-in modules (each registers its kinds and kernels at import)."""
    for module in modules:
        if module:
            importlib.import_module(module)


#: The kinds that ship with the service; each module registers its kind at import. Imported by
#: name, like a plug-in: the kind modules import this package, not the other way round.
BUILTIN = ("search.kinds.gemm", "search.kinds.attention")
load_plugins(BUILTIN)
