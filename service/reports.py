"""Storing reported results under their candidates' row locks: each refused (not leased to
this worker, a late or repeated report, another GPU model), stored (held when faster than the
roofline allows, ``service.plausibility``), or a held result's re-check. ``Flow.report`` calls
:func:`store_all` with every result of a report in one transaction (background planning), or
with one result per transaction (inline planning).

A report's results are read and written together: its candidates are locked and read in one
statement, their jobs and stored measurements in one each, and what it stores (measurements,
their totals, the candidates' new states) is written in one statement each at the end."""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime

from sqlalchemy.orm import Session

from db import calibrations, jobs, measurements, workers
from db import candidates as cands
from db.records import (
    CalibrationRecord,
    CandidateRecord,
    CandidateStatus,
    JobRecord,
    MeasurementRecord,
    WorkerRecord,
)
from search import kinds
from search.decision import Policy
from search.types import Measurement, Status, Task
from service import plausibility
from service.agent_loop import record_calibration

log = logging.getLogger("kernelsearch.flow")

__all__ = ["Shared", "Stored", "store_all"]


@dataclass(frozen=True)
class Stored:
    """What became of one reported result: stored (``refused`` None), or refused and why;
    ``stored``: the candidate's measurement stored before (a repeat)."""

    cand: CandidateRecord | None
    job: JobRecord | None
    refused: str | None
    stored: MeasurementRecord | None = None
    #: what was stored: the report judged against the job's precision bound
    measurement: Measurement | None = None


@dataclass
class Shared:
    """What the results of one report (one transaction) read once and write together: their
    candidates (row-locked), jobs and stored measurements, the GPU model's latest calibration
    (forgotten when the report records a new one), and the writes that :meth:`flush` makes."""

    jobs: dict[int, JobRecord | None] = field(default_factory=dict)
    calibrations: dict[str, CalibrationRecord | None] = field(default_factory=dict)
    candidates: dict[int, CandidateRecord | None] = field(default_factory=dict)
    measured: dict[int, MeasurementRecord | None] = field(default_factory=dict)
    new: list[measurements.Reported] = field(default_factory=list)
    finished: list[tuple[int, CandidateStatus, str | None]] = field(default_factory=list)

    def load(self, s: Session, ids: Sequence[int]) -> None:
        """Lock and read the candidates of ``ids`` not read yet (in id order, one statement),
        and read their jobs and stored measurements (one statement each)."""
        ids = sorted(set(ids) - self.candidates.keys())
        if not ids:
            return
        found = cands.lock_candidates(s, ids)
        self.candidates.update({i: found.get(i) for i in ids})
        job_ids = sorted({c.job_id for c in found.values()} - self.jobs.keys())
        read = jobs.get_jobs(s, job_ids)
        self.jobs.update({j: read.get(j) for j in job_ids})
        stored = measurements.of_candidates(s, ids)
        self.measured.update({i: stored.get(i) for i in ids})

    def forget(self, candidate_id: int) -> None:
        """Read the candidate again at its next :meth:`load` (after a :meth:`flush`)."""
        self.candidates.pop(candidate_id, None)
        self.measured.pop(candidate_id, None)

    def calibration(self, s: Session, gpu_model: str) -> CalibrationRecord | None:
        if gpu_model not in self.calibrations:
            self.calibrations[gpu_model] = calibrations.latest(s, gpu_model)
        return self.calibrations[gpu_model]

    def flush(self, s: Session) -> None:
        """Write the measurements (with their totals) and the candidates' states held so far."""
        measurements.add_measurements(s, self.new)
        cands.finish_candidates(s, self.finished)
        self.new, self.finished = [], []


def store_all(s: Session, worker: WorkerRecord, lease_id: str,
              results: Sequence[tuple[int, Measurement]], clock: Callable[[], datetime],
              implausible_below: float, across_identities: bool = False) -> list[Stored]:
    """Store each of ``results`` (``(candidate id, measurement)``, in this order: callers sort
    them by id) as :func:`_store` does, reading and writing them together (``Shared``); a
    candidate reported twice is read again, as stored, for its second result."""
    shared = Shared()
    shared.load(s, [cid for cid, _ in results])
    out: list[Stored] = []
    seen: set[int] = set()
    for candidate_id, measurement in results:
        if candidate_id in seen:
            shared.flush(s)
            shared.forget(candidate_id)
        seen.add(candidate_id)
        out.append(_store(s, worker, lease_id, candidate_id, measurement, clock(),
                         implausible_below, shared, across_identities))
    shared.flush(s)
    return out


