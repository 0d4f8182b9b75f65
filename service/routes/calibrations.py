"""``/v1/calibrations``: the measured peaks behind every roofline, and asking for a re-run."""

from __future__ import annotations

from fastapi import APIRouter

from db import calibrations, measurements
from search.types import Task
from service.auth import ReadAuth, UserDep
from service.deps import FlowDep, GpuQ, SessionDep
from service.responses import READ, WRITE, answers
from service.schemas import CalibrationList, RefreshIn, RefreshOut
from service.views import calibration_out

router = APIRouter(prefix="/v1/calibrations", tags=["calibrations"], dependencies=[ReadAuth])


@router.get("", response_model=CalibrationList, responses=answers(*READ))
def list_calibrations(session: SessionDep, gpu: GpuQ = None) -> CalibrationList:
    """Calibrations newest first (stale ones included, flagged), each with what its task
    measured (``extra``)."""
    items = calibrations.list_calibrations(session, gpu)
    measured = measurements.of_tasks(session, sorted({c.job_id for c in items if c.job_id}),
                                     Task.CALIBRATE.value)
    return CalibrationList(items=[calibration_out(c, measured.get(c.job_id or 0))
                                  for c in items])


@router.post("/refresh", response_model=RefreshOut, responses=answers(*WRITE))
def refresh(body: RefreshIn, flow: FlowDep, _caller: UserDep) -> RefreshOut:
    """Mark the GPU model's calibration stale: the next job on it measures the device again
    (a driver or toolkit change does this by itself)."""
    with flow.db.session() as s:
        n = calibrations.mark_stale(s, body.gpu)
    return RefreshOut(gpu=body.gpu, marked_stale=n)
