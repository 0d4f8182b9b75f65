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
