#!/usr/bin/env bash
# One device call for the decision loop: GPU tests, then the decision-loop benchmark
# (scripts/bench_agent.py, agent and full side by side) once per shape set, each run its own
# process, so each calibrates anew: a set repeated is a second sample, calibration noise and
# all. After every step the results so far (logs, JSON, Markdown; no databases or caches) are
# packed into OUTDIR/results.tgz, so a call cut short still brings back what it measured.
#   usage: scripts/gpu_agent_session.sh OUTDIR
#   env:   RUNS="0,1,2;1,3"  shape-index sets of the public file, ';' between runs
#          TESTS="tests/workers tests/e2e/test_fp8_job.py"  GPU tests first (empty: none)
#          DEADLINE=560  seconds from the start after which no run begins, and at which a run
#          still going is stopped (its finished jobs stay in jobs_partial.json)
#          BENCH_SHAPES=path/to/gemm_public.json  BACKENDS=cublas,cutlass,triton
# Dependencies must be importable already (wheelhouse installed into PYTHONPATH; see README),
# and the CUTLASS ops in the cache KS_CUTLASS_CACHE points to, or the full search compiles them.
set -uo pipefail
out=${1:?usage: scripts/gpu_agent_session.sh OUTDIR}
work=${WORK:-/tmp/ks-session}
deadline=${DEADLINE:-560}
mkdir -p "$out" "$work"
cd "$(dirname "$0")/.."
export PYTHONPATH=${PYTHONPATH:-}:$PWD PYTHONUNBUFFERED=1
shapes=${BENCH_SHAPES:-shared/bench/gemm_public.json}
[ -f "$shapes" ] || shapes=docs/benchmarks/gemm_public.json
start=$SECONDS

gpu_state() {
  nvidia-smi --query-gpu=name,uuid,driver_version,clocks.sm,clocks.max.sm,temperature.gpu,power.draw \
    --format=csv,noheader 2>&1 | sed "s/^/[$(date -u +%H:%M:%S)] $1: /"
}
pack() { tar czf "$out/results.tgz" -C "$work" --exclude='*.db' --exclude='triton-cache-*' . ; }

{
  python3 -c 'import torch, triton; print("torch", torch.__version__, "cuda", torch.version.cuda,
"triton", triton.__version__, torch.cuda.get_device_name())'
  gpu_state start
} 2>&1 | tee "$work/env.txt"
# a benchmark that names CUTLASS must have it: a worker without it silently weighs cuBLAS alone
case ",${BACKENDS:-cublas,cutlass,triton}," in *,cutlass,*)
  python3 -c 'import cutlass_library, nvMatmulHeuristics' 2>/dev/null || {
    echo "CUTLASS is among the backends but cutlass_library/nvMatmulHeuristics do not import:" \
         "build the wheelhouse with WHEELHOUSE_EXTRAS=cutlass (README)" | tee -a "$work/env.txt"
    cp "$work/env.txt" "$out/env.txt"; exit 2; } ;;
esac
rc=0
if [ -n "${TESTS:-}" ]; then
  echo "== GPU tests: $TESTS"
  # shellcheck disable=SC2086
  timeout $(( deadline - (SECONDS - start) )) python3 -m pytest -q -m gpu -p no:cacheprovider \
    $TESTS 2>&1 | tee "$work/gpu_tests.log"
  rc=$(( rc | PIPESTATUS[0] ))
  gpu_state tests >> "$work/env.txt"
  pack
fi
IFS=';' read -ra sets <<< "${RUNS:-}"
i=0
for set in "${sets[@]}"; do
  left=$(( deadline - (SECONDS - start) ))
  if [ "$left" -lt 60 ]; then
    echo "== run $i ($set) not started: ${left}s left before the deadline" | tee -a "$work/env.txt"
    break
  fi
  echo "== run $i: shapes $set (${left}s left)"
  gpu_state "run$i" >> "$work/env.txt"
  timeout "$left" python3 scripts/bench_agent.py --shapes "$shapes" --only "$set" \
    --backends "${BACKENDS:-cublas,cutlass,triton}" --out "$work/run$i" 2>&1 \
    | tee "$work/run$i.log"
  rc=$(( rc | PIPESTATUS[0] ))
  pack
  i=$(( i + 1 ))
done
gpu_state end >> "$work/env.txt"
cp "$work/env.txt" "$out/env.txt"
pack
exit $rc
