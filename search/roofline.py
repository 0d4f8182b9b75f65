"""Device calibration and the roofline of a problem: what the hardware could do at best.

A :class:`Calibration` is measured once per GPU model (and again when the driver or toolkit
changes): the bandwidth of a large device-to-device copy, counting bytes read *and* written, and
the throughput of large library GEMMs per input precision. The roofline of a problem is then
``max(flops / peak(dtype, flops), min_bytes / bandwidth)``: no kernel can beat it, so
``attainable / measured`` is how much of the hardware a kernel uses (its *efficiency*).

The peak depends on how much work a kernel does. A GPU under continuous load runs at the clock
its power limit allows: on the H100 of ``docs/benchmarks/agent_h100_2026-11-22.md`` cuBLAS ran
4096^3 in bf16 at 770-800 TFLOP/s but 8192^3 (8x the work, about 1.5 ms a call) at 680-760,
varying from run to run. So the calibration keeps each peak shape's sustained throughput
(measured after the device has run that GEMM back to back long enough to settle:
``workers.tasks``) as a *curve*, and a problem's compute peak is the best throughput measured
on a calibration GEMM doing at least as much work (the largest one's beyond them). Without a
curve (older calibrations) the single best peak applies.
Nothing here touches a GPU; ``workers.calibrate`` measures, the service stores.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from search.types import GemmProblem

__all__ = ["Calibration", "Roofline", "roofline", "parse_curve", "ENV_KEYS"]

#: The environment fields whose change makes a calibration stale.
ENV_KEYS = ("driver", "cuda", "torch")


@dataclass(frozen=True)
class Calibration:
    """Measured peaks of one GPU model under one driver/toolkit.

    ``bandwidth_gbs``: device copy, (bytes read + bytes written) / second / 1e9.
    ``peak_tflops``: by precision: ``bf16``, ``fp16``, ``fp32`` (full fp32), ``tf32``, and
    ``fp8_e4m3`` (``torch._scaled_mm``) where the device has fp8 GEMMs; a problem whose
    precision has no peak has no roofline (``roofline`` returns ``None``).
    ``curve``: by precision, ``(flops, TFLOP/s)`` of each calibration GEMM, sustained (may be
    empty: then ``peak_tflops`` applies to every problem size).
    """

    gpu_model: str
    bandwidth_gbs: float
    peak_tflops: Mapping[str, float] = field(hash=False)
    env: Mapping[str, Any] = field(default_factory=dict, hash=False)
    curve: Mapping[str, tuple[tuple[float, float], ...]] = field(default_factory=dict,
                                                                  hash=False)

    def peak(self, dtype: str, allow_tf32: bool = False, flops: float | None = None
             ) -> float | None:
        """Peak TFLOP/s for inputs of ``dtype`` (fp32 may run as tf32 when the policy allows);
        with ``flops``, the peak a kernel doing that much work can sustain (module doc)."""
        names = ("fp32", "tf32") if dtype == "fp32" and allow_tf32 else (dtype,)
        values = [v for v in (self._peak_of(n, flops) for n in names) if v]
        return max(values) if values else None

    def _peak_of(self, name: str, flops: float | None) -> float | None:
        best = self.peak_tflops.get(name)
        if not best:
            return None
        points = sorted(self.curve.get(name) or ())
        if flops is None or not points:
            return float(best)
        at_least = [t for f, t in points if f >= flops] or [points[-1][1]]
        return min(float(best), max(at_least))

    def matches(self, env: Mapping[str, Any]) -> bool:
        """Whether this calibration still describes a device reporting ``env``."""
        return all(str(self.env.get(k, "")) == str(env.get(k, "")) for k in ENV_KEYS)

    def to_dict(self) -> dict[str, Any]:
        return {"gpu_model": self.gpu_model, "bandwidth_gbs": self.bandwidth_gbs,
                "peak_tflops": dict(self.peak_tflops), "env": dict(self.env),
                "curve": {k: [list(p) for p in v] for k, v in self.curve.items()}}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Calibration:
        return cls(str(data["gpu_model"]), float(data["bandwidth_gbs"]),
                   {str(k): float(v) for k, v in dict(data["peak_tflops"]).items()},
                   dict(data.get("env") or {}), parse_curve(data.get("curve")))


def parse_curve(data: Any) -> dict[str, tuple[tuple[float, float], ...]]:
    """A stored curve (``{precision: [[flops, tflops], ...]}``, or None) as ``Calibration``
    holds it; raises ``ValueError``/``TypeError`` on a malformed one."""
    return {str(k): tuple((float(f), float(t)) for f, t in v)
            for k, v in dict(data or {}).items()}


@dataclass(frozen=True)
class Roofline:
    """The floor under any kernel's time for one problem on one calibrated device."""

    flops: int
    bytes: int
    compute_us: float
    memory_us: float
    #: the compute peak used (TFLOP/s; sustained for work of this size when the calibration
    #: has a curve) and the bandwidth (GB/s)
    peak_tflops: float | None = None
    bandwidth_gbs: float | None = None
    #: the peak is below the calibration's best: work this large runs power-limited
    sized_peak: bool = False

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
                "bandwidth_gbs": self.bandwidth_gbs, "sized_peak": self.sized_peak}


def roofline(problem: GemmProblem, calibration: Calibration | None,
             allow_tf32: bool = False) -> Roofline | None:
    """The roofline of ``problem``, or ``None`` without a usable calibration."""
    if calibration is None or calibration.bandwidth_gbs <= 0:
        return None
    peak = calibration.peak(problem.dtype, allow_tf32, problem.flops)
    if peak is None or peak <= 0:
        return None
    compute_us = problem.flops / (peak * 1e12) * 1e6
    memory_us = problem.min_bytes / (calibration.bandwidth_gbs * 1e9) * 1e6
    best = calibration.peak(problem.dtype, allow_tf32) or peak
    return Roofline(problem.flops, problem.min_bytes, compute_us, memory_us, peak,
                    calibration.bandwidth_gbs, sized_peak=peak < best)
