"""What the static rules of a search space need to know about a device (any problem kind)."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["DeviceLimits", "limits_for"]

#: The shared memory the interpreter's limits allow (no real limit).
INTERPRETER_SMEM = 1 << 30


@dataclass(frozen=True)
class DeviceLimits:
    """What the static rules need to know about a device."""

    smem_per_block: int = 232_448  # H100: 227 KiB opt-in per block
    max_warps: int = 32
    #: SMs a grid can count on being resident at once (a grid barrier's limit); 0: unknown, or
    #: no limit (the interpreter runs programs one after another)
    sm_count: int = 0
    #: compute capability of a CUDA device ("9.0"); empty for the interpreter or unknown
    cc: str = ""

    @property
    def tma(self) -> bool:
        """Whether the device has TMA (tensor descriptors lower to it): CUDA sm_90 and newer."""
        major = self.cc.split(".")[0]
        return major.isdigit() and int(major) >= 9

    @property
    def interpreted(self) -> bool:
        """Whether these are the interpreter's limits (kernels run on the CPU)."""
        return self.smem_per_block >= INTERPRETER_SMEM

    @classmethod
    def interpreter(cls) -> DeviceLimits:
        return cls(smem_per_block=INTERPRETER_SMEM)


def limits_for(device_mode: str, smem_per_block: int, cc: str = "",
               sm_count: int = 0) -> DeviceLimits:
    """Limits of a registered device (``search.types.Device`` fields)."""
    if device_mode != "cuda" or smem_per_block <= 0:
        return DeviceLimits.interpreter()
    return DeviceLimits(smem_per_block=smem_per_block, cc=str(cc or ""),
                        sm_count=max(0, sm_count))
