"""Plug-ins: modules that register more kernels with ``kernel_templates.registry`` on import.

A worker names them in ``KS_PLUGINS`` (``WorkerSettings.plugins``); the worker process imports
them before it detects its device (so their backends are offered), and passes the names to its
benchmark child and compile pool, which import them before running any candidate.
"""

from __future__ import annotations

import importlib
from collections.abc import Iterable

__all__ = ["import_plugins"]


def import_plugins(names: Iterable[str]) -> tuple[str, ...]:
    """Import each named module once (in order); returns the names. An unknown module raises
    ``ImportError``: a worker that cannot load a plug-in it was told to should not start."""
    loaded = []
    for name in names:
        importlib.import_module(name)
        loaded.append(name)
    return tuple(loaded)
