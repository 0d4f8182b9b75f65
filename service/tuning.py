"""The seam between the service and the optimizer: a ``Tuner`` per (problem, GPU model).

``TunerPool`` builds tuners through an injectable factory (the real one asks the problem's
kind, ``search.kinds``, for the tuner of a tier; tests pass fakes), keeps one per (problem, GPU
model, tier) in this process, and serialises the calls made on each: Optuna's study is the
state, so a tuner may be rebuilt at any time (after a restart, in another API replica) and
carry on.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, Protocol

from search import kinds
from search.kinds.base import Catalogues
from search.limits import DeviceLimits
from search.types import Measurement, Problem


class ProposalLike(Protocol):
    trial_number: int
    config: dict[str, Any]


class Tuner(Protocol):
    """What the service needs from a tuner (``search.optimizer.SpaceTuner`` and kin)."""

    exhausted: bool

    def propose(self, n: int, known: Callable[[dict[str, Any]], Measurement | None],
                **kwargs: Any) -> list[Any]:
        """Up to ``n`` new proposals; a library search's tuner also takes ``budget``
        (``search.optimizer.CompileBudget``)."""

    def record(self, trial_number: int, measurement: Measurement) -> None: ...

    def abandon(self, trial_number: int) -> None:
        """Forget a proposal that will never be measured (cancelled, out of time)."""


#: ``(storage_url, problem, gpu_model, limits, seed, tier, *, catalogues) -> Tuner``
TunerFactory = Callable[..., Tuner]


def optuna_tuner(storage_url: str, problem: Problem, gpu_model: str, limits: DeviceLimits,
                 seed: int, tier: str | None = None, *,
                 catalogues: Catalogues = lambda name: None) -> Tuner:
    """The real tuner: the problem's kind builds an Optuna study for ``tier`` in the service's
    own database (``catalogues``: what the GPU model's workers declared, e.g. the operations a
    library-side search runs over)."""
    return kinds.get(problem.kind).tuner(storage_url, problem, gpu_model, limits, seed, tier,
                                         catalogues)


class TunerPool:
    """One tuner per (problem key, GPU model) and a lock around each one's use."""

    def __init__(self, storage_url: str, factory: TunerFactory = optuna_tuner) -> None:
        self.storage_url = storage_url
        self._factory = factory
        self._tuners: dict[tuple[str, str, str], Tuner] = {}
        self._locks: dict[tuple[str, str, str], threading.Lock] = {}
        self._guard = threading.Lock()

    @contextmanager
    def use(self, problem: Problem, gpu_model: str, limits: DeviceLimits,
            seed: int, tier: str | None = None, **tier_args: Any) -> Iterator[Tuner]:
        """The tuner of ``problem`` on ``gpu_model`` (in ``tier``), held exclusively inside
        the block; ``tier_args`` go to the factory when it builds the tuner."""
        key = (problem.key(), gpu_model, tier or "")
        with self._guard:
            lock = self._locks.setdefault(key, threading.Lock())
        with lock:
            tuner = self._tuners.get(key)
            if tuner is None:
                tuner = self._factory(self.storage_url, problem, gpu_model, limits, seed, tier,
                                      **tier_args)
                self._tuners[key] = tuner
            yield tuner

    def close(self) -> None:
        with self._guard:
            tuners = list(self._tuners.values())
            self._tuners.clear()
        for tuner in tuners:
            close = getattr(tuner, "close", None)
            if close is not None:
                close()
