#!/usr/bin/env bash
# GPU host check in one call: GPU tests, an end-to-end job through the real service and a real
# worker (SQLite), and the GEMM benchmark. Logs and JSON go under OUTDIR.
#   usage: scripts/gpu_check.sh OUTDIR
#   env:   STAGES=tests,e2e,agent,cutlass,variants,skinny,bench (default tests,e2e,agent,bench;
#          run in the order given)  SHAPES=0,2,7,8 (benchmark shape indices, default all)
#          TRIALS=64  AGENT_TRIALS (default: the service's default budget)  CUTLASS_OPS=6
#          BENCH_SHAPES=path/to/gemm_public.json  TESTS="tests/workers tests/e2e" (default tests)
#          AGENT_MODES=agent,full  AGENT_BACKENDS=cublas,cutlass,triton
#          CUTLASS_ARGS="--cache DIR --keep-cache --extra-cached 24" (more gpu_cutlass_check.py
#          flags: e.g. reuse a cache built on another host of the same arch)
#          PEER=1 (0: skip max-autotune)
# Dependencies must already be importable (on a host without a package index: install the
# wheelhouse into /tmp/site and put it on PYTHONPATH first; see README).
set -uo pipefail
out=${1:-${OUT:-/tmp/ks-gpu}}
mkdir -p "$out"
cd "$(dirname "$0")/.."
export PYTHONPATH=${PYTHONPATH:-}:$PWD PYTHONUNBUFFERED=1
stages=${STAGES:-tests,e2e,agent,bench}
shapes_file=${BENCH_SHAPES:-shared/bench/gemm_public.json}
[ -f "$shapes_file" ] || shapes_file=../shared/bench/gemm_public.json
[ -f "$shapes_file" ] || shapes_file=docs/benchmarks/gemm_public.json
rc=0
{
  nvidia-smi --query-gpu=name,uuid,driver_version,clocks.sm,clocks.max.sm,temperature.gpu \
    --format=csv || true
  python3 -c 'import torch, triton; print("torch", torch.__version__, "cuda", torch.version.cuda,
"triton", triton.__version__, torch.cuda.get_device_name())'
} 2>&1 | tee "$out/env.txt"

for stage in ${stages//,/ }; do
  case $stage in
    tests)
      echo "== GPU tests"
      # shellcheck disable=SC2086
      python3 -m pytest -q -m gpu -p no:cacheprovider ${TESTS:-tests} 2>&1 \
        | tee "$out/gpu_tests.log"
      rc=$(( rc | ${PIPESTATUS[0]} )) ;;
    e2e)
      echo "== end to end: service + worker processes"
      timeout 300 python3 scripts/e2e_service.py 2>&1 | tee "$out/e2e.log"
      rc=$(( rc | ${PIPESTATUS[0]} )) ;;
    agent)
      echo "== decision loop vs full search"
      trials=(); [ -n "${AGENT_TRIALS:-}" ] && trials=(--trials "$AGENT_TRIALS")
      python3 scripts/bench_agent.py --shapes "$shapes_file" "${trials[@]}" \
        --modes "${AGENT_MODES:-agent,full}" --backends "${AGENT_BACKENDS:-cublas,cutlass,triton}" \
        --only "${SHAPES:-}" --out "$out/agent" 2>&1 | tee "$out/agent.log"
      rc=$(( rc | ${PIPESTATUS[0]} )) ;;
    cutlass)
      echo "== CUTLASS: enumerate, compile (cold, then warm cache), check, time"
      python3 scripts/gpu_cutlass_check.py --shapes "$shapes_file" --out "$out/cutlass" \
        --max-ops "${CUTLASS_OPS:-6}" --only "${SHAPES:-}" ${CUTLASS_ARGS:-} 2>&1 \
        | tee "$out/cutlass.log"
      rc=$(( rc | ${PIPESTATUS[0]} )) ;;
    variants)
      echo "== Triton Hopper variants and tf32"
      python3 scripts/gpu_variants_check.py --out "$out/variants" 2>&1 | tee "$out/variants.log"
      rc=$(( rc | ${PIPESTATUS[0]} )) ;;
    skinny)
      echo "== skinny split-K kernel"
      python3 scripts/gpu_skinny_check.py --out "$out/skinny" 2>&1 | tee "$out/skinny.log"
      rc=$(( rc | ${PIPESTATUS[0]} )) ;;
    bench)
      echo "== benchmark"
      peer=(); [ "${PEER:-1}" = 0 ] && peer=(--no-peer)
      python3 scripts/bench_gemm.py --shapes "$shapes_file" --trials "${TRIALS:-64}" \
        --only "${SHAPES:-}" --out "$out" "${peer[@]}" 2>&1 | tee "$out/bench.log"
      rc=$(( rc | ${PIPESTATUS[0]} )) ;;
    *) echo "unknown stage $stage"; rc=2 ;;
  esac
done
exit $rc
