"""Results faster than the roofline allows are held until another worker confirms them.

One worker alone cannot make a fake result the served one: a kernel measured faster than
``implausible_below`` (``KS_IMPLAUSIBLE_BELOW``, 0.5) times its roofline time on the worker's
GPU model is stored with status ``held`` (never served by ``/v1/best`` or chosen by a decision,
which read ``ok`` measurements only) and its candidate goes back to the queue for any other
worker. A re-measurement within :data:`CONFIRM_TOLERANCE` of the held time releases it (status
``ok``); any other outcome keeps it held, and the job's view says why.

With more than one worker token configured (``KS_WORKER_TOKENS``, ``service.settings``) the
other worker must also be of another token identity (:func:`confirms_across`): workers of the
held result's identity are not leased its candidate, and a re-measurement by one anyway
(its lease taken before the identities changed) is refused and the candidate queued again, so
one token holder cannot confirm its own result under a second worker name. With one identity
or none, any other worker confirms.
"""

from __future__ import annotations

from db.records import CalibrationRecord, JobRecord, MeasurementRecord, WorkerRecord
from search.decision import Policy
from search.roofline import Calibration, roofline
from search.types import Measurement

__all__ = ["CONFIRM_TOLERANCE", "agrees", "confirms_across", "refused_within_identity",
           "verdict", "why_held"]

#: Two times agree when they differ by at most this share of the larger.
CONFIRM_TOLERANCE = 0.10


def why_held(job: JobRecord, gpu_model: str, measurement: Measurement,
             precision: str | None, share: float, cal: CalibrationRecord | None,
             across_identities: bool = False) -> str | None:
    """Why ``measurement`` (an ok kernel result on ``gpu_model``) is held, or None: it beats
    ``share`` of the roofline's time on ``cal``, that model's latest calibration (none, or one
    made on the interpreter: never held). ``across_identities``: only a worker of another
    token identity confirms it."""
    if share <= 0 or not measurement.ok or measurement.median_us is None:
        return None
    if cal is None or cal.env.get("mode") == "interpreter":
        # the interpreter's calibration times a small GEMM on the CPU: no ceilings (and a
        # worker claiming the interpreter mode changes nothing: it is the calibration's)
        return None
    calibration = Calibration(gpu_model, cal.bandwidth_gbs, cal.peak_tflops, cal.env,
                              cal.peak_low_tflops)
    policy = Policy.from_dict(job.policy)
    floor = roofline(job.problem, calibration, policy.allow_tf32,
                     (precision,) if precision else ())
    if floor is None or measurement.median_us >= share * floor.attainable_us:
        return None
    return (f"held: {measurement.median_us:.3g} us is under {share:g} x the roofline's "
            f"{floor.attainable_us:.3g} us on {gpu_model}; queued for re-measurement by "
            + ("a worker of another token identity" if across_identities
               else "another worker"))


def confirms_across(held_by: WorkerRecord | None, worker: WorkerRecord) -> bool:
    """Whether ``worker``'s re-measurement may confirm a result ``held_by`` reported, where
    confirmations must come from another token identity: both identities known, and not the
    same. A worker of no recorded identity (registered while worker endpoints were open, or
    before identities existed) confirms nothing and is confirmed by nobody until it
    re-registers."""
    return (held_by is not None and held_by.token_name is not None
            and worker.token_name is not None and held_by.token_name != worker.token_name)


def refused_within_identity(candidate_id: int, held_by: WorkerRecord | None,
                  worker: WorkerRecord) -> str:
    """Why ``worker``'s re-measurement of a held result is refused (:func:`confirms_across`)."""
    theirs = held_by.token_name if held_by is not None else None
    return (f"candidate {candidate_id}: its held result came from a worker of token identity "
            f"{theirs!r} and this worker's is {worker.token_name!r}; a re-measurement must "
            "come from a worker of another identity, so it went back to the queue for one")


def agrees(held: MeasurementRecord, again: Measurement) -> bool:
    """Whether a re-measurement confirms a held time."""
    if not again.ok or again.median_us is None or held.median_us is None:
        return False
    larger = max(held.median_us, again.median_us)
    return abs(held.median_us - again.median_us) <= CONFIRM_TOLERANCE * larger


def verdict(held: MeasurementRecord, again: Measurement, worker_id: int) -> str:
    """What the re-measurement said of a held result (kept in its ``error`` when refused)."""
    if not again.ok or again.median_us is None:
        return (f"refused: worker {worker_id}'s re-measurement ended {again.status}, not "
                f"confirming {held.median_us:.3g} us")
    return (f"refused: worker {worker_id} re-measured {again.median_us:.3g} us, not within "
            f"{CONFIRM_TOLERANCE:.0%} of the held {held.median_us:.3g} us")
