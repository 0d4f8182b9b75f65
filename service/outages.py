"""The database unreachable or busy is the service's fault, not the client's: a 503 with
``Retry-After``, never a 500.

Postgres down, a connection cut, the pool exhausted, or SQLite locked past its busy timeout all
surface as a SQLAlchemy ``OperationalError``, ``InterfaceError`` or pool ``TimeoutError``
(Optuna wraps them in ``StorageInternalError``; the original stays in the exception chain).
Each write is one transaction (``db.engine.Database.session``), so an outage leaves no write
half-done, and a retried request is safe: a report already stored is refused as a duplicate.
"""

from __future__ import annotations

import logging

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse
from optuna.exceptions import StorageInternalError
from sqlalchemy.exc import DBAPIError, InterfaceError, OperationalError
from sqlalchemy.exc import TimeoutError as PoolTimeout

log = logging.getLogger("kernelsearch.service")

_OUTAGES = (OperationalError, InterfaceError, PoolTimeout)


def outage_of(exc: BaseException) -> BaseException | None:
    """The database outage behind ``exc`` (it, or one in its cause/context chain), if any."""
    seen: set[int] = set()
    cur: BaseException | None = exc
    while cur is not None and id(cur) not in seen:
        seen.add(id(cur))
        if isinstance(cur, _OUTAGES):
            return cur
        if isinstance(cur, DBAPIError) and cur.connection_invalidated:
            return cur
        cur = cur.__cause__ or cur.__context__
    return None


def describe(outage: BaseException) -> str:
    """One line saying what failed, without the SQL or its parameters (for the log: the client
    is not told where the database lives)."""
    orig = getattr(outage, "orig", None)
    text = str(orig if orig is not None else outage).strip().splitlines()
    return text[0][:200] if text else type(outage).__name__


def install(app: FastAPI, retry_after_s: int) -> None:
    """Answer an outage with 503 and ``Retry-After`` (Optuna's wrapped storage errors that are
    no outage stay a 500)."""

    async def _unavailable(request: Request, exc: Exception) -> JSONResponse:
        outage = outage_of(exc)
        if outage is None:
            log.error("storage error on %s %s", request.method, request.url.path, exc_info=exc)
            return JSONResponse(status_code=500, content={"detail": "internal server error"})
        why = describe(outage)
        log.warning("database unavailable on %s %s: %s", request.method, request.url.path, why)
        return JSONResponse(
            status_code=503, headers={"Retry-After": str(retry_after_s)},
            content={"detail": f"the database is unavailable: retry in {retry_after_s} s "
                               "(a retried report is never stored twice)"})

    for cls in (*_OUTAGES, StorageInternalError):
        app.add_exception_handler(cls, _unavailable)
