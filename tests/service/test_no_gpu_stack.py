"""The API side never imports torch, triton, cutlass_library or the kernels: checked in a fresh
interpreter (this one has torch loaded by the other tests), see ``no_gpu_stack.py``."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_the_api_serves_without_importing_the_gpu_stack() -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    res = subprocess.run([sys.executable, "-m", "tests.service.no_gpu_stack"], cwd=ROOT,
                         env=env, capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stdout + res.stderr
    assert "served requests without" in res.stdout
