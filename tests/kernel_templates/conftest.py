"""Run Triton in its CPU interpreter where there is no GPU; skip ``gpu`` tests there.

TRITON_INTERPRET must be set before triton is first imported, hence at conftest import.
"""

from __future__ import annotations

import os

import pytest
import torch

HAS_CUDA = torch.cuda.is_available()
if not HAS_CUDA:
    os.environ.setdefault("TRITON_INTERPRET", "1")


def pytest_runtest_setup(item: pytest.Item) -> None:
    if item.get_closest_marker("gpu") is not None and not HAS_CUDA:
        pytest.skip("needs an NVIDIA GPU")


@pytest.fixture
def device() -> str:
    """Where kernels run: the GPU when there is one, else the CPU (Triton interpreter)."""
    return "cuda" if HAS_CUDA else "cpu"
