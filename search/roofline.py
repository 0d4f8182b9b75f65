"""Device calibration and the roofline of a problem: what the hardware could do at best.

A :class:`Calibration` is measured once per GPU model (and again when the driver or toolkit
changes): the bandwidth of a large device-to-device copy, counting bytes read *and* written, and
the throughput of large library GEMMs per input precision (the best of a few shapes, each
timed after running back to back long enough for the clock to settle: ``workers.tasks``). The
roofline of a problem is then ``max(flops / peak(dtype), min_bytes / bandwidth)``: no kernel
can beat it, so ``attainable / measured`` is how much of the hardware a kernel uses (its
*efficiency*).

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

from search.types import GemmProblem

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
    """

    gpu_model: str
    bandwidth_gbs: float
    peak_tflops: Mapping[str, float] = field(hash=False)
    env: Mapping[str, Any] = field(default_factory=dict, hash=False)

    def peak(self, dtype: str, allow_tf32: bool = False) -> float | None:
        """Peak TFLOP/s for inputs of ``dtype``; fp32 may run as tf32 when the policy allows."""
        if dtype == "fp32" and allow_tf32:
            values = [v for k, v in self.peak_tflops.items() if k in ("fp32", "tf32") and v]
            return max(values) if values else None
        value = self.peak_tflops.get(dtype)
        return float(value) if value else None

    def matches(self, env: Mapping[str, Any]) -> bool:
        """Whether this calibration still describes a device reporting ``env``."""
        return all(str(self.env.get(k, "")) == str(env.get(k, "")) for k in ENV_KEYS)

    def to_dict(self) -> dict[str, Any]:
        return {"gpu_model": self.gpu_model, "bandwidth_gbs": self.bandwidth_gbs,
                "peak_tflops": dict(self.peak_tflops), "env": dict(self.env)}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Calibration:
        return cls(str(data["gpu_model"]), float(data["bandwidth_gbs"]),
                   {str(k): float(v) for k, v in dict(data["peak_tflops"]).items()},
                   dict(data.get("env") or {}))


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

    @property
    def attainable_us(self) -> float:
        return max(self.compute_us, self.memory_us)

    @property
    def bound(self) -> str:
        return "compute" if self.compute_us >= self.memory_us else "memory"

    def efficiency(self, measured_us: float | None) -> float | None:
        """``attainable / measured``, at most 1 (a measurement under the floor means the
        calibration was pessimistic, not that the kernel broke physics)."""
        if measured_us is None or measured_us <= 0:
            return None
        return min(1.0, self.attainable_us / measured_us)

    def to_dict(self) -> dict[str, Any]:
        return {"flops": self.flops, "bytes": self.bytes, "compute_us": self.compute_us,
                "memory_us": self.memory_us, "attainable_us": self.attainable_us,
                "bound": self.bound, "peak_tflops": self.peak_tflops,
                "bandwidth_gbs": self.bandwidth_gbs}


def roofline(problem: GemmProblem, calibration: Calibration | None,
             allow_tf32: bool = False) -> Roofline | None:
    """The roofline of ``problem``, or ``None`` without a usable calibration."""
    if calibration is None or calibration.bandwidth_gbs <= 0:
        return None
    peak = calibration.peak(problem.dtype, allow_tf32)
    if peak is None or peak <= 0:
        return None
    compute_us = problem.flops / (peak * 1e12) * 1e6
    memory_us = problem.min_bytes / (calibration.bandwidth_gbs * 1e9) * 1e6
    return Roofline(problem.flops, problem.min_bytes, compute_us, memory_us, peak,
                    calibration.bandwidth_gbs)