def _store(s: Session, worker: WorkerRecord, lease_id: str, candidate_id: int,
          measurement: Measurement, now: datetime, implausible_below: float,
          shared: Shared, across_identities: bool = False) -> Stored:
    """Store one result under the candidate's row lock (taken by ``shared.load``), unless it
    is refused; a kernel faster than the roofline allows is stored held
    (``service.plausibility``), and with ``across_identities`` (more than one worker token) it
    is confirmed only by a worker of another token identity. The common writes wait in
    ``shared`` for its ``flush``. The caller marks the worker seen (``workers.touch``) for what
    was stored."""
    shared.load(s, [candidate_id])
    cand = shared.candidates[candidate_id]
    job = shared.jobs.get(cand.job_id) if cand is not None else None
    if cand is None or job is None:
        return Stored(cand, job, "unknown candidate")
    reason = _rejection(cand, worker.id, lease_id)
    if reason is None and job.bound_gpu != worker.gpu_model:
        reason = (f"candidate {candidate_id} belongs to a job on {job.bound_gpu!r}, not on "
                  f"this worker's {worker.gpu_model!r}")
    if reason not in (None, DUPLICATE):
        return Stored(cand, job, reason)
    stored = shared.measured[candidate_id]
    precision = None
    if cand.backend is not None:
        # a lowered kernel's error against the job's bound (Policy.judge)
        precision = kinds.get(job.problem.kind).precision_of(job.problem, cand.backend,
                                                             cand.config)
        measurement = Policy.from_dict(job.policy).judge(measurement, precision)
    if (stored is not None and stored.status == Status.HELD and reason is None
            and stored.worker_id != worker.id):
        if across_identities:
            held_by = (workers.get_worker(s, stored.worker_id)
                       if stored.worker_id is not None else None)
            if not plausibility.confirms_across(held_by, worker):
                if cand.status == CandidateStatus.LEASED:
                    cands.requeue_for_recheck(s, cand.id)
                why = plausibility.refused_within_identity(cand.id, held_by, worker)
                return Stored(cand, job, why)
        return _recheck(s, cand, job, worker, stored, measurement)
    if stored is not None:
        return Stored(cand, job, DUPLICATE.format(id=candidate_id), stored)
    held = None
    if cand.backend is not None:
        held = plausibility.why_held(job, worker.gpu_model, measurement, precision,
                                     implausible_below,
                                     shared.calibration(s, worker.gpu_model),
                                     across_identities)
        if held is not None:
            log.warning("candidate %s of job %s from worker %s %s", cand.id, job.id,
                        worker.id, held)
            measurement = replace(measurement, status=Status.HELD, error=held)
    shared.new.append(measurements.Reported(cand, worker.gpu_model, measurement, worker.id,
                                            now, precision))
    if cand.task == Task.CALIBRATE.value and measurement.ok:
        record_calibration(s, cand, measurement, worker.gpu_model, worker.id, now)
        shared.calibrations.pop(worker.gpu_model, None)
    if held is not None and cand.status == CandidateStatus.LEASED:
        cands.requeue_for_recheck(s, cand.id)
    elif cand.status == CandidateStatus.LEASED:
        failure = None if measurement.ok else _failure(measurement)
        shared.finished.append((cand.id, CandidateStatus.DONE if measurement.ok
                                else CandidateStatus.FAILED, failure))
    return Stored(cand, job, None, measurement=measurement)


def _recheck(s: Session, cand: CandidateRecord, job: JobRecord, worker: WorkerRecord,
             held: MeasurementRecord, again: Measurement) -> Stored:
    """Another worker's re-measurement of a held result: within tolerance it releases the held
    result (status ok), otherwise the result stays held with the reason; the candidate is
    done either way, and the re-measurement is kept in the held result's ``extra``."""
    confirmed = plausibility.agrees(held, again)
    settled = measurements.settle_held(
        s, held, confirmed=confirmed,
        error=None if confirmed else plausibility.verdict(held, again, worker.id),
        extra={"recheck": {"worker_id": worker.id, "median_us": again.median_us,
                           "status": str(again.status)}})
    log.warning("held result of candidate %s (job %s) %s by worker %s", cand.id, job.id,
                "confirmed" if confirmed else "not confirmed", worker.id)
    cands.finish_candidate(s, cand.id, CandidateStatus.DONE if confirmed
                           else CandidateStatus.FAILED, None if confirmed else settled.error)
    return Stored(cand, job, None, measurement=settled.to_measurement())



#: The rejection of a report already stored (``{id}``: the candidate).
DUPLICATE = "candidate {id} already reported"


def _rejection(cand: CandidateRecord | None, worker_id: int, lease_id: str) -> str | None:
    if cand is None:
        return "unknown candidate"
    if cand.lease_id != lease_id or cand.worker_id != worker_id:
        if cand.attempts > 0 and cand.lease_id != lease_id:
            return (f"candidate {cand.id} is not leased to worker {worker_id} under lease "
                    f"{lease_id}: a lease of it expired and it went back to the queue")
        return f"candidate {cand.id} is not leased to worker {worker_id} under lease {lease_id}"
    if cand.status in (CandidateStatus.LEASED, CandidateStatus.CANCELLED):
        return None  # a cancelled candidate's measurement is still worth keeping
    if (cand.failure_reason or "").startswith("lease expired"):
        return f"candidate {cand.id}: {cand.failure_reason}"
    return DUPLICATE


def _failure(m: Measurement) -> str:
    return f"{m.status}: {m.error}" if m.error else str(m.status)
