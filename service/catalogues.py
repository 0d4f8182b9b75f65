"""What the workers of a GPU model declared they can build, as the problem kinds read it.

A worker declares catalogues when it registers (e.g. the CUTLASS operations it can build);
``db.catalogues`` keeps the latest per GPU model and name. A kind asks for one by name through
a :data:`search.kinds.base.Catalogues` accessor; only the digest is read from the database on
each ask, the body once per digest.
"""

from __future__ import annotations

import threading

from db import catalogues
from db.engine import Database
from search.kinds.base import Catalogues, Declared

__all__ = ["clear_cache", "declared"]

_bodies: dict[tuple[str, str, str], Declared] = {}
_lock = threading.Lock()


def declared(db: Database, gpu_model: str) -> Catalogues:
    """The accessor of the catalogues ``gpu_model``'s workers declared."""

    def get(name: str) -> Declared | None:
        with db.read_session() as s:
            digest = catalogues.digest(s, gpu_model, name)
        if digest is None:
            return None
        with _lock:
            hit = _bodies.get((gpu_model, name, digest))
        if hit is not None:
            return hit
        with db.read_session() as s:
            record = catalogues.get(s, gpu_model, name)
        if record is None:
            return None
        found = Declared(record.digest, dict(record.body))
        with _lock:
            _bodies[(gpu_model, name, record.digest)] = found
        return found

    return get


def clear_cache() -> None:
    """Forget every cached body (tests)."""
    with _lock:
        _bodies.clear()
