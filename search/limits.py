"""What the static rules of a search space need to know about a device (any problem kind)."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["DeviceLimits", "limits_for"]


@dataclass(frozen=True)
class DeviceLimits:
    """What the static rules need to know about a device."""

    smem_per_block: int = 232_448  # H100: 227 KiB opt-in per block
    max_warps: int = 32

    @classmethod
    def interpreter(cls) -> DeviceLimits:
        return cls(smem_per_block=1 << 30)



def limits_for(device_mode: str, smem_per_block: int) -> DeviceLimits:
    """Limits of a registered device (``search.types.Device`` fields)."""
    if device_mode != "cuda" or smem_per_block <= 0:
        return DeviceLimits.interpreter()
    return DeviceLimits(smem_per_block=smem_per_block)
