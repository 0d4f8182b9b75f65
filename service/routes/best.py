"""``/v1/best``: the fastest measured configuration of a problem on a GPU model."""

from __future__ import annotations

from typing import Annotated, Literal

from fastapi import APIRouter, Query

from search.types import GemmProblem, ProblemError
from service.deps import FlowDep, GpuQ
from service.errors import InvalidInput
from service.queries import find_best
from service.schemas import MAX_DIM, BestOut
from service.views import best_out

router = APIRouter(prefix="/v1", tags=["best"])
DimQ = Annotated[int, Query(ge=1, le=MAX_DIM)]
WordQ = Annotated[str, Query(min_length=1, max_length=32, pattern=r"^[A-Za-z0-9_]+$")]


@router.get("/best", response_model=BestOut,
            responses={404: {"description": "this problem was never tuned on that GPU"}})
def best(flow: FlowDep, m: DimQ, n: DimQ, k: DimQ,
         kind: Literal["gemm"] = "gemm", batch: DimQ = 1, dtype: WordQ = "bf16",
         out_dtype: WordQ | None = None, acc_dtype: WordQ = "fp32",
         layout_a: WordQ = "row", layout_b: WordQ = "row",
         gpu: GpuQ = None) -> BestOut:
    try:
        problem = GemmProblem(m=m, n=n, k=k, batch=batch, dtype=dtype, out_dtype=out_dtype,
                              acc_dtype=acc_dtype, layout_a=layout_a, layout_b=layout_b)
    except ProblemError as exc:
        raise InvalidInput(["query", exc.field], exc.message) from exc
    return best_out(find_best(flow.db, problem, gpu))
