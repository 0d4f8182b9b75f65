"""The FastAPI application: ``create_app(settings)`` migrates the database and mounts /v1.

OpenAPI docs are at ``/docs``. Errors a client causes are 4xx with a message that names the
field and the rule; nothing a client sends should produce a 500.
"""

from __future__ import annotations

import gc
import json
import logging
import math
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from fastapi import FastAPI, Request
from fastapi.encoders import jsonable_encoder
from fastapi.exceptions import RequestValidationError
from fastapi.middleware.cors import CORSMiddleware
from fastapi.responses import JSONResponse, Response
from sqlalchemy import text
from sqlalchemy.exc import DataError

from db.engine import Database
from db.migrate import upgrade
from search import kinds
from service import dashboard, openapi
from service.auth import ReadAuth, warn_if_open
from service.best_cache import BestCache
from service.best_fast import BestFastPath
from service.errors import ServiceError
from service.flow import Clock, Flow, utcnow
from service.limits import BodyLimit
from service.outages import install as install_outages
from service.routes import best, calibrations, jobs, problems, workers
from service.settings import ServiceSettings, get_settings
from service.tuning import TunerFactory, TunerPool, optuna_tuner

log = logging.getLogger("kernelsearch.service")


def create_app(settings: ServiceSettings | None = None, *,
               tuner_factory: TunerFactory | None = None, clock: Clock | None = None) -> FastAPI:
    """Build the API. ``tuner_factory`` and ``clock`` are seams for tests (fakes, fake time)."""
    settings = settings or get_settings()
    kinds.load_plugins(settings.plugin_modules)
    if settings.migrate_on_startup:
        upgrade(settings.database_url, studies=True)
    database = Database(settings.database_url)
    flow = Flow(database, settings, TunerPool(database.url, tuner_factory or optuna_tuner),
                clock or utcnow)

    @asynccontextmanager
    async def lifespan(_app: FastAPI) -> AsyncIterator[None]:
        # What start-up made (modules, the app, the kinds) lives as long as the process: out
        # of the collector's generations, a full collection walks only what requests made,
        # not the whole start-up heap (a pause that every request in flight waits on).
        gc.freeze()
        yield
        flow.close()

    app = FastAPI(title="kernelsearch", version="0.1.0", lifespan=lifespan,
                  description="Autotuning kernel search (GEMM and every registered problem "
                              "kind): submit jobs, lease and report candidates, ask for the "
                              "best configuration.")
    app.state.settings = settings
    app.state.flow = flow
    app.state.best_cache = BestCache(database)

    @app.exception_handler(ServiceError)
    async def _service_error(_request: Request, exc: ServiceError) -> JSONResponse:
        return JSONResponse(status_code=exc.status_code, content={"detail": exc.detail()},
                            headers=exc.headers())

    @app.exception_handler(RequestValidationError)
    async def _invalid(_request: Request, exc: RequestValidationError) -> Response:
        # FastAPI's own handler echoes the input back (a large body comes back whole) and
        # fails on NaN/Infinity; a lone surrogate in a string fails UTF-8 encoding. Each
        # error keeps where and why, and the JSON is ASCII (surrogates escaped): never a 500.
        errors = [{k: e[k] for k in ("loc", "msg", "type") if k in e} for e in exc.errors()]
        body = json.dumps({"detail": _json_safe(jsonable_encoder(errors))}, ensure_ascii=True)
        return Response(body, status_code=422, media_type="application/json")

    @app.exception_handler(DataError)
    async def _data_error(_request: Request, exc: DataError) -> JSONResponse:
        # A value the schemas let through but the database cannot store: still the client's.
        log.warning("database rejected a value: %s", exc.orig)
        return JSONResponse(status_code=422,
                            content={"detail": f"a value does not fit the database: {exc.orig}"})

    install_outages(app, settings.retry_after_s)

    @app.get("/healthz", tags=["health"])
    def healthz() -> dict[str, str]:
        """The process answers (liveness)."""
        return {"status": "ok"}

    @app.get("/readyz", tags=["health"],
             responses={503: {"description": "the database is unreachable"}})
    def readyz() -> dict[str, str]:
        """The process answers and reaches its database (readiness: compose's health check)."""
        with database.read_session() as s:
            s.execute(text("SELECT 1"))
        return {"status": "ok", "database": "ok"}

    for module in (jobs, best, problems, calibrations, workers):
        app.include_router(module.router)
    if settings.dashboard:
        dashboard.install(app, ReadAuth)
    # innermost of the middlewares: its answers still pass CORS and the body limit
    app.add_middleware(BestFastPath, cache=app.state.best_cache, settings=settings)
    app.add_middleware(BodyLimit, max_bytes=settings.max_body_bytes)
    if settings.cors_origins:
        app.add_middleware(CORSMiddleware, allow_origins=list(settings.cors_origins),
                           allow_methods=["GET", "POST"],
                           allow_headers=["Authorization", "Content-Type"])
    openapi.install(app)
    warn_if_open(settings)
    return app


def _json_safe(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return repr(value)
    if isinstance(value, dict):
        return {k: _json_safe(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_json_safe(v) for v in value]
    return value
