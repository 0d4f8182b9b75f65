"""Why a job waits, in words for its status (``JobState.waiting``): a queued job has no worker
of its GPU model (none registered, or none seen within a lease); a running one whose search is
over waits for another worker to re-measure its held results."""

from __future__ import annotations

from datetime import datetime

from sqlalchemy.orm import Session

from db import candidates as cands
from db import workers
from db.records import JobRecord, JobStatus
from service.agent_loop import RECHECK, recheck_until

__all__ = ["no_worker", "rechecking", "why_waiting"]


def why_waiting(s: Session, job: JobRecord, now: datetime, lease_seconds: float,
                held_wait_seconds: float) -> str | None:
    """Why ``job`` waits, or None: a queued job's missing worker (:func:`no_worker`), a
    running one's held results (:func:`rechecking`)."""
    if job.status == JobStatus.RUNNING and job.stage == RECHECK:
        return rechecking(s, job, held_wait_seconds)
    if job.status != JobStatus.QUEUED:
        return None
    return no_worker(s, job.target_gpu, now, lease_seconds)


def no_worker(s: Session, model: str | None, now: datetime, lease_seconds: float
              ) -> str | None:
    """Why a queued job for GPU model ``model`` (None: any) waits: no worker of it has
    registered, or none has been seen within a lease."""
    who = f"GPU model {model!r}" if model else "any GPU model"
    worker = workers.latest_of_model(s, model)
    if worker is None:
        return f"no worker of {who} has registered: start one (kernelsearch worker)"
    quiet = (now - worker.last_seen).total_seconds()
    if quiet > lease_seconds:
        return (f"no worker of {who} has been seen for {quiet:.0f} s (the last was "
                f"{worker.name!r})")
    return None


def rechecking(s: Session, job: JobRecord, held_wait_seconds: float) -> str | None:
    """Why a job whose search is over has not decided (``AgentLoop.recheck_wait``)."""
    held = cands.held_outstanding(s, job.id)
    until = recheck_until(job, held, held_wait_seconds)
    if until is None:
        return None
    ids = ", ".join(str(i) for i in sorted(held))
    return (f"its search is over; the decision waits for another worker to re-measure "
            f"held candidate{'s' if len(held) > 1 else ''} {ids} (held as faster than the "
            f"roofline allows) until {until.isoformat(timespec='seconds')} "
            f"(KS_HELD_WAIT_SECONDS={held_wait_seconds:g}, within the job's time budget), "
            "then decides without them")
