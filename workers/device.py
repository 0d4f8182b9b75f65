"""What this worker's accelerator is: the ``Device`` fingerprint and the run environment.

Torch and triton are imported inside the functions, so importing this module stays cheap.
"""

from __future__ import annotations

import logging
import platform
import socket
import subprocess
from functools import cache
from typing import Any

from search.kinds.gemm.spec import Backend
from search.types import INTERPRETER_GPU, Device

__all__ = ["cutlass_catalogue", "cutlass_unavailable", "detect_device", "environment",
           "nvidia_smi"]

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


def cutlass_unavailable(cc: str) -> str | None:
    """Why this worker cannot run CUTLASS candidates (``None``: it can): the generated kernels
    are sm_90a, so the GPU must be compute capability 9.x; enumerating needs the ``cutlass``
    extra (``cutlass_library``) and building needs a working nvcc."""
    if not cc.startswith("9."):
        return f"the CUTLASS kernels are sm_90a and this GPU is compute capability {cc or '?'}"
    from kernel_templates.gemm import cutlass as kc

    missing = kc.cutlass_available()
    if missing:
        return missing
    try:
        kc.toolchain()
    except kc.CompileError as exc:
        return str(exc).splitlines()[0]
    return None


def cutlass_catalogue(device: Device) -> dict[str, Any] | None:
    """What this worker declares to the service when it registers: the CUTLASS operations it
    can build (``Catalogue.encode``), or ``None`` when it does not offer CUTLASS. The service
    searches over them and never enumerates CUTLASS itself."""
    if Backend.CUTLASS.value not in device.backends:
        return None
    from kernel_templates.gemm import cutlass as kc

    return kc.catalogue().encode()


def detect_device(interpret: bool | None = None) -> Device:
    """The device a worker benchmarks on.

    ``interpret=None`` means: CUDA device 0 when there is one, else the Triton interpreter on
    the CPU. ``interpret=True`` reports the interpreter even on a GPU host.
    """
    import torch

    torch_version, triton_version = _versions()
    use_cuda = torch.cuda.is_available() if interpret is None else not interpret
    if not use_cuda:
        return Device(gpu_model=INTERPRETER_GPU, mode="interpreter", torch=torch_version,
                      triton=triton_version,
                      backends=(Backend.CUBLAS.value, Backend.TRITON.value))
    if not torch.cuda.is_available():
        raise RuntimeError("interpret=False asks for CUDA, but torch sees no CUDA device")
    idx = torch.cuda.current_device()
    props = torch.cuda.get_device_properties(idx)
    smem = getattr(props, "shared_memory_per_block_optin", 0) or 0
    driver = nvidia_smi("driver_version", index=idx)
    cc = f"{props.major}.{props.minor}"
    backends = [Backend.CUBLAS.value, Backend.TRITON.value]
    why = cutlass_unavailable(cc)
    if why is None:
        backends.insert(1, Backend.CUTLASS.value)
    else:
        log.info("not offering cutlass: %s", why)
    return Device(
        gpu_model=torch.cuda.get_device_name(idx),
        mode="cuda",
        sm_count=props.multi_processor_count,
        cc=cc,
        smem_per_block=int(smem),
        memory_bytes=int(props.total_memory),
        driver=driver[0] if driver else "",
        cuda=torch.version.cuda or "",
        torch=torch_version,
        triton=triton_version,
        backends=tuple(backends),
    )


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
