"""``GET /v1/best`` answered before FastAPI when the answer is already kept: a pure ASGI
middleware with its own asynchronous Postgres connection.

A kept answer (``service.best_cache``) is served only under the generation of its problem as
the database holds it now, so every request still reads the generation; here that read runs on
the event loop over one ``psycopg.AsyncConnection`` (the compiled ``db.generations`` query,
prepared), and a hit costs neither FastAPI's validation and dependencies nor a hop through its
thread pool nor a pooled connection's ping. The reads of requests that arrive together are one
query: a request waits for the next query to start (never for one already under way, which
may have started before a write the client has seen), and every request waiting then shares
it, so a burst of questions costs a round trip or two, not one per request.

Anything else goes on to the app unchanged: a miss, a question the fast path does not read
exactly as the route would (a repeated or unusual parameter, a value it does not parse), a
service whose reads need a token, SQLite (no asynchronous driver here), or any error, the
database's included (the route then answers, a 503 if the database is away, and the connection
is tried again after ``RETRY_S``).
"""

from __future__ import annotations

import asyncio
import logging
import re
import time
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any
from urllib.parse import parse_qsl

from sqlalchemy import bindparam
from sqlalchemy.dialects import postgresql
from sqlalchemy.engine import make_url

from db import generations
from search import kinds
from service.best_cache import BestCache
from service.settings import ServiceSettings

log = logging.getLogger("kernelsearch.best")

Scope = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[MutableMapping[str, Any]]]
Send = Callable[[MutableMapping[str, Any]], Awaitable[None]]
App = Callable[[Scope, Receive, Send], Awaitable[None]]

#: Seconds before a connection that failed is tried again (the route answers meanwhile).
RETRY_S = 5.0
#: Bounds of the connection: a database that does not answer costs a request no more.
CONNECT_TIMEOUT_S, STATEMENT_TIMEOUT_MS = 2, 1000
# what the route accepts, read the same way here (service.routes.best, service.deps.GpuQ)
_KIND = re.compile(r"^[A-Za-z0-9_]+$")
_GPU = re.compile(r"^[^\x00-\x1f]+$")
_EXACT = {"true": True, "false": False}
_MAX_PARAMS = 32


class BestFastPath:
    """Serve kept ``GET /v1/best`` answers; everything else goes on to ``app``."""

    def __init__(self, app: App, cache: BestCache, settings: ServiceSettings) -> None:
        self.app = app
        self.cache = cache
        url = make_url(settings.database_url)
        open_reads = settings.public_reads or not settings.api_tokens
        self.enabled = url.get_backend_name() == "postgresql" and open_reads
        self._dsn = url.set(drivername="postgresql").render_as_string(hide_password=False)
        compiled = generations.statement(bindparam("keys"), many=True).compile(
            dialect=postgresql.dialect(paramstyle="pyformat"))
        self._sql = str(compiled)
        self._params = dict(compiled.params)  # the statement's constants, and "keys"
        #: problem keys waiting for the next query, each with its requests' futures
        self._waiting: dict[str, list[asyncio.Future[Any]]] = {}
        self._reading = False
        self._conn: Any = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._connecting = False
        self._retry_at = 0.0

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if (self.enabled and scope["type"] == "http" and scope["method"] == "GET"
                and scope["path"] == "/v1/best"):
            body = await self._kept(scope.get("query_string", b""))
            if body is not None:
                await send({"type": "http.response.start", "status": 200,
                            "headers": [(b"content-type", b"application/json"),
                                        (b"content-length", str(len(body)).encode())]})
                await send({"type": "http.response.body", "body": body})
                return
        await self.app(scope, receive, send)

    async def _kept(self, query_string: bytes) -> bytes | None:
        key = _key(query_string)
        if key is None:
            return None
        conn = await self._connection()
        if conn is None:
            return None
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._waiting.setdefault(key[0], []).append(future)
        if not self._reading:
            self._reading = True
            asyncio.get_running_loop().create_task(self._read(conn))
        generation = await future
        if generation is None:
            return None
        kept = self.cache.peek(key, generation)
        return kept.body if kept is not None and kept.status == 200 else None

    async def _read(self, conn: Any) -> None:
        """Read the generations of every waiting key, one query per round, until none waits;
        on an error every waiting request goes to the route."""
        try:
            while self._waiting:
                batch, self._waiting = self._waiting, {}
                try:
                    cur = await conn.execute(self._sql, {**self._params, "keys": list(batch)})
                    rows = {r[0]: (int(r[1]), int(r[2]), int(r[3]), int(r[4]))
                            for r in await cur.fetchall()}
                except Exception as exc:  # noqa: BLE001 - the route answers, a 503 if need be
                    log.info("fast path off for %.0f s: %s", RETRY_S, _first_line(exc))
                    rows = {}
                    for futures in self._waiting.values():
                        batch.setdefault("", []).extend(futures)
                    self._waiting = {}
                    await self._drop(conn)
                for k, futures in batch.items():
                    for f in futures:
                        if not f.done():
                            f.set_result(rows.get(k))
        finally:
            self._reading = False

    async def _connection(self) -> Any:
        """The connection of this event loop, made once by one request while the others go
        to the route; None while a failed attempt's ``RETRY_S`` runs."""
        loop = asyncio.get_running_loop()
        conn = self._conn
        if conn is not None and not conn.closed and self._loop is loop:
            return conn
        if self._loop is not loop:  # a new event loop (a test client's): start afresh there
            self._conn, self._waiting, self._reading = None, {}, False
        if time.monotonic() < self._retry_at or self._connecting:
            return None
        self._connecting = True
        try:
            import psycopg

            conn = await psycopg.AsyncConnection.connect(
                self._dsn, autocommit=True, prepare_threshold=0,
                connect_timeout=CONNECT_TIMEOUT_S)
            # a SET, not the URL's options (which may hold a search_path)
            await conn.execute(f"SET statement_timeout = {STATEMENT_TIMEOUT_MS}")
        except Exception as exc:  # noqa: BLE001 - the route answers meanwhile
            log.info("fast path off for %.0f s: %s", RETRY_S, _first_line(exc))
            self._retry_at = time.monotonic() + RETRY_S
            return None
        finally:
            self._connecting = False
        self._conn, self._loop = conn, loop
        return conn

    async def _drop(self, conn: Any) -> None:
        if self._conn is conn:
            self._conn = None
            self._retry_at = time.monotonic() + RETRY_S
        try:
            await conn.close()
        except Exception:  # noqa: BLE001 - it is gone either way
            pass


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0][:200] if text else type(exc).__name__


def _key(query_string: bytes) -> tuple[str, str | None, bool] | None:
    """``(problem key, gpu, exact)`` of a question read exactly as the route reads it, or None
    (the route then reads it, and answers what is wrong with it)."""
    try:
        pairs = parse_qsl(query_string.decode("ascii"), keep_blank_values=True,
                          strict_parsing=True)
    except (UnicodeDecodeError, ValueError):
        return None
    params = dict(pairs)
    if len(params) != len(pairs):
        return None  # a repeated parameter
    gpu = params.pop("gpu", None)
    exact = _EXACT.get(params.pop("exact", "false"))
    kind = params.get("kind", "gemm")
    if (exact is None or len(params) > _MAX_PARAMS or not 1 <= len(kind) <= 64
            or not _KIND.match(kind)
            or (gpu is not None and not (1 <= len(gpu) <= 200 and _GPU.match(gpu)))):
        return None
    try:
        problem = kinds.parse_query(kinds.get(kind), params)
    except Exception:  # noqa: BLE001 - the route answers the error
        return None
    return problem.key(), gpu, exact
