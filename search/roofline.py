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
Nothing here touches a GPU; ``workers.calibrate`` measures, the service stores.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from search.types import Problem

__all__ = ["Calibration", "Roofline", "roofline", "ENV_KEYS"]

#: The environment fields whose change makes a calibration stale.
ENV_KEYS = ("driver", "cuda", "torch")


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

    def _precision(self, dtype: str, allow_tf32: bool) -> str | None:
        """Which measured precision serves inputs of ``dtype`` (None: none was measured)."""
        if dtype == "fp32" and allow_tf32:
            measured = [k for k in ("fp32", "tf32") if self.peak_tflops.get(k)]
            return max(measured, key=lambda k: self.peak_tflops[k]) if measured else None
        return dtype if self.peak_tflops.get(dtype) else None

    def peak(self, dtype: str, allow_tf32: bool = False) -> float | None:
        """Peak TFLOP/s for inputs of ``dtype``; fp32 may run as tf32 when the policy allows."""
        key = self._precision(dtype, allow_tf32)
        return float(self.peak_tflops[key]) if key else None

    def peak_low(self, dtype: str, allow_tf32: bool = False) -> float | None:
        """The lowest pass behind :meth:`peak` (the peak itself when none was kept)."""
        key = self._precision(dtype, allow_tf32)
        if key is None:
            return None
        low = self.peak_low_tflops.get(key)
        return min(float(low), float(self.peak_tflops[key])) if low else \
            float(self.peak_tflops[key])

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

    def efficiency(self, measured_us: float | None) -> float | None:
        """``attainable / measured``, at most 1 (a measurement under the floor means the
        calibration was pessimistic, not that the kernel broke physics)."""
        if measured_us is None or measured_us <= 0:
            return None
        return min(1.0, self.attainable_us / measured_us)

    def efficiency_at_low_peak(self, measured_us: float | None) -> float | None:
        """The efficiency against the calibration's lowest pass: the top of the range the
        calibration's own noise leaves the efficiency in (the same as ``efficiency`` when the
        problem is memory-bound or the calibration kept no low pass)."""
        if measured_us is None or measured_us <= 0:
            return None
        return min(1.0, self.attainable_low_peak_us / measured_us)

    def to_dict(self) -> dict[str, Any]:
        return {"flops": self.flops, "bytes": self.bytes, "compute_us": self.compute_us,
                "memory_us": self.memory_us, "attainable_us": self.attainable_us,
                "bound": self.bound, "peak_tflops": self.peak_tflops,
                "bandwidth_gbs": self.bandwidth_gbs, "peak_low_tflops": self.peak_low_tflops,
                "attainable_low_peak_us": self.attainable_low_peak_us}


def roofline(problem: Problem, calibration: Calibration | None,
             allow_tf32: bool = False) -> Roofline | None:
    """The roofline of ``problem``, or ``None`` without a usable calibration."""
    if calibration is None or calibration.bandwidth_gbs <= 0:
        return None
    peak = calibration.peak(problem.dtype, allow_tf32)
    if peak is None or peak <= 0:
        return None
    low = calibration.peak_low(problem.dtype, allow_tf32) or peak
    compute_us = problem.flops / (peak * 1e12) * 1e6
    memory_us = problem.min_bytes / (calibration.bandwidth_gbs * 1e9) * 1e6
    return Roofline(problem.flops, problem.min_bytes, compute_us, memory_us, peak,
                    calibration.bandwidth_gbs, low, problem.flops / (low * 1e12) * 1e6)
