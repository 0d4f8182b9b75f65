"""``/v1/workers``: register, lease candidates, renew leases, report measurements."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends, Path

from search.types import Device, Measurement
from service.auth import (
    WorkerAuth,
    WorkerCheck,
    WorkerIdentity,
    WorkerSecretAuth,
    worker_secret_header,
)
from service.deps import FlowDep
from service.responses import WORKER, answers
from service.schemas import (
    MAX_ID,
    LeaseIn,
    LeaseOut,
    RegisterIn,
    RegisterOut,
    RejectedOut,
    RenewOut,
    ReportIn,
    ReportOut,
)

router = APIRouter(prefix="/v1/workers", tags=["workers"], dependencies=[WorkerAuth])
WorkerId = Annotated[int, Path(ge=1, le=MAX_ID)]
LeaseId = Annotated[str, Path(min_length=1, max_length=64, pattern=r"^[A-Za-z0-9-]+$")]


@router.post("/register", response_model=RegisterOut, responses=answers(*WORKER))
def register(body: RegisterIn, flow: FlowDep, identity: WorkerIdentity,
             secret: Annotated[str | None, Depends(worker_secret_header)] = None) -> RegisterOut:
    """Register a worker, or re-register it (a restart) with its ``X-Worker-Secret``. The first
    registration of a name returns ``worker_secret``, once: keep it, send it with every call
    under the worker's id. The worker keeps the identity of the worker token it registered
    with: its later calls need a token of that identity."""
    device = Device.from_dict(body.device.model_dump())
    worker, issued = flow.register_worker(body.name, device, body.catalogues, secret, identity)
    return RegisterOut(worker_id=worker.id, gpu_model=worker.gpu_model, worker_secret=issued)


@router.post("/{worker_id}/lease", response_model=LeaseOut, responses=answers(*WORKER))
def lease(worker_id: WorkerId, flow: FlowDep, check: WorkerCheck,
          body: LeaseIn | None = None) -> LeaseOut:
    """Lease up to ``max_candidates`` of the queued work this worker's GPU model can run."""
    grant = flow.lease(worker_id, (body or LeaseIn()).max_candidates, check)
    return LeaseOut(lease_id=grant.lease_id, expires_at=grant.expires_at,
                    lease_seconds=grant.lease_seconds,
                    candidates=[c.to_dict() | {"attempts": a}
                                for c, a in zip(grant.candidates, grant.attempts, strict=True)])


@router.post("/{worker_id}/leases/{lease_id}/renew", response_model=RenewOut,
             dependencies=[WorkerSecretAuth], responses=answers(*WORKER, 410))
def renew(worker_id: WorkerId, lease_id: LeaseId, flow: FlowDep) -> RenewOut:
    return RenewOut(lease_id=lease_id, expires_at=flow.renew(worker_id, lease_id))


@router.post("/{worker_id}/report", response_model=ReportOut, responses=answers(*WORKER))
def report(worker_id: WorkerId, body: ReportIn, flow: FlowDep, check: WorkerCheck) -> ReportOut:
    """Report the results of a lease: each stored once, or refused with the reason."""
    results = [(r.candidate_id, Measurement.from_dict(r.measurement.model_dump()))
               for r in body.results]
    outcome = flow.report(worker_id, body.lease_id, results, check)
    return ReportOut(accepted=outcome.accepted,
                     rejected=[RejectedOut(candidate_id=c, reason=r) for c, r in outcome.rejected])
