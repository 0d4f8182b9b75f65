"""Device calibration and the roofline of a problem: what the hardware could do at best.

A :class:`Calibration` is measured once per GPU model (and again when the driver or toolkit
changes): the bandwidth of a large device-to-device copy, counting bytes read *and* written, and
the throughput of large library GEMMs per input precision (the best of a few shapes, each
timed after running back to back long enough for the clock to settle: ``workers.tasks``). The
roofline of a problem is then ``max(flops / peak(dtype), min_bytes / bandwidth)``: no kernel
can beat it, so ``attainable / measured`` is how much of the hardware a kernel uses (its
*efficiency*).

A peak is the median of a few calibration passes, and it moves from pass to pass (on an H100
bf16 read 749-797 TFLOP/s in five passes two minutes apart): the calibration also keeps each
precision's lowest pass (``peak_low_tflops``), and :meth:`Roofline.efficiency_at_low_peak` is a
kernel's efficiency against it, the top of the range its efficiency may really have. The
decision loop treats a threshold inside that range as reached (a tie goes to the library).

One peak serves every problem size, on purpose. A power-limited device sustains less on a
long GEMM (the H100 held cuBLAS at about 725 TFLOP/s on 8192^3 against about 800 on
4096x4096x16384), and a peak that followed cuBLAS's sustained rate per size was tried: on the
H100 a Triton kernel then ran 8192^3 at 766-785 TFLOP/s, under that "floor", because how
much a kernel is throttled depends on the kernel (its DRAM traffic), not on the size alone.
A time under the floor says the calibration underestimates the device for those inputs, not
that a kernel broke physics. Within :data:`FLOOR_SLACK` it counts as at the roofline (efficiency
1); further under, the roofline is *refuted* for that kernel (:meth:`Roofline.refuted_by`): its
efficiency is unknown (``None``), and the decision loop judges nothing by it.

A calibration on the interpreter device (``cpu-interpreter``: a worker without a GPU) runs the
calibration path on the CPU (one 256^3 GEMM per precision, a 32 MiB copy): it checks the
pipeline, but its numbers are no ceiling of anything (a small CPU GEMM beats them), so it gives
no roofline (:attr:`Calibration.ceilings`; :func:`missing_roofline` says why there is none).
Nothing here touches a GPU; ``workers.calibrate`` measures, the service stores.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from search.types import INTERPRETER_GPU, Problem

__all__ = ["ENV_KEYS", "FLOOR_SLACK", "Calibration", "Roofline", "efficiency",
           "missing_roofline", "refutes", "roofline"]

#: The environment fields whose change makes a calibration stale.
ENV_KEYS = ("driver", "cuda", "torch")
#: How far under the roofline's floor a measured time may be and still count as at the
#: roofline: a peak moves from pass to pass and one peak serves every size (above), so a kernel
#: may run a little faster than the median peak allows. Further under, the floor is refuted.
FLOOR_SLACK = 0.10


@dataclass(frozen=True)
class Calibration:
    """Measured peaks of one GPU model under one driver/toolkit.

    ``bandwidth_gbs``: device copy, (bytes read + bytes written) / second / 1e9.
    ``peak_tflops``: by precision: ``bf16``, ``fp16``, ``fp32`` (full fp32), ``tf32``, and
    ``fp8_e4m3`` (``torch._scaled_mm``) where the device has fp8 GEMMs; a problem whose
    precision has no peak has no roofline (``roofline`` returns ``None``).
    ``peak_low_tflops``: by precision, the lowest calibration pass of the shape that set the
    peak (absent: one pass, or a calibration from before passes; the peak stands for it).
    """

    gpu_model: str
    bandwidth_gbs: float
    peak_tflops: Mapping[str, float] = field(hash=False)
    env: Mapping[str, Any] = field(default_factory=dict, hash=False)
    peak_low_tflops: Mapping[str, float] = field(default_factory=dict, hash=False)

    def precision(self, dtype: str, allow_tf32: bool = False, lower: Sequence[str] = ()
                  ) -> str | None:
        """Which measured precision's peak bounds inputs of ``dtype`` (None: none was measured):
        the fastest of the input precision, tf32 for fp32 when the policy allows it, and the
        ``lower`` precisions a policy allows kernels to compute in (fp8 e4m3 for bf16, say)."""
        options = [dtype, *lower]
        if dtype == "fp32" and allow_tf32:
            options.append("tf32")
        measured = [k for k in options if self.peak_tflops.get(k)]
        if not measured:
            return None
        return max(measured, key=lambda k: (self.peak_tflops[k], k == dtype))

    def peak(self, dtype: str, allow_tf32: bool = False, lower: Sequence[str] = ()
             ) -> float | None:
        """Peak TFLOP/s for inputs of ``dtype``; fp32 may run as tf32 when the policy allows,
        and any input in a ``lower`` precision the policy allows."""
        key = self.precision(dtype, allow_tf32, lower)
        return float(self.peak_tflops[key]) if key else None

    def peak_low(self, dtype: str, allow_tf32: bool = False, lower: Sequence[str] = ()
                 ) -> float | None:
        """The lowest pass behind :meth:`peak` (the peak itself when none was kept)."""
        key = self.precision(dtype, allow_tf32, lower)
        if key is None:
            return None
        low = self.peak_low_tflops.get(key)
        return min(float(low), float(self.peak_tflops[key])) if low else \
            float(self.peak_tflops[key])

    @property
    def ceilings(self) -> bool:
        """Whether its numbers are the device's ceilings (a roofline can rest on them): not on
        the interpreter device, whose calibration times the path on the CPU."""
        return self.gpu_model != INTERPRETER_GPU

    def matches(self, env: Mapping[str, Any]) -> bool:
        """Whether this calibration still describes a device reporting ``env``."""
        return all(str(self.env.get(k, "")) == str(env.get(k, "")) for k in ENV_KEYS)

    def to_dict(self) -> dict[str, Any]:
        return {"gpu_model": self.gpu_model, "bandwidth_gbs": self.bandwidth_gbs,
                "peak_tflops": dict(self.peak_tflops), "env": dict(self.env),
                "peak_low_tflops": dict(self.peak_low_tflops)}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Calibration:
        return cls(str(data["gpu_model"]), float(data["bandwidth_gbs"]),
                   {str(k): float(v) for k, v in dict(data["peak_tflops"]).items()},
                   dict(data.get("env") or {}),
                   {str(k): float(v) for k, v in dict(data.get("peak_low_tflops") or {}).items()})


@dataclass(frozen=True)
class Roofline:
    """The floor under any kernel's time for one problem on one calibrated device."""

    flops: int
    bytes: int
    compute_us: float
    memory_us: float
    #: the compute peak (TFLOP/s) and the bandwidth (GB/s) they were computed with
    peak_tflops: float | None = None
    bandwidth_gbs: float | None = None
    #: the lowest calibration pass's peak and the compute time at it (>= ``compute_us``)
    peak_low_tflops: float | None = None
    compute_low_peak_us: float | None = None
    #: the lower precision (a policy allowed it) whose peak bounds the compute time, if any
    lowered_to: str | None = None

    @property
    def attainable_us(self) -> float:
        return max(self.compute_us, self.memory_us)

    @property
    def attainable_low_peak_us(self) -> float:
        """The attainable time had the peak been the calibration's lowest pass."""
        return max(self.compute_low_peak_us or self.compute_us, self.memory_us)

    @property
    def bound(self) -> str:
        return "compute" if self.compute_us >= self.memory_us else "memory"

    def under_floor(self, measured_us: float | None) -> bool:
        """Whether ``measured_us`` is faster than the roofline allows (by any amount)."""
        return measured_us is not None and 0 < measured_us < self.attainable_us

    def refuted_by(self, measured_us: float | None) -> bool:
        """Whether ``measured_us`` is more than :data:`FLOOR_SLACK` under the floor: the
        calibration underestimates this device for these inputs, and the roofline says nothing
        of that kernel's efficiency."""
        return refutes(self.attainable_us, measured_us)

    def efficiency(self, measured_us: float | None) -> float | None:
        """``attainable / measured``, at most 1 (a time under the floor within
        :data:`FLOOR_SLACK` is at the roofline); ``None`` when there is no time, or when it
        refutes the roofline (:meth:`refuted_by`)."""
        return efficiency(self.attainable_us, measured_us)

    def efficiency_at_low_peak(self, measured_us: float | None) -> float | None:
        """The efficiency against the calibration's lowest pass: the top of the range the
        calibration's own noise leaves the efficiency in (the same as ``efficiency`` when the
        problem is memory-bound or the calibration kept no low pass; ``None`` where that is)."""
        if measured_us is None or measured_us <= 0 or self.refuted_by(measured_us):
            return None
        return min(1.0, self.attainable_low_peak_us / measured_us)

    def to_dict(self) -> dict[str, Any]:
        return {"flops": self.flops, "bytes": self.bytes, "compute_us": self.compute_us,
                "memory_us": self.memory_us, "attainable_us": self.attainable_us,
                "bound": self.bound, "peak_tflops": self.peak_tflops,
                "bandwidth_gbs": self.bandwidth_gbs, "peak_low_tflops": self.peak_low_tflops,
                "attainable_low_peak_us": self.attainable_low_peak_us,
                "lowered_to": self.lowered_to}


