"""Device fingerprint and run environment (interpreter mode on a CPU host)."""

from __future__ import annotations

import pytest
import torch

from search.types import INTERPRETER_GPU
from workers.device import detect_device, environment


def test_interpreter_device() -> None:
    d = detect_device(interpret=True)
    assert d.gpu_model == INTERPRETER_GPU and d.mode == "interpreter"
    assert d.torch == torch.__version__ and d.triton


def test_environment_keys() -> None:
    env = environment(interpret=True)
    assert {"gpu", "mode", "torch", "triton", "hostname", "driver", "cuda"} <= env.keys()


@pytest.mark.gpu
def test_cuda_device() -> None:
    d = detect_device()
    assert d.mode == "cuda" and d.sm_count > 0 and d.smem_per_block > 48 * 1024
    assert "." in d.cc and d.memory_bytes > 0
    assert "sm_clock_mhz" in environment()


def test_cutlass_is_offered_on_sm90_with_nvcc_only(monkeypatch: pytest.MonkeyPatch) -> None:
    from kernel_templates.gemm import cutlass as kc
    from workers.device import cutlass_unavailable

    assert "compute capability 8.0" in cutlass_unavailable("8.0")
    monkeypatch.setattr(kc, "cutlass_available", lambda: "cutlass_library is not installed")
    assert cutlass_unavailable("9.0") == "cutlass_library is not installed"
    monkeypatch.setattr(kc, "cutlass_available", lambda: None)

    def no_nvcc(*_a, **_k):
        raise kc.CompileError("nvcc is not usable (no such file)")

    monkeypatch.setattr(kc, "toolchain", no_nvcc)
    assert "nvcc is not usable" in cutlass_unavailable("9.0")
    monkeypatch.setattr(kc, "toolchain", lambda *_a, **_k: None)
    assert cutlass_unavailable("9.0") is None


def test_interpreter_never_offers_cutlass() -> None:
    assert "cutlass" not in detect_device(interpret=True).backends
