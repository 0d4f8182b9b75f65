"""The dashboard's JSON: what its charts and live tables read (``/ui/api/...``).

Column arrays rather than lists of objects for the trials (a problem may have thousands), and
only the active jobs are polled.
"""

from __future__ import annotations

import math
from dataclasses import asdict
from typing import Any

from fastapi import APIRouter
from sqlalchemy.orm import Session

from db import calibrations, decisions, jobs
from db import dashboard as q
from search import kinds
from search.roofline import Calibration, missing_roofline, roofline
from service.dashboard import views
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
)
from service.deps import FlowDep, SessionDep
from service.errors import InvalidInput, NotFound
from service.flow import Flow

router = APIRouter(prefix="/ui/api", include_in_schema=False)
#: The most trials a problem's charts get (the total is reported beside them).
MAX_TRIALS = 20_000
#: The active jobs shown live, oldest first.
MAX_ACTIVE = 100


@router.get("/overview")
def overview(session: SessionDep, kind: KindQ = None, gpu: GpuQ = None,
             verdict: VerdictQ = None, shape: ShapeQ = None, sort: SortQ = "last",
             order: OrderQ = "desc", page: PageQ = 1, per_page: PerPageQ = 50
             ) -> dict[str, Any]:
    f = q.OverviewFilter(kind or None, gpu or None, verdict or None,
                         (shape or "").strip().lower() or None)
    strip = q.strip(session, f)
    rows = q.overview(session, f, sort, order == "desc", per_page, (page - 1) * per_page)
    return {"total": strip.rows, "page": page, "per_page": per_page,
            "pages": max(1, math.ceil(strip.rows / per_page)), "strip": asdict(strip),
            "rows": [asdict(r) for r in rows]}


@router.get("/problems/{problem_id}/trials")
def trials(problem_id: ProblemId, session: SessionDep, gpu: GpuQ = None) -> dict[str, Any]:
    """A problem's measurements on one GPU model, with what the charts draw around them: the
    library's best, the calibrated ceilings, the decision's picks and verification."""
    record = jobs.get_problem(session, problem_id)
    if record is None:
        raise NotFound(f"problem {problem_id} not found")
    gpus = q.gpus_of(session, problem_id)
    gpu = gpu or (gpus[0] if gpus else None)
    if gpu is None:
        raise NotFound(f"problem {problem_id} has no measurements yet")
    if gpu not in gpus:
        raise InvalidInput(["query", "gpu"], f"problem {problem_id} was not measured on "
                                             f"{gpu!r}; it was on: {', '.join(gpus)}")
    points, total = q.trials(session, problem_id, gpu, MAX_TRIALS)
    p = record.problem
    library = set(kinds.get(p.kind).library_backends) if p.kind in kinds.kinds() else set()
    lib_ok = [t for t in points if t.backend in library and t.status == "ok" and t.median_us]
    lib_best = min(lib_ok, key=lambda t: t.median_us or math.inf) if lib_ok else None
    d = decisions.current(session, problem_id, gpu)
    cal = calibrations.latest(session, gpu) or calibrations.latest(session, gpu,
                                                                   include_stale=True)
    return {
        "problem": {"id": record.id, "kind": record.kind, "key": record.key,
                    "label": views.label_of(views.shape_label(p), record.key),
                    "dtype": p.dtype, "flops": p.flops, "bytes": p.min_bytes},
        "gpu": gpu, "total": total, "shown": len(points),
        "trials": {
            "id": [t.id for t in points], "job_id": [t.job_id for t in points],
            "trial_number": [t.trial_number for t in points], "tier": [t.tier for t in points],
            "backend": [t.backend for t in points], "status": [t.status for t in points],
            "median_us": [t.median_us for t in points], "p20_us": [t.p20_us for t in points],
            "p80_us": [t.p80_us for t in points], "gpu_s": [round(t.gpu_s, 3) for t in points],
            "config": [t.config for t in points], "error": [t.error for t in points],
            "created_at": [t.created_at.isoformat() for t in points]},
        "library_best": ({"backend": lib_best.backend, "median_us": lib_best.median_us,
                          "id": lib_best.id} if lib_best else None),
        "decision": _decision(d),
        "roofline": _roofline(p, gpu, cal),
    }


