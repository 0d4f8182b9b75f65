"""The answers of ``GET /v1/best`` kept per API process, each under the generation of its
problem (``db.generations``), which every request reads again: an answer is served from memory
only while nothing that could change it has been committed, whichever process wrote it. A hit
costs one indexed query and no serialisation; a miss computes the answer over the same
connection (``Database.reads``: no transaction's round trips on Postgres)."""

from __future__ import annotations

import json
import threading
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass

from db import generations
from db.engine import Database
from search.types import Problem
from service.errors import NotFound
from service.queries import BestAnswer, best_of
from service.views import best_out

#: answers kept per process (a few KB each), least recently used dropped first
MAX_ENTRIES = 20_000


@dataclass(frozen=True)
class Encoded:
    """An answer as sent: its status and JSON body."""

    status: int
    body: bytes


class BestCache:
    """``GET /v1/best``'s answers by (problem key, GPU, exact), each valid for one generation."""

    def __init__(self, db: Database, max_entries: int = MAX_ENTRIES) -> None:
        self.db = db
        self.max_entries = max_entries
        self._lock = threading.Lock()
        self._entries: OrderedDict[tuple[str, str | None, bool],
                                   tuple[generations.Generation, Encoded]] = OrderedDict()
        self.hits = 0
        self.misses = 0
        self.fast_hits = 0  # the hits of peek (service.best_fast), counted in hits too

    def peek(self, key: tuple[str, str | None, bool], generation: generations.Generation
             ) -> Encoded | None:
        """The answer kept under ``key`` (problem key, GPU, exact) if it was made at
        ``generation``, else None (``service.best_fast``: a hit without the thread pool)."""
        with self._lock:
            kept = self._entries.get(key)
            if kept is None or kept[0] != generation:
                return None
            self._entries.move_to_end(key)
            self.hits += 1
            self.fast_hits += 1
            return kept[1]

    def answer(self, problem: Problem, gpu: str | None, exact: bool) -> Encoded:
        """The answer for ``problem``: the kept one while its generation stands, else a new
        one (read after the generation, so it is at least as new as what it is kept under)."""
        key = (problem.key(), gpu, exact)
        # one connection, no transaction on Postgres: the generation is read first, so the
        # answer's reads after it see at least what it counts
        with self.db.reads() as s:
            found = generations.with_problem(s, key[0])
            record, generation = found if found is not None else (None, None)
            if generation is not None:
                with self._lock:
                    kept = self._entries.get(key)
                    if kept is not None and kept[0] == generation:
                        self._entries.move_to_end(key)
                        self.hits += 1
                        return kept[1]
            encoded = _encode(lambda: best_of(s, record, problem, gpu, exact))
        if generation is None:  # never seen: nothing to keep
            return encoded
        with self._lock:
            self.misses += 1
            self._entries[key] = (generation, encoded)
            self._entries.move_to_end(key)
            while len(self._entries) > self.max_entries:
                self._entries.popitem(last=False)
        return encoded


def _encode(find: Callable[[], BestAnswer]) -> Encoded:
    """The answer ``find`` gives, or its 404, as sent (the app's handler writes the same)."""
    try:
        return Encoded(200, best_out(find()).model_dump_json().encode())
    except NotFound as exc:
        return Encoded(exc.status_code, json.dumps({"detail": exc.detail()}).encode())
