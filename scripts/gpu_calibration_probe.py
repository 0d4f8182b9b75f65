"""How steady the device calibration is on one GPU: the calibration task, run several times
back to back as a worker runs it, with the GPU's identity and state before each (GPU only).

The roofline's peaks come from one calibration per GPU model; run 8 of the decision-loop
benchmark saw the bf16 peak at 805-806 TFLOP/s in two device calls and 762-772 in three others.
This probe tells a swing of one device (clock, temperature) from a swing between devices.

    python3 scripts/gpu_calibration_probe.py --out DIR [--repeats 5] [--idle-s 10]
    (writes DIR/calibration_probe.json)
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

from search.types import Candidate, GemmProblem  # noqa: E402
from workers.device import environment, nvidia_smi  # noqa: E402
from workers.execute import execute  # noqa: E402

STATE = ("uuid", "temperature.gpu", "power.draw", "clocks.sm", "clocks.max.sm")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--idle-s", type=float, default=10.0,
                    help="idle seconds before each calibration after the first")
    args = ap.parse_args()
    out_dir = Path(args.out)
    out_dir.mkdir(parents=True, exist_ok=True)
    runs: list[dict[str, Any]] = []
    for i in range(args.repeats):
        if i:
            time.sleep(args.idle_s)
        before = dict(zip(STATE, nvidia_smi(*STATE) or [""] * len(STATE), strict=True))
        t0 = time.perf_counter()
        m = execute(Candidate(GemmProblem(256, 256, 256), "calibrate").to_dict())
        wall = time.perf_counter() - t0
        after = dict(zip(STATE, nvidia_smi(*STATE) or [""] * len(STATE), strict=True))
        extra = m.get("extra") or {}
        if m.get("status") != "ok":
            print(f"calibration {i} failed: {m.get('status')} {m.get('error')}", flush=True)
            runs.append({"i": i, "status": m.get("status"), "error": m.get("error")})
            continue
        runs.append({"i": i, "before": before, "after": after, "wall_s": wall,
                     "peak_tflops": extra.get("peak_tflops"),
                     "burst_tflops": extra.get("burst_tflops"), "curve": extra.get("curve"),
                     "bandwidth_gbs": extra.get("bandwidth_gbs")})
        peaks = extra.get("peak_tflops") or {}
        print(f"{i}: {before['uuid'][-8:]} {before['temperature.gpu']}C -> "
              f"{after['temperature.gpu']}C  bf16 {peaks.get('bf16', 0):.0f}  "
              f"fp8 {peaks.get('fp8_e4m3', 0):.0f}  copy {extra.get('bandwidth_gbs', 0):.0f} GB/s"
              f"  bf16 curve {[round(t) for _, t in (extra.get('curve') or {}).get('bf16', [])]}"
              f"  ({wall:.1f} s)", flush=True)
    ok = [r for r in runs if r.get("peak_tflops")]
    summary: dict[str, Any] = {}
    for key in ("bf16", "fp8_e4m3", "fp32"):
        vals = [r["peak_tflops"][key] for r in ok if key in r["peak_tflops"]]
        if vals:
            summary[key] = {"min": min(vals), "max": max(vals), "median": statistics.median(vals),
                            "spread": (max(vals) - min(vals)) / statistics.median(vals)}
    print("summary", json.dumps({k: {kk: round(vv, 3) for kk, vv in v.items()}
                                 for k, v in summary.items()}), flush=True)
    (out_dir / "calibration_probe.json").write_text(json.dumps(
        {"env": environment(None), "idle_s": args.idle_s, "runs": runs, "summary": summary},
        indent=1, default=str))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