def _decision(d: Any) -> dict[str, Any] | None:
    if d is None:
        return None
    ev = d.evidence
    return {"id": d.id, "verdict": d.verdict, "chosen": d.chosen, "backend": d.backend,
            "median_us": d.median_us, "speedup": d.speedup, "attainable_us": d.attainable_us,
            "library": ev.get("library"), "custom": ev.get("custom"),
            "reference": ev.get("reference"), "verification": ev.get("verification")}


def _roofline(p: Any, gpu: str, cal: Any) -> dict[str, Any]:
    """The GPU model's calibrated ceilings around the problem, or (``missing``) why there are
    none (no calibration, or the CPU interpreter's, which measures no ceilings)."""
    calibration = (Calibration(gpu, cal.bandwidth_gbs, cal.peak_tflops, cal.env,
                               cal.peak_low_tflops) if cal is not None else None)
    rf = roofline(p, calibration)
    if cal is None or rf is None:
        return {"missing": missing_roofline(p, calibration)}
    return {"bandwidth_gbs": cal.bandwidth_gbs, "peaks": dict(cal.peak_tflops),
            "peak_low": dict(cal.peak_low_tflops), "dtype": p.dtype,
            "peak": calibration.peak(p.dtype), "intensity": p.flops / max(1, p.min_bytes),
            "attainable_us": rf.attainable_us, "bound": rf.bound,
            "calibrated_at": cal.created_at.isoformat()}


def active_jobs(flow: Flow, session: Session) -> tuple[list[dict[str, Any]], int]:
    """The first ``MAX_ACTIVE`` queued and running jobs, oldest first, with their progress
    (as ``GET /v1/jobs/{id}`` counts it, in a few grouped queries), and how many are
    active."""
    records, total = q.active(session, MAX_ACTIVE)
    known = kinds.kinds()
    roles = {r.id: (known[r.problem.kind].library_tier,
                    known[r.problem.kind].library_backends) if r.problem.kind in known
             else (None, ()) for r in records}
    progress = q.progress(session, [(i, tier, lib) for i, (tier, lib) in roles.items()])
    waiting = flow.waiting([r for r in records if r.status == "queued"])
    now = flow.clock()
    out = []
    for r in records:
        p = progress[r.id]
        elapsed = (max(0.0, (now - r.started_at).total_seconds())
                   if r.started_at is not None else None)
        out.append({
            "id": r.id, "status": r.status, "stage": r.stage or "—",
            "problem_id": r.problem_id, "kind": r.problem.kind,
            "label": views.label_of(views.shape_label(r.problem), r.problem_key),
            "gpu": r.bound_gpu or r.target_gpu, "trials_done": p.trials_done,
            "trials_budget": r.max_trials, "outstanding": p.outstanding,
            "elapsed_s": elapsed, "best_us": p.best_us, "best_backend": p.best_backend,
            "library_us": p.library_us,
            "speedup": p.library_us / p.best_us if p.library_us and p.best_us else None,
            "waiting": waiting.get(r.id), "created_at": r.created_at.isoformat()})
    return out, total


@router.get("/jobs/active")
def jobs_active(flow: FlowDep, session: SessionDep) -> dict[str, Any]:
    jobs, total = active_jobs(flow, session)
    return {"jobs": jobs, "active": total, "at": flow.clock().isoformat()}


@router.get("/shapes")
def shapes(session: SessionDep, gpu: GpuQ = None, kind: KindQ = None, dtype: DtypeQ = None
           ) -> dict[str, Any]:
    axes = views.map_axes(kind)  # a 422 for a kind that is none
    kinds_, gpus = q.facets(session)
    gpu = gpu or (gpus[0] if gpus else None)
    kind = kind or ("gemm" if "gemm" in kinds_ else kinds_[0] if kinds_ else None)
    axes = axes or views.map_axes(kind)
    if kind is None or gpu is None:
        return {"gpu": gpu, "kind": kind, "axes": None, "cells": []}
    cells = q.shapes_map(session, gpu, kind, axes, dtype) if axes else []
    return {"gpu": gpu, "kind": kind, "dtype": dtype, "axes": list(axes) if axes else None,
            "verdicts": list(q.VERDICTS), "cells": [asdict(c) for c in cells]}


@router.get("/workers")
def workers(session: SessionDep, flow: FlowDep, page: PageQ = 1) -> dict[str, Any]:
    lines, total = q.worker_lines(session, flow.clock(), 100, (page - 1) * 100)
    return {"total": total, "workers": [asdict(w) for w in lines]}
