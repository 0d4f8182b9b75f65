"""Probe (issue 18): the skinny split-K GEMM with a cluster reduction in distributed shared
memory (``skinny_dsmem.cu``, hand-written CUDA: Triton 3.6 has no clusters), interleaved with
the Triton skinny kernel's best configurations and cuBLAS on long-K shapes with m <= 32.

    OUT=DIR python -m scripts.bench.dsmem_probe

Compiles the .cu with nvcc (sm_90a) into DIR, checks every kernel against float64 on fresh
inputs into NaN-poisoned outputs and 20 repeats for bitwise equality, then times 7 interleaved
rounds (the worker's EventBench: L2 read flush, two rotated input sets). Rows go to
DIR/dsmem.json."""

from __future__ import annotations

import ctypes
import os
import subprocess

import torch

from kernel_templates.gemm import skinny
from kernel_templates.gemm.inputs import make_inputs
from kernel_templates.gemm.reference import reference_for
from scripts.bench.checked import checked_makers, interleaved, run_probe
from search.kinds.gemm.spec import GemmProblem
from workers.bench import EventBench

OUT = os.environ.get("OUT", "/tmp/dsmem")
HERE = os.path.dirname(os.path.abspath(__file__))
ROWS: list[dict] = []


def build() -> ctypes.CDLL:
    lib = os.path.join(OUT, "skinny_dsmem.so")
    subprocess.run(["nvcc", "-arch=sm_90a", "-O3", "-std=c++17", "-shared", "-Xcompiler",
                    "-fPIC", "-o", lib, os.path.join(HERE, "skinny_dsmem.cu")], check=True)
    so = ctypes.CDLL(lib)
    so.skinny_dsmem_launch.argtypes = [ctypes.c_void_p] * 3 + [ctypes.c_int] * 4 + [
        ctypes.c_void_p]
    so.skinny_dsmem_launch.restype = ctypes.c_int
    so.skinny_dsmem_max_clusters.argtypes = [ctypes.c_int, ctypes.c_int]
    return so


def dsmem(so: ctypes.CDLL, st, split: int):
    m, k = st.a.shape
    n = st.b.shape[1]

    def call() -> None:
        err = so.skinny_dsmem_launch(st.a.data_ptr(), st.b.data_ptr(), st.out.data_ptr(), m, n,
                                     k, split, ctypes.c_void_p(
                                         torch.cuda.current_stream().cuda_stream))
        if err:
            raise RuntimeError(f"launch failed: cudaError {err}")
    return call


def triton_skinny(cfg):
    return lambda st: (lambda: skinny.matmul_skinny(st.a, st.b, cfg, out=st.out))


def main() -> None:
    so = build()
    bench = EventBench(max_reps=300, target_ms=20.0, warmup_ms=10.0)
    for split in (8, 16):
        ROWS.append({"name": f"max active clusters of {split}",
                     "value": so.skinny_dsmem_max_clusters(split, 512)})
        print(ROWS[-1], flush=True)
    base = dict(BLOCK_M=32, BLOCK_N=64, SPLIT_K=16, num_warps=2, TMA=1)
    triton_cfgs = {"triton barrier 256/3": {**base, "BLOCK_K": 256, "num_stages": 3,
                                            "MODE": "barrier"},
                   "triton tagged 128/4": {**base, "BLOCK_K": 128, "num_stages": 4,
                                           "MODE": "tagged"}}
    for m, n, k in ((32, 512, 98304), (32, 512, 65536), (32, 1024, 32768), (20, 512, 98304)):
        p = GemmProblem(m, n, k)
        sh = f"{m}x{n}x{k}"
        sets = [make_inputs(p, "cuda", seed=1100 + i) for i in range(2)]
        refs = [reference_for(st) for st in sets]
        makers = {"cublas": lambda st: (lambda: torch.matmul(st.a, st.b, out=st.out))}
        for split in (16, 8):
            makers[f"dsmem split {split}"] = lambda st, s=split: dsmem(so, st, s)
        makers.update({name: triton_skinny(c) for name, c in triton_cfgs.items()})
        calls = checked_makers(makers, sets, refs, 20, sh, ROWS)
        interleaved(calls, bench, sh, ROWS)


if __name__ == "__main__":
    run_probe(main, OUT, "dsmem.json", ROWS)
