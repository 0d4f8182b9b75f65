"""FastAPI dependencies: ``SessionDep``, ``FlowDep``, ``SettingsDep``, pagination (who may call
what: ``service.auth``). Those that do no I/O are ``async``: FastAPI runs a plain ``def``
dependency in its thread pool, a hop that costs more than the dependency itself."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Annotated

from fastapi import Depends, Query, Request
from sqlalchemy.orm import Session

from service.flow import Flow
from service.settings import ServiceSettings


async def get_flow(request: Request) -> Flow:
    return request.app.state.flow  # type: ignore[no-any-return]


def get_session(request: Request) -> Iterator[Session]:
    """A read-only session: routes that write go through ``Flow``."""
    with request.app.state.flow.db.read_session() as session:
        yield session


async def get_settings_dep(request: Request) -> ServiceSettings:
    return request.app.state.settings  # type: ignore[no-any-return]


FlowDep = Annotated[Flow, Depends(get_flow)]
SessionDep = Annotated[Session, Depends(get_session)]
SettingsDep = Annotated[ServiceSettings, Depends(get_settings_dep)]
#: An optional ``?gpu=`` filter: a GPU model name (no control characters).
GpuQ = Annotated[str | None, Query(min_length=1, max_length=200, pattern=r"^[^\x00-\x1f]+$")]


@dataclass(frozen=True)
class Paging:
    limit: int
    offset: int


async def paging(limit: Annotated[int, Query(ge=1, le=500)] = 50,
           offset: Annotated[int, Query(ge=0, le=2**62)] = 0) -> Paging:
    return Paging(limit, offset)


PagingDep = Annotated[Paging, Depends(paging)]
