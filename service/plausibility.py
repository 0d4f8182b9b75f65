"""Results faster than the roofline allows are held until another worker confirms them.

One worker alone cannot make a fake result the served one: a kernel measured faster than
``implausible_below`` (``KS_IMPLAUSIBLE_BELOW``, 0.5) times its roofline time on the worker's
GPU model is stored with status ``held`` (never served by ``/v1/best`` or chosen by a decision,
which read ``ok`` measurements only) and its candidate goes back to the queue for any other
worker. A re-measurement within :data:`CONFIRM_TOLERANCE` of the held time releases it (status
``ok``); any other outcome keeps it held, and the job's view says why.
"""

from __future__ import annotations

from db.records import CalibrationRecord, JobRecord, MeasurementRecord
from search.decision import Policy
from search.roofline import Calibration, roofline
from search.types import Measurement

__all__ = ["CONFIRM_TOLERANCE", "agrees", "verdict", "why_held"]

#: Two times agree when they differ by at most this share of the larger.
CONFIRM_TOLERANCE = 0.10


def why_held(job: JobRecord, gpu_model: str, measurement: Measurement,
             precision: str | None, share: float, cal: CalibrationRecord | None) -> str | None:
    """Why ``measurement`` (an ok kernel result on ``gpu_model``) is held, or None: it beats
    ``share`` of the roofline's time on ``cal``, that model's latest calibration (none, or one
    made on the interpreter: never held)."""
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
            "another worker")


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
