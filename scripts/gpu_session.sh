#!/usr/bin/env bash
# One GPU-host session: the GPU tests, then `kernelsearch tune` on the three acceptance shapes
# (4096x4096x4096, 16x4096x4096, 32768x512x512, bf16, every GEMM backend; verdicts to
# compare with run 9 of docs/benchmarks/agent_h100_2026-11-24.md), then optionally the
# side-by-side GEMM benchmark (the hard shapes of issue 18, say) and the decision-loop
# benchmark. Logs and JSON go under OUTDIR, packed into OUTDIR/results.tgz after
# every step (a session cut short still brings back what it measured). About 6 minutes on an
# H100 by default; no step starts past DEADLINE and a running one is stopped there.
#   usage: scripts/gpu_session.sh OUTDIR
#   env:   TESTS="tests/gpu tests/workers"  what `pytest -m gpu` runs (default tests/gpu;
#                                           empty: no tests)
#          PYTEST_ARGS="-m 'gpu and not slow'"  replaces the default -m gpu
#          SHAPES="4096x4096x4096 16x4096x4096 32768x512x512"  tune shapes (empty: none)
#          BACKENDS=cublas,cublaslt,cutlass,...  (default: every GEMM backend)
#          TRIALS=64 (tune's custom-trial budget)
#          GEMM_BENCH=docs/benchmarks/gemm_hard.json  also run `python -m scripts.bench gemm
#                          --policy agent` on that shapes file (default: not); GEMM_ONLY=0,3
#                          its shape indices (default: all), GEMM_ARGS more options (--no-peer)
#          AGENT_ONLY=0,4  also run `python -m scripts.bench agent --only 0,4` (default: not);
#                          AGENT_MODES=agent: only the agent mode (default agent,full)
#          LT_PROBE="16x4096x4096 32768x512x512"  also run `python -m scripts.bench.lt_probe`
#                   on them (cuBLASLt's ranked algorithms and their re-split variants against
#                   cuBLAS's own pick; "all": its default shapes; default: not)
#          QUANT=1  also run `python -m scripts.bench quant` (the fp8 quantisation alone:
#                   two passes against panels; default: not)
#          LOWERED=1  also run `python -m scripts.bench lowered` (bf16 computed in fp8 taken
#                     apart: quantisation, product, whole call, row against block scales;
#                     LOWERED_SHAPES=MxNxK,... its shapes; default: not)
#          PRECISION_SHAPES="4096x4096x4096"  also run `python -m scripts.bench precision` on
#                                           them (fp8 and bf16-in-fp8 side by side; default: not)
#          CUTLASS_BUILD="docs/benchmarks/gemm_hard.json:8 docs/benchmarks/precision.json:4"
#                          first fill KS_CUTLASS_CACHE (default OUTDIR/cutlass-cache) with
#                          `python -m scripts.bench cutlass-cache` on this host's cores, the
#                          first N ranked ops of each shape file (default: not); the cache is
#                          packed into OUTDIR/cutlass_cache.tgz to carry to the next session
#          PRECISION_ARGS, AGENT_ARGS  more options of those two benchmarks
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
backends=${BACKENDS:-cublas,cublaslt,cutlass,repaired,triton,triton_repair,triton_streamk,triton_skinny}
start=$SECONDS
rc=0

left() { echo $(( deadline - (SECONDS - start) )); }
# The archive is written outside OUTDIR, then moved in: a part file inside it changes the
# directory tar is reading, tar then exits 1 ("file changed as we read it") and the move
# would be skipped, leaving an older archive.
pack() { local part; part=$(mktemp "${TMPDIR:-/tmp}/results.XXXXXX.tgz") || return 1
         tar czf "$part" -C "$out" --exclude='results.tgz*' --exclude='*.db' \
           --exclude='triton-cache-*' --exclude='cutlass-cache' --exclude='cutlass_cache.tgz' . \
           && mv "$part" "$out/results.tgz" || { rm -f "$part"; return 1; }; }
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

