"""The dashboard's HTML pages: overview, problem, jobs, workers, shapes map."""

from __future__ import annotations

import math
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import FileResponse, HTMLResponse, Response

from db import dashboard as q
from db import decisions, jobs
from db.records import ACTIVE_JOB
from service.dashboard import views
from service.dashboard.api import active_jobs
from service.dashboard.views import (
    DtypeQ,
    GpuQ,
    KindQ,
    OrderQ,
    PageQ,
    PerPageQ,
    ProblemId,
    ShapeQ,
    SortQ,
    VerdictQ,
    render,
)
from service.deps import FlowDep, SessionDep
from service.errors import NotFound

router = APIRouter(prefix="/ui", include_in_schema=False)
JOB_PAGE = 25


@router.get("", response_class=HTMLResponse)
def overview(request: Request, session: SessionDep, kind: KindQ = None, gpu: GpuQ = None,
             verdict: VerdictQ = None, shape: ShapeQ = None, sort: SortQ = "last",
             order: OrderQ = "desc", page: PageQ = 1, per_page: PerPageQ = 50) -> Any:
    """Every tuned problem per GPU model, filtered, sorted and paginated in SQL."""
    f = q.OverviewFilter(kind or None, gpu or None, verdict or None,
                         (shape or "").strip().lower() or None)
    strip = q.strip(session, f)
    rows = q.overview(session, f, sort, order == "desc", per_page, (page - 1) * per_page)
    kinds, gpus = q.facets(session)
    pages = max(1, math.ceil(strip.rows / per_page))
    params = {"kind": kind, "gpu": gpu, "verdict": verdict, "shape": shape, "sort": sort,
              "order": order, "per_page": per_page}
    return render(request, "overview.html", rows=rows, strip=strip, kinds=kinds, gpus=gpus,
                  verdicts=(*q.VERDICTS, q.UNDECIDED), params=params, page=page, pages=pages,
                  sorts=q.SORTS, label_of=views.label_of)


@router.get("/problems/{problem_id}", response_class=HTMLResponse)
def problem(request: Request, problem_id: ProblemId, session: SessionDep, gpu: GpuQ = None
            ) -> Any:
    """One problem on one GPU model: its charts (fed by ``/ui/api``), decision and history."""
    record = jobs.get_problem(session, problem_id)
    if record is None:
        raise NotFound(f"problem {problem_id} not found")
    gpus = q.gpus_of(session, problem_id)
    gpu = gpu or (gpus[0] if gpus else None)
    current = decisions.current(session, problem_id, gpu) if gpu else None
    history, total = (decisions.history(session, problem_id, 50, 0, gpu) if gpu
                      else ([], 0))
    p = record.problem
    base = str(request.base_url).rstrip("/")
    snippet = views.snippet(p, gpu, base) if current is not None and gpu else None
    return render(request, "problem.html", problem=record, gpu=gpu, gpus=gpus,
                  decision=current, history=history, history_total=total, snippet=snippet,
                  label=views.label_of(views.shape_label(p), record.key))


@router.get("/jobs", response_class=HTMLResponse)
def jobs_page(request: Request, session: SessionDep, flow: FlowDep, page: PageQ = 1) -> Any:
    """Queued and running jobs (live: the page polls ``/ui/api/jobs/active``), then the rest
    newest first."""
    active, active_total = active_jobs(flow, session)
    done, total = q.job_lines(session, None, JOB_PAGE, (page - 1) * JOB_PAGE)
    return render(request, "jobs.html", active=active, active_total=active_total, done=done,
                  total=total, page=page,
                  pages=max(1, math.ceil(total / JOB_PAGE)), active_states=ACTIVE_JOB,
                  label_of=views.label_of)


@router.get("/workers", response_class=HTMLResponse)
def workers_page(request: Request, session: SessionDep, flow: FlowDep, page: PageQ = 1) -> Any:
    lines, total = q.worker_lines(session, flow.clock(), 100, (page - 1) * 100)
    return render(request, "workers.html", workers=lines, total=total, page=page,
                  pages=max(1, math.ceil(total / 100)),
                  lease_seconds=flow.settings.lease_seconds)


@router.get("/shapes", response_class=HTMLResponse)
def shapes(request: Request, session: SessionDep, gpu: GpuQ = None, kind: KindQ = None,
           dtype: DtypeQ = None) -> Any:
    """The shapes map of one GPU model and kind (the chart comes from ``/ui/api/shapes``)."""
    views.map_axes(kind)  # a 422 for a kind that is none
    kinds, gpus = q.facets(session)
    gpu = gpu or (gpus[0] if gpus else None)
    kind = kind or ("gemm" if "gemm" in kinds else kinds[0] if kinds else None)
    dtypes = q.map_dtypes(session, gpu, kind) if gpu and kind else []
    axes = views.map_axes(kind)
    return render(request, "shapes.html", gpus=gpus, kinds=kinds, dtypes=dtypes, gpu=gpu,
                  kind=kind, dtype=dtype, axes=axes)


@router.get("/vendor/plotly.min.js")
def plotly() -> Response:
    """Plotly's bundle from the installed ``plotly`` package (cached by the browser)."""
    path = views.plotly_file()
    if path is None:
        raise NotFound("plotly.min.js: the plotly package is not installed (pip install plotly)")
    return FileResponse(path, media_type="text/javascript",
                        headers={"Cache-Control": "public, max-age=86400"})
