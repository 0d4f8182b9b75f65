#!/usr/bin/env bash
# One GPU-host session: the GPU tests, then `kernelsearch tune` on the three acceptance shapes
# (4096x4096x4096, 16x4096x4096, 32768x512x512, bf16, cuBLAS + CUTLASS + Triton; verdicts to
# compare with run 9 of docs/benchmarks/agent_h100_2026-11-24.md), then optionally the
# decision-loop benchmark. Logs and JSON go under OUTDIR, packed into OUTDIR/results.tgz after
# every step (a session cut short still brings back what it measured). About 6 minutes on an
# H100 by default; no step starts past DEADLINE and a running one is stopped there.
#   usage: scripts/gpu_session.sh OUTDIR
#   env:   TESTS="tests/gpu tests/workers"  what `pytest -m gpu` runs (default tests/gpu;
#                                           empty: no tests)
#          PYTEST_ARGS="-m 'gpu and not slow'"  replaces the default -m gpu
#          SHAPES="4096x4096x4096 16x4096x4096 32768x512x512"  tune shapes (empty: none)
#          BACKENDS=cublas,cutlass,triton  TRIALS=64 (tune's custom-trial budget)
#          AGENT_ONLY=0,4  also run `python -m scripts.bench agent --only 0,4` (default: not)
#          DEADLINE=540  seconds from the start
# Dependencies must be importable already: install the wheelhouse that scripts/wheelhouse.sh
# builds (README), and point KS_CUTLASS_CACHE at a cache `python -m scripts.bench
# cutlass-cache` filled, or the CUTLASS tests and searches compile their ops first.
set -uo pipefail
out=${1:?usage: scripts/gpu_session.sh OUTDIR}
mkdir -p "$out"
out=$(cd "$out" && pwd)
cd "$(dirname "$0")/.."
export PYTHONPATH=${PYTHONPATH:+$PYTHONPATH:}$PWD PYTHONUNBUFFERED=1
deadline=${DEADLINE:-540}
backends=${BACKENDS:-cublas,cutlass,triton}
start=$SECONDS
rc=0

left() { echo $(( deadline - (SECONDS - start) )); }
pack() { tar czf "$out/results.tgz.part" -C "$out" --exclude='results.tgz*' --exclude='*.db' \
           --exclude='triton-cache-*' . && mv "$out/results.tgz.part" "$out/results.tgz"; }
gpu_state() {
  nvidia-smi --query-gpu=name,uuid,driver_version,clocks.sm,clocks.max.sm,temperature.gpu,power.draw \
    --format=csv,noheader 2>&1 | sed "s/^/[$(date -u +%H:%M:%S)] $1: /"
}

{
  python3 -c 'import torch, triton; print("torch", torch.__version__, "cuda", torch.version.cuda,
"triton", triton.__version__, torch.cuda.get_device_name())'
  gpu_state start
} 2>&1 | tee "$out/env.txt"
# a run that names CUTLASS must have it: a worker without it silently weighs cuBLAS alone
case ",$backends," in *,cutlass,*)
  python3 -c 'import cutlass_library, nvMatmulHeuristics' 2>/dev/null || {
    echo "CUTLASS is among the backends but cutlass_library/nvMatmulHeuristics do not import:" \
         "install the wheelhouse of scripts/wheelhouse.sh (it has the cutlass extra)" \
      | tee -a "$out/env.txt"
    exit 2; } ;;
esac

tests=${TESTS-tests/gpu}
if [ -n "$tests" ]; then
  echo "== GPU tests: $tests"
  # shellcheck disable=SC2086
  eval timeout "$(left)" python3 -m pytest -q -p no:cacheprovider "${PYTEST_ARGS:--m gpu}" \
    $tests 2>&1 | tee "$out/gpu_tests.log"
  rc=$(( rc | PIPESTATUS[0] ))
  gpu_state tests >> "$out/env.txt"
  pack
fi

db="sqlite:///$out/tune.db"  # one database: the GPU is calibrated once for the three shapes
for shape in ${SHAPES-4096x4096x4096 16x4096x4096 32768x512x512}; do
  if [ "$(left)" -lt 30 ]; then
    echo "== tune $shape not started: $(left)s left" | tee -a "$out/env.txt"; break
  fi
  IFS=x read -r m n k <<< "$shape"
  echo "== kernelsearch tune $shape bf16 ($backends)"
  timeout "$(left)" python3 -m service.cli tune --m "$m" --n "$n" --k "$k" --dtype bf16 \
    --backends "$backends" --trials "${TRIALS:-64}" --db "$db" --json "$out/tune_$shape.json" \
    2>&1 | tee "$out/tune_$shape.log"
  rc=$(( rc | PIPESTATUS[0] ))
  pack
done

if [ -n "${AGENT_ONLY:-}" ]; then
  if [ "$(left)" -lt 60 ]; then
    echo "== agent benchmark not started: $(left)s left" | tee -a "$out/env.txt"
  else
    echo "== decision loop vs full search: shapes $AGENT_ONLY"
    timeout "$(left)" python3 -m scripts.bench agent --only "$AGENT_ONLY" --backends "$backends" \
      --out "$out/agent" 2>&1 | tee "$out/agent.log"
    rc=$(( rc | PIPESTATUS[0] ))
  fi
fi
gpu_state end >> "$out/env.txt"
pack
exit $rc
