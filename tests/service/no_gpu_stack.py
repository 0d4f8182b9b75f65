"""The API without the GPU stack: build the app on SQLite, serve requests, and check that
nothing imported torch, triton, cutlass_library or the kernels.

Run as a module (``python -m tests.service.no_gpu_stack``) in a fresh interpreter: by
``test_no_gpu_stack.py`` in the main suite (where torch is installed but must stay unimported)
and by ``.ci/run`` in a virtual environment that has only the package's own dependencies.
A worker declares a two-operation CUTLASS catalogue, and the first stage still measures a
CUTLASS seed: the API host ranks what the worker declared. The dashboard's pages, scripts and
Plotly's bundle are served from the installed package.
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path
from typing import Any

GPU_STACK = ("torch", "triton", "cutlass_library", "kernel_templates", "workers")
GPU = "NVIDIA H100 80GB HBM3"


def _op(name: str, tile: list[int], schedule: str) -> list[Any]:
    return [name, tile, [1, 1, 1], schedule, "TmaWarpSpecialized", "default", None, 8, 8, 8, 8]


#: ``Catalogue.encode`` of two bf16 row-major operations (the wire form a worker sends)
CATALOGUE = {
    "source": "test", "family_fields": ["dtype_a", "dtype_b", "dtype_d", "layout_a",
                                        "layout_b", "arch"],
    "op_fields": ["name", "tile", "cluster", "kernel_schedule", "epilogue_schedule",
                  "tile_scheduler", "dtype_c", "alignment_a", "alignment_b", "alignment_c",
                  "alignment_d"],
    "families": [{"family": ["bf16", "bf16", "bf16", "row", "row", 90], "ops": [
        _op("op_128x128_coop", [128, 128, 64], "TmaWarpSpecializedCooperative"),
        _op("op_128x256_coop", [128, 256, 64], "TmaWarpSpecializedCooperative")]}],
}


def main() -> None:
    from fastapi.testclient import TestClient

    from service.app import create_app
    from service.settings import ServiceSettings

    with tempfile.TemporaryDirectory() as tmp:
        url = f"sqlite:///{Path(tmp) / 'ks.db'}"
        with TestClient(create_app(ServiceSettings(database_url=url))) as http:
            r = http.get("/v1/best", params={"m": 512, "n": 512, "k": 512, "dtype": "bf16"})
            assert r.status_code == 404, r.text  # served: nothing measured yet
            problem = {"kind": "gemm", "m": 512, "n": 512, "k": 512, "dtype": "bf16"}
            r = http.post("/v1/jobs", json={"problem": problem, "gpu": GPU,
                                             "policy": {"tune_library": False}})
            assert r.status_code == 201, r.text
            device = {"gpu_model": GPU, "mode": "cuda", "sm_count": 132, "cc": "9.0",
                      "smem_per_block": 232_448, "backends": ["cublas", "cutlass", "triton"]}
            r = http.post("/v1/workers/register", json={
                "name": "w", "device": device, "catalogues": {"gemm/cutlass": CATALOGUE}})
            assert r.status_code == 200, r.text
            lease = http.post(f"/v1/workers/{r.json()['worker_id']}/lease",
                              json={"max_candidates": 8},
                              headers={"X-Worker-Secret": r.json()["worker_secret"]})
            assert lease.status_code == 200, lease.text
            backends = {c["task"] or c["backend"] for c in lease.json()["candidates"]}
            assert {"calibrate", "cublas", "cutlass"} <= backends, backends
            # the dashboard ships with the package: templates, scripts and Plotly's bundle
            for path, text in (("/ui", "Tuned problems"), ("/ui/jobs", "Queued and running"),
                               ("/ui/static/problem.js", "Plotly.newPlot"),
                               ("/ui/vendor/plotly.min.js", "plotly.js")):
                r = http.get(path)
                assert r.status_code == 200 and text in r.text, (path, r.status_code)
    loaded = sorted(m for m in sys.modules if m.split(".")[0] in GPU_STACK)
    assert not loaded, f"the API imported {loaded}"
    print("the API served requests without", ", ".join(GPU_STACK))


if __name__ == "__main__":
    main()
