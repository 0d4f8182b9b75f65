"""What this worker's accelerator is: the ``Device`` fingerprint, the backends it offers and
what it declares of them (both from the kernel registry's hooks), and the run environment.

Torch and triton are imported inside the functions, so importing this module stays cheap.
"""

from __future__ import annotations

import dataclasses
import logging
import platform
import socket
import subprocess
from functools import cache
from typing import Any

from search.types import INTERPRETER_GPU, Device

__all__ = ["catalogues", "detect_device", "environment", "nvidia_smi", "offered_backends"]

log = logging.getLogger("kernelsearch.worker")


def nvidia_smi(*fields: str, index: int = 0, timeout_s: float = 10.0) -> list[str] | None:
    """``nvidia-smi --query-gpu=FIELDS`` for GPU ``index``; ``None`` when it is absent or fails."""
    cmd = ["nvidia-smi", f"--query-gpu={','.join(fields)}", "--format=csv,noheader,nounits",
           f"--id={index}"]
    try:
        res = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s, check=True)
    except (OSError, subprocess.SubprocessError):
        return None
    line = res.stdout.strip().splitlines()[0] if res.stdout.strip() else ""
    values = [v.strip() for v in line.split(",")]
    return values if len(values) == len(fields) else None


def _versions() -> tuple[str, str]:
    import torch

    try:
        import triton

        triton_version = triton.__version__
    except ImportError:
        triton_version = ""
    return torch.__version__, triton_version


def offered_backends(device: Device) -> tuple[str, ...]:
    """The backends a worker on ``device`` offers: every backend registered for any kind
    (``kernel_templates.registry``) whose ``available`` hook lets this device run it."""
    from kernel_templates.registry import availability

    offered: set[str] = set()
    for (kind, backend), why in availability(device).items():
        if why is None:
            offered.add(backend)
        else:
            log.info("not offering %s for %s: %s", backend, kind, why)
    return tuple(sorted(offered))


def catalogues(device: Device) -> dict[str, dict[str, Any]]:
    """What this worker declares to the service when it registers, by ``"<kind>/<backend>"``:
    each offered backend's catalogue (the CUTLASS operations it can build, say), so the
    service searches over them and never enumerates them itself."""
    from kernel_templates.registry import catalogue_hooks

    out: dict[str, dict[str, Any]] = {}
    for (kind, backend), hook in catalogue_hooks().items():
        if backend in device.backends:
            body = hook(device)
            if body is not None:
                out[f"{kind}/{backend}"] = body
    return out


def detect_device(interpret: bool | None = None) -> Device:
    """The device a worker benchmarks on.

    ``interpret=None`` means: CUDA device 0 when there is one, else the Triton interpreter on
    the CPU. ``interpret=True`` reports the interpreter even on a GPU host.
    """
    import torch

    torch_version, triton_version = _versions()
    use_cuda = torch.cuda.is_available() if interpret is None else not interpret
    if not use_cuda:
        device = Device(gpu_model=INTERPRETER_GPU, mode="interpreter", torch=torch_version,
                        triton=triton_version)
        return dataclasses.replace(device, backends=offered_backends(device))
    if not torch.cuda.is_available():
        raise RuntimeError("interpret=False asks for CUDA, but torch sees no CUDA device")
    idx = torch.cuda.current_device()
    props = torch.cuda.get_device_properties(idx)
    smem = getattr(props, "shared_memory_per_block_optin", 0) or 0
    driver = nvidia_smi("driver_version", index=idx)
    device = Device(
        gpu_model=torch.cuda.get_device_name(idx),
        mode="cuda",
        sm_count=props.multi_processor_count,
        cc=f"{props.major}.{props.minor}",
        smem_per_block=int(smem),
        memory_bytes=int(props.total_memory),
        driver=driver[0] if driver else "",
        cuda=torch.version.cuda or "",
        torch=torch_version,
        triton=triton_version,
    )
    return dataclasses.replace(device, backends=offered_backends(device))


@cache
def _static_environment(interpret: bool | None) -> dict[str, Any]:
    dev = detect_device(interpret)
    return {
        "gpu": dev.gpu_model,
        "mode": dev.mode,
        "sm_count": dev.sm_count,
        "cc": dev.cc,
        "driver": dev.driver,
        "cuda": dev.cuda,
        "torch": dev.torch,
        "triton": dev.triton,
        "python": platform.python_version(),
        "hostname": socket.gethostname(),
    }


def environment(interpret: bool | None = None) -> dict[str, Any]:
    """What a measurement was taken under, for ``Measurement.env``: the device, the versions,
    the host and (on CUDA, read anew each call) the current and maximum SM clock in MHz."""
    env = dict(_static_environment(interpret))
    if env["mode"] == "cuda":
        import torch

        clocks = nvidia_smi("clocks.sm", "clocks.max.sm", index=torch.cuda.current_device())
        if clocks:
            env["sm_clock_mhz"], env["sm_clock_max_mhz"] = clocks
    return env
