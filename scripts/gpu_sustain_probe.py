"""How much a short trial flatters a long GEMM: cold trial vs sustained timing, and verification
rounds kept per round (GPU only).

The roofline's peaks are *sustained* (``workers.tasks.calibrate`` times each peak GEMM after
500 ms back to back); a first-stage trial is timed after 25 ms of warm-up. This probe times the
library (cuBLAS) on the compute-bound public shapes both ways, plus the Triton kernel the full
search adopts on 8192^3, and runs interleaved verifications keeping every round's medians, so a
paired (per-round) comparison can be judged against the unpaired spread.

    python3 scripts/gpu_sustain_probe.py --out DIR     (writes DIR/sustain_probe.json)
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from search.roofline import Calibration, roofline  # noqa: E402
from search.types import Candidate, GemmProblem  # noqa: E402

SUSTAIN_MS = (300.0, 1000.0)
TRITON_8K = {"BLOCK_M": 128, "BLOCK_N": 256, "BLOCK_K": 64, "GROUP_M": 16, "SPLIT_K": 1,
             "num_warps": 8, "num_stages": 3}


def _problem(m: int, n: int, k: int, dtype: str = "bf16") -> GemmProblem:
    if dtype == "fp8_e4m3":
        return GemmProblem(m=m, n=n, k=k, dtype=dtype, out_dtype="bf16", layout_b="col")
    return GemmProblem(m=m, n=n, k=k, dtype=dtype)


CASES: list[tuple[GemmProblem, str, dict[str, Any]]] = [
    (_problem(4096, 4096, 4096), "cublas", {}),
    (_problem(8192, 8192, 8192), "cublas", {}),
    (_problem(8192, 8192, 8192), "triton", TRITON_8K),
    (_problem(2048, 4096, 14336), "cublas", {}),
    (_problem(4096, 1024, 4096), "cublas", {}),
    (_problem(1000, 3000, 2000), "cublas", {}),
    (_problem(4096, 4096, 4096, "fp8_e4m3"), "cublas", {}),
    (_problem(4096, 4096, 4096, "fp32"), "cublas", {}),
]
VERIFY: list[tuple[GemmProblem, dict[str, Any], dict[str, Any]]] = [
    (_problem(8192, 8192, 8192), {"backend": "cublas", "config": {}},
     {"backend": "triton", "config": TRITON_8K}),
    (_problem(4096, 4096, 4096), {"backend": "cublas", "config": {}},
     {"backend": "triton", "config": {**TRITON_8K, "GROUP_M": 8}}),
    (_problem(2048, 4096, 14336), {"backend": "cublas", "config": {}},
     {"backend": "triton", "config": {**TRITON_8K, "GROUP_M": 8}}),
]


def _timing(t: Any) -> dict[str, float]:
    return {"median_us": t.median_us, "p20_us": t.p20_us, "p80_us": t.p80_us, "reps": t.reps}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--repeats", type=int, default=2)
    args = ap.parse_args()
    import torch

    from kernel_templates.gemm.inputs import make_inputs
    from kernel_templates.gemm.reference import reference_for
    from workers.device import environment
    from workers.execute import ExecuteOptions, _bench, checked_calls, execute

    env = environment(None)
    bench = _bench(ExecuteOptions(), True)
    # the calibration and the verifications run as the worker runs those tasks
    cal_x = execute(Candidate(CASES[0][0], "calibrate").to_dict())["extra"]
    cal = Calibration(gpu_model=env.get("gpu", "?"), bandwidth_gbs=cal_x["bandwidth_gbs"],
                      peak_tflops=cal_x["peak_tflops"])
    out: dict[str, Any] = {"env": env, "calibration": cal_x, "cases": [], "verify": []}
    print("peaks", {k: round(v) for k, v in cal.peak_tflops.items()}, flush=True)
    for rep in range(args.repeats):
        for problem, backend, config in CASES if rep % 2 == 0 else CASES[::-1]:
            cand = Candidate(problem, backend, config)
            rf = roofline(problem, cal, False)
            time.sleep(1.0)  # let the clock recover between shapes
            trial = execute(cand.to_dict(), {"seed": 7})
            row: dict[str, Any] = {"problem": problem.to_dict(), "backend": backend,
                                   "config": config, "repeat": rep, "trial": trial}
            sets = [make_inputs(problem, torch.device("cuda"), 11)]
            calls, err, tol = checked_calls(cand, sets, reference_for(sets[0]), True)
            row["rel_error"] = err
            if not err <= tol:
                row["error"] = f"rel_error {err} over {tol}"
                out["cases"].append(row)
                continue
            fn = calls[0]
            one = trial.get("median_us") or 1.0
            for ms in SUSTAIN_MS:
                time.sleep(1.0)
                for _ in range(int(ms * 1e3 / one) + 1):
                    fn()
                torch.cuda.synchronize()
                row[f"sustained_{int(ms)}ms"] = _timing(bench(calls))
            effs = {"trial": rf.efficiency(trial["median_us"]) if trial.get("median_us") else None}
            for ms in SUSTAIN_MS:
                effs[f"sustained_{int(ms)}ms"] = rf.efficiency(
                    row[f"sustained_{int(ms)}ms"]["median_us"])
            row["efficiency"] = effs
            print(rep, problem.key(), backend, {k: round(v, 3) for k, v in effs.items() if v},
                  flush=True)
            out["cases"].append(row)
        for problem, lib, cus in VERIFY:
            time.sleep(1.0)
            cand = Candidate(problem, "verify", {"library": lib, "custom": cus, "rounds": 9})
            m = execute(cand.to_dict(), {"seed": 5, "n_sets": 1})
            x = m.get("extra") or {}
            L, C = x.get("library_us") or [], x.get("custom_us") or []
            d = [a - b for a, b in zip(L, C, strict=True)]
            row = {"problem": problem.to_dict(), "library": lib, "custom": cus, "repeat": rep,
                   "status": m.get("status"), "error": m.get("error"), "library_us": L,
                   "custom_us": C}
            if d:
                row["unpaired"] = {"gap": statistics.median(L) - statistics.median(C),
                                   "spread": max(max(L) - min(L), max(C) - min(C))}
                row["paired"] = {"gap": statistics.median(d), "spread": max(d) - min(d)}
            print(rep, "verify", problem.key(), row.get("unpaired"), row.get("paired"), flush=True)
            out["verify"].append(row)
    Path(args.out).mkdir(parents=True, exist_ok=True)
    (Path(args.out) / "sustain_probe.json").write_text(json.dumps(out, indent=1, default=str))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
