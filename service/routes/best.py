"""``/v1/best``: the fastest measured configuration of a problem on a GPU model."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query, Request, Response

from search import kinds
from search.types import ProblemError
from service.auth import ReadAuth
from service.best_cache import BestCache
from service.deps import GpuQ
from service.errors import InvalidInput
from service.responses import READ, ErrorOut, answers
from service.schemas import BestOut

router = APIRouter(prefix="/v1", tags=["best"], dependencies=[ReadAuth])
KindQ = Annotated[str, Query(min_length=1, max_length=64, pattern=r"^[A-Za-z0-9_]+$",
                             description="the problem's kind; its fields follow as parameters, "
                                         "e.g. m, n, k, dtype for gemm")]
#: Query parameters that are not the problem's fields.
_NOT_FIELDS = ("gpu", "exact")
ExactQ = Annotated[bool, Query(description="true: the best kernel computing in the problem's "
                                           "input precision only (leaving out those a policy "
                                           "allowed to compute lower, e.g. in fp8_e4m3)")]
_MAX_PARAMS = 32


@router.get("/best", response_model=BestOut,
            responses=answers(*READ) | {404: {"model": ErrorOut, "description":
                                              "this problem was never tuned on that GPU"}})
def best(request: Request, kind: KindQ = "gemm", gpu: GpuQ = None,
         exact: ExactQ = False) -> Response:
    """``/v1/best?kind=gemm&m=4096&n=4096&k=4096&dtype=bf16[&gpu=...][&exact=true]``: the
    problem's fields are the kind's (``POST /v1/jobs``'s ``problem``), given as query
    parameters. The answer states the precision the kernel computes in and its measured
    error; ``exact=true`` answers with the best kernel computing in the input precision."""
    params = {k: v for k, v in request.query_params.items() if k not in _NOT_FIELDS}
    if len(params) > _MAX_PARAMS:
        raise InvalidInput(["query"], f"at most {_MAX_PARAMS} parameters")
    try:
        problem = kinds.parse_query(kinds.get(kind), params)
    except ProblemError as exc:
        raise InvalidInput(["query", exc.field], exc.message) from exc
    cache: BestCache = request.app.state.best_cache
    # the body is BestOut's JSON, made once per answer (service.best_cache)
    answer = cache.answer(problem, gpu, exact)
    return Response(answer.body, status_code=answer.status, media_type="application/json")