def refutes(attainable_us: float, measured_us: float | None) -> bool:
    """Whether a time is more than :data:`FLOOR_SLACK` under a floor of ``attainable_us``."""
    return measured_us is not None and 0 < measured_us < attainable_us * (1.0 - FLOOR_SLACK)


def efficiency(attainable_us: float, measured_us: float | None) -> float | None:
    """A time's share of a floor of ``attainable_us`` (:meth:`Roofline.efficiency`; what a
    client holding a decision's ``attainable_us`` computes the same way)."""
    if measured_us is None or measured_us <= 0 or refutes(attainable_us, measured_us):
        return None
    return min(1.0, attainable_us / measured_us)


def roofline(problem: Problem, calibration: Calibration | None,
             allow_tf32: bool = False, lower: Sequence[str] = ()) -> Roofline | None:
    """The roofline of ``problem``, or ``None`` without a usable calibration
    (:func:`missing_roofline` says why). ``lower``: the precisions below the input's that the
    job's kernels may compute in (its policy allows them and a tier computes them): the
    fastest calibrated one bounds the compute time, while the bytes stay the problem's own
    (its inputs read, its output written, once)."""
    if calibration is None or calibration.bandwidth_gbs <= 0 or not calibration.ceilings:
        return None
    peak = calibration.peak(problem.dtype, allow_tf32, lower)
    if peak is None or peak <= 0:
        return None
    low = calibration.peak_low(problem.dtype, allow_tf32, lower) or peak
    used = calibration.precision(problem.dtype, allow_tf32, lower)
    compute_us = problem.flops / (peak * 1e12) * 1e6
    memory_us = problem.min_bytes / (calibration.bandwidth_gbs * 1e9) * 1e6
    return Roofline(problem.flops, problem.min_bytes, compute_us, memory_us, peak,
                    calibration.bandwidth_gbs, low, problem.flops / (low * 1e12) * 1e6,
                    used if used in lower else None)


def missing_roofline(problem: Problem, calibration: Calibration | None,
                     allow_tf32: bool = False) -> str:
    """Why :func:`roofline` has none for ``problem`` (a clause; "" when it has one)."""
    if calibration is None:
        return "the device is not calibrated"
    if not calibration.ceilings:
        return (f"{calibration.gpu_model} is the CPU: its calibration checks the path and "
                "measures no ceilings")
    if calibration.bandwidth_gbs <= 0:
        return f"the calibration of {calibration.gpu_model} has no bandwidth"
    peak = calibration.peak(problem.dtype, allow_tf32)
    if peak is None or peak <= 0:
        return f"the calibration of {calibration.gpu_model} has no {problem.dtype} peak"
    return ""
