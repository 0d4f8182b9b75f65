"""Errors a kernel template raises for a request it cannot serve.

They carry meaning for the worker: ``workers.execute.classify`` maps ``Unsupported`` to
``Status.UNSUPPORTED``, ``InvalidConfig`` to ``Status.INVALID``, ``CompileError`` to
``Status.COMPILE_ERROR`` and ``LaunchError`` to ``Status.LAUNCH_ERROR`` (a backend's own
compiler and launcher errors subclass the last two). Anything else a launcher
raises on bad *inputs* (wrong shapes, devices) is a bug in the caller and stays a plain
``ValueError``/``TypeError``.
"""

from __future__ import annotations

__all__ = ["CompileError", "InvalidConfig", "LaunchError", "Unsupported"]


class Unsupported(NotImplementedError):
    """The backend does not serve this request (an unknown backend, a dtype it lacks)."""


class InvalidConfig(ValueError):
    """The configuration cannot run at all (a missing key, a tile that is not a power of two)."""


class CompileError(RuntimeError):
    """Building the kernel failed (a compiler error, a missing compiler)."""


class LaunchError(RuntimeError):
    """The kernel was built but its launcher reported a failure."""