if [ -n "${CUTLASS_BUILD:-}" ]; then
  export KS_CUTLASS_CACHE=${KS_CUTLASS_CACHE:-$out/cutlass-cache}
  for spec in $CUTLASS_BUILD; do
    echo "== CUTLASS cache: ${spec%%:*}, ${spec##*:} ops per shape, into $KS_CUTLASS_CACHE"
    timeout "$(left)" python3 -m scripts.bench cutlass-cache --shapes "${spec%%:*}" \
      --max-ops "${spec##*:}" --jobs "$(nproc)" --cache "$KS_CUTLASS_CACHE" \
      --out "$out/cutlass_cache_$(basename "${spec%%:*}" .json)" 2>&1 \
      | tee -a "$out/cutlass_cache.log" | tail -n 15
    rc=$(( rc | PIPESTATUS[0] ))
  done
  tar czf "$out/cutlass_cache.tgz" -C "$KS_CUTLASS_CACHE" --exclude=locks . && \
    echo "cache packed: $(du -h "$out/cutlass_cache.tgz" | cut -f1)"
  pack
fi

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

if [ -n "${LT_PROBE:-}" ]; then
  echo "== cuBLASLt's ranked algorithms against cuBLAS's pick: $LT_PROBE"
  lt_shapes=$LT_PROBE; [ "$lt_shapes" = all ] && lt_shapes=""
  # shellcheck disable=SC2086
  OUT=$out timeout "$(left)" python3 -m scripts.bench.lt_probe $lt_shapes 2>&1 \
    | tee "$out/lt_probe.log"
  rc=$(( rc | PIPESTATUS[0] ))
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
    --backends "$backends" --trials "${TRIALS:-64}" --db "$db" --out "$out/tune_$shape.json" \
    2>&1 | tee "$out/tune_$shape.log"
  rc=$(( rc | PIPESTATUS[0] ))
  pack
done

if [ -n "${GEMM_BENCH:-}" ]; then
  if [ "$(left)" -lt 60 ]; then
    echo "== GEMM benchmark not started: $(left)s left" | tee -a "$out/env.txt"
  else
    echo "== GEMM side by side (agent policy): $GEMM_BENCH ${GEMM_ONLY:-all}"
    # no shape starts in the last two minutes (one job, its side by side and the peer)
    starts=$(( $(left) - 120 )); [ "$starts" -lt 0 ] && starts=0
    # shellcheck disable=SC2086
    timeout "$(left)" python3 -m scripts.bench gemm --shapes "$GEMM_BENCH" --policy agent \
      --only "${GEMM_ONLY:-}" --backends "$backends" --deadline "$starts" \
      ${GEMM_ARGS:-} --out "$out/gemm" 2>&1 | tee "$out/gemm.log"
    rc=$(( rc | PIPESTATUS[0] ))
    pack
  fi
fi

if [ -n "${QUANT:-}" ]; then
  echo "== fp8 quantisation alone: two passes against panels"
  timeout "$(left)" python3 -m scripts.bench quant --out "$out/quant.json" 2>&1 | tee "$out/quant.log"
  rc=$(( rc | PIPESTATUS[0] ))
  pack
fi

if [ -n "${LOWERED:-}" ]; then
  echo "== bf16 in fp8 taken apart: quantisation, product, whole call (${LOWERED_SHAPES:-default shapes})"
  timeout "$(left)" python3 -m scripts.bench lowered ${LOWERED_SHAPES:+--shapes "$LOWERED_SHAPES"} \
    --out "$out/lowered.json" 2>&1 | tee "$out/lowered.log"
  rc=$(( rc | PIPESTATUS[0] ))
  pack
fi

if [ -n "${PRECISION_SHAPES:-}" ]; then
  if [ "$(left)" -lt 60 ]; then
    echo "== precision benchmark not started: $(left)s left" | tee -a "$out/env.txt"
  else
    echo "== precision side by side: $PRECISION_SHAPES"
    timeout "$(left)" python3 -m scripts.bench precision --shapes "$PRECISION_SHAPES" \
      --backends "$backends" ${PRECISION_ARGS:-} --out "$out/precision" 2>&1 \
      | tee "$out/precision.log"
    rc=$(( rc | PIPESTATUS[0] ))
    pack
  fi
fi

if [ -n "${AGENT_ONLY:-}" ]; then
  if [ "$(left)" -lt 60 ]; then
    echo "== agent benchmark not started: $(left)s left" | tee -a "$out/env.txt"
  else
    echo "== decision loop vs full search: shapes $AGENT_ONLY"
    timeout "$(left)" python3 -m scripts.bench agent --only "$AGENT_ONLY" --backends "$backends" \
      --modes "${AGENT_MODES:-agent,full}" ${AGENT_ARGS:-} --out "$out/agent" 2>&1 \
      | tee "$out/agent.log"
    rc=$(( rc | PIPESTATUS[0] ))
  fi
fi
gpu_state end >> "$out/env.txt"
pack
exit $rc
